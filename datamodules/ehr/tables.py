"""The three event tables of the RawMed cohort, their columns and serialization order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableSpec:
    """One event table: its raw time column, item column, numeric and categorical columns.

    Attributes:
        name: table name (``labevents``, ``prescriptions`` or ``inputevents``).
        time: the raw file's time column.
        item: the item column (its value is the label text).
        numeric: numeric columns (floats).
        categorical: categorical columns, the item column first.
    """

    name: str
    time: str
    item: str
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """Serialized and CSV column order: the item, then the numeric, then the other categorical columns."""
        return (self.item, *self.numeric, *(c for c in self.categorical if c != self.item))


#: Table order (the AR sequence breaks time ties in this order).
TABLES: tuple[str, ...] = ("labevents", "prescriptions", "inputevents")

#: Per-table columns (MIMIC-IV names; the card's Data table).
TABLE_SPECS: dict[str, TableSpec] = {
    "labevents": TableSpec(
        "labevents",
        "charttime",
        "itemid",
        ("valuenum", "ref_range_lower", "ref_range_upper"),
        ("itemid", "value", "valueuom", "flag", "priority", "comments"),
    ),
    "prescriptions": TableSpec(
        "prescriptions",
        "starttime",
        "drug",
        ("doses_per_24_hrs", "dose_val_rx", "form_val_disp"),
        ("drug", "drug_type", "prod_strength", "dose_unit_rx", "form_unit_disp", "route"),
    ),
    "inputevents": TableSpec(
        "inputevents",
        "starttime",
        "itemid",
        ("amount", "rate", "patientweight", "totalamount", "originalamount", "originalrate"),
        (
            "itemid",
            "amountuom",
            "rateuom",
            "ordercategoryname",
            "secondaryordercategoryname",
            "ordercomponenttypedescription",
            "ordercategorydescription",
            "totalamountuom",
            "isopenbag",
        ),
    ),
}

#: patientweight is left out of item-level metrics (official ``item_unrelated``).
ITEM_UNRELATED: dict[str, tuple[str, ...]] = {"inputevents": ("patientweight",)}


class EHRFormatError(ValueError):
    """A file of the EHR data that does not have the expected layout (one line naming the file, field, expectation)."""
