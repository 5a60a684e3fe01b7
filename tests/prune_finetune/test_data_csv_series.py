"""The LTSF CSV reader never bends a file silently (issue #19): what pandas would coerce is an error naming the line,
and every documented change to the table (dropped or reordered columns, forward fill, unused rows) is announced.

Each test names the silent change it catches. Files are written under ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from datamodules.timeseries.csv_series import ETT_COLUMNS, read_series_csv
from datamodules.timeseries.ltsf_datamodule import LTSFDataModule


def _hourly(rows: int, start: str = "2020-01-01") -> list[str]:
    return list(pd.date_range(start, periods=rows, freq="h").strftime("%Y-%m-%d %H:%M:%S"))


def _write(tmp_path: Path, name: str, lines: list[str]) -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _announced(capsys: pytest.CaptureFixture[str]) -> str:
    return "\n".join(line for line in capsys.readouterr().err.splitlines() if line.startswith("zoo: "))


def test_a_short_row_is_an_error_not_nan_filled(tmp_path: Path) -> None:
    """pandas pads a row with too few fields with NaN, which nan_policy=ffill then fills from the row above."""
    dates = _hourly(6)
    path = _write(tmp_path, "short.csv", ["date,a,b", *[f"{d},{i},{i}" for i, d in enumerate(dates)]])
    lines = Path(path).read_text().splitlines()
    lines[3] = f"{dates[2]},2"
    Path(path).write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"short\.csv: line 4: 2 fields; expected 3, one per header column"):
        read_series_csv(path)


def test_an_extra_field_on_every_row_is_an_error_not_an_index(tmp_path: Path) -> None:
    """With one field more than the header on every row, pandas silently takes the first column as the index and
    shifts every column name by one (the dates would be read from the first series)."""
    rows = [f"{i},{d},{i}.5" for i, d in enumerate(_hourly(5))]
    path = _write(tmp_path, "shifted.csv", ["date,a", *rows])
    with pytest.raises(ValueError, match=r"shifted\.csv: line 2: 3 fields; expected 2"):
        read_series_csv(path)


def test_a_repeated_column_name_is_an_error_not_renamed(tmp_path: Path) -> None:
    """pandas renames a second ``a`` to ``a.1``, so the duplicate check on the frame never fired."""
    path = _write(tmp_path, "dup.csv", ["date,a,a", *[f"{d},1,2" for d in _hourly(5)]])
    with pytest.raises(ValueError, match=r"dup\.csv: line 1: column name\(s\) \['a'\] appear twice"):
        read_series_csv(path)


def test_header_only_and_empty_files_name_the_problem(tmp_path: Path) -> None:
    """A header-only file used to reach the splits as 0 rows; an empty one gave pandas' "No columns to parse"."""
    with pytest.raises(ValueError, match=r"head\.csv: no data rows after the header"):
        read_series_csv(_write(tmp_path, "head.csv", ["date,a"]))
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match=r"empty\.csv: empty file"):
        read_series_csv(str(tmp_path / "empty.csv"))


def test_blank_lines_keep_line_numbers_right(tmp_path: Path) -> None:
    """pandas skips blank lines, so ``data row r`` was ``line r + 1`` only without them: the line must be the file's."""
    dates = _hourly(4)
    path = _write(tmp_path, "blank.csv", ["date,a", f"{dates[0]},1", "", f"{dates[1]},x"])
    with pytest.raises(ValueError, match=r"non-numeric value 'x' in column 'a' at data row 2 \(line 4\)"):
        read_series_csv(path)


def test_mixed_date_formats_are_an_error_iso_precisions_and_offsets_are_read(tmp_path: Path) -> None:
    """pandas' per-value fallback read ``01/02/2020`` month first and ``13/02/2020`` day first in one column; ISO 8601
    at two precisions is one format, and offsets that change with daylight saving are one instant scale (UTC)."""
    path = _write(tmp_path, "mixed.csv", ["date,a", "01/02/2020,1", "13/02/2020,2", "14/02/2020,3"])
    with pytest.raises(ValueError, match=r"mixed\.csv: column 'date' has the value '13/02/2020' at data row 2 \(line "
                       r"3\); expected the format '%m/%d/%Y' of the first value '01/02/2020'"):  # fmt: skip
        read_series_csv(path)
    iso = read_series_csv(_write(tmp_path, "iso.csv", ["date,a", "2020-01-01,1", "2020-01-01 01:00,2"]))
    assert list(iso.dates) == [pd.Timestamp("2020-01-01 00:00"), pd.Timestamp("2020-01-01 01:00")]
    dst = ["date,a", "2020-03-29T01:30:00+01:00,1", "2020-03-29T03:30:00+02:00,2", "2020-03-29T04:30:00+02:00,3"]
    offsets = read_series_csv(_write(tmp_path, "dst.csv", dst))
    assert list(np.diff(offsets.dates.to_numpy()).astype("timedelta64[h]").astype(int)) == [1, 1]


def test_forward_fill_and_dropped_leading_rows_are_announced(tmp_path: Path, capsys) -> None:
    """nan_policy=ffill wrote values and dropped rows without a word."""
    dates = _hourly(6)
    rows = [f"{dates[0]},,1", f"{dates[1]},2,2", f"{dates[2]},,3", *[f"{d},{i},{i}" for i, d in enumerate(dates[3:])]]
    parsed = read_series_csv(_write(tmp_path, "gaps.csv", ["date,a,b", *rows]))
    assert len(parsed.values) == 5
    said = _announced(capsys)
    assert "gaps.csv: forward-filled 1 missing value(s) (first: column 'a' at data row 3 (line 4)); dropped the " \
           "first 1 row(s), which no earlier value fills" in said  # fmt: skip


def test_left_out_and_reordered_columns_are_announced(tmp_path: Path, capsys) -> None:
    """An index column, a text column and OT's move to the end changed the channels silently; True/False became 1/0."""
    rows = [f"{i},{d},{i}.0,{i}.5,x,{'True' if i % 2 else 'False'}" for i, d in enumerate(_hourly(5))]
    parsed = read_series_csv(_write(tmp_path, "cols.csv", [",date,OT,load,label,flag", *rows]))
    assert parsed.names == ["load", "flag", "OT"]
    said = _announced(capsys)
    assert "index column(s) ['Unnamed: 0'] left out" in said and "text column(s) ['label'] left out" in said
    assert "OT moved last" in said and "True/False column(s) ['flag'] read as 1/0" in said
    read_series_csv(_write(tmp_path, "plain.csv", ["date,a", *[f"{d},1" for d in _hourly(3)]]))
    assert _announced(capsys) == ""  # nothing changed, nothing said


def test_an_ett_header_read_as_custom_is_announced(tmp_path: Path, capsys) -> None:
    """format=auto silently switched an ETT file with one missing hour to the custom 7:1:2 split."""
    dates = _hourly(6)
    del dates[3]
    rows = [f"{d},1,1,1,1,1,1,{i}" for i, d in enumerate(dates)]
    parsed = read_series_csv(_write(tmp_path, "ett_gap.csv", [",".join(ETT_COLUMNS), *rows]))
    assert parsed.format == "custom"
    assert "ett_gap.csv: the ETT columns but not one hourly / 15-minute step throughout" in _announced(capsys)


def test_ett_rows_past_the_test_border_are_announced(capsys) -> None:
    """The synthetic ETTh file has 17,420 rows; the ETT borders use 14,400 and the rest was dropped silently."""
    dm = LTSFDataModule(source="synthetic_ett")
    dm.setup()
    assert dm.split_rows["test"][1] == 14_400 and len(dm.values) == 17_420
    assert "rows [14400, 17420) lie past the ett_hour test border and are unused" in _announced(capsys)


def test_a_missing_path_fails_at_construction(tmp_path: Path) -> None:
    """The file was first looked at in setup, after the model (and any pretraining recipe) was built."""
    with pytest.raises(FileNotFoundError, match=r"--data.init_args.path=.*nope\.csv: no such local CSV file"):
        LTSFDataModule(path=str(tmp_path / "nope.csv"))
