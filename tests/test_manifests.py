"""Methods declare themselves: manifests resolve, the README table is generated from them, and a scratch method
added outside the repository plugs in with no edit of a shared file (short names, shape links, tiny overrides)."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import QUIET, ROOT

import zoo
from zoo.cli import main
from zoo.core import registry
from zoo.core.manifest import Manifest


def test_manifest_paths_resolve() -> None:
    """Every declared class path imports and names its class; the main config exists; every tiny glob matches a
    config of the method (a typo would otherwise only show when a user or a test runs it)."""
    for slug, m in registry.manifests().items():
        for path in m.class_paths():
            module, _, name = path.rpartition(".")
            assert hasattr(importlib.import_module(module), name), path
        assert (ROOT / m.config).is_file(), m.config
        names = [p.name for p in (ROOT / "configs" / slug).glob("*.yaml")]
        for pattern in m.tiny:
            assert any(m.tiny_overrides(n) for n in names if re.fullmatch(pattern.replace("*", ".*"), n)), pattern


def test_extras_are_declared_in_pyproject() -> None:
    """A manifest's `extra` is an optional-dependency group, and the `all` group pulls every method's group."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extras = {m.extra for m in registry.manifests().values()} - {None}
    assert extras <= groups.keys(), extras - groups.keys()
    pulled = {name for entry in groups["all"] for name in re.search(r"\[(.*)\]", entry).group(1).split(",")}
    assert extras == pulled
    assert "zoo[all]" in groups["test"]


def test_readme_table_is_generated_from_the_manifests() -> None:
    """The committed README's methods table equals `zoo list --markdown` (regenerate it when a manifest changes)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- methods:begin[^>]*-->\n(.*?)\n<!-- methods:end -->", text, re.S)
    assert block is not None, "README.md lost its <!-- methods:begin/end --> markers"
    assert block.group(1) == registry.markdown_table(), "README table is stale: paste `zoo list --markdown` into it"


def test_list_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() == registry.markdown_table()


def test_bad_manifest_is_refused() -> None:
    with pytest.raises(ValueError, match="configs/x/"):
        Manifest(slug="x", paper="p", module="a.B", datamodule="a.C", config="configs/y/default.yaml", status="done")
    with pytest.raises(ValueError, match="dotted class path"):
        Manifest(slug="x", paper="p", module="B", datamodule="a.C", config="configs/x/default.yaml", status="done")


SCRATCH = {
    "manifest.py": """
        from zoo.core.manifest import Manifest

        MANIFEST = Manifest(
            slug="scratch", paper="A scratch method (tests)", module="zoo.scratch.module.ScratchModule",
            datamodule="zoo.scratch.module.ScratchDataModule", config="configs/scratch/default.yaml",
            status="specified", tiny={"*": ("--data.init_args.n=32",)}, shapes=("n_widgets",),
        )
    """,
    "module.py": """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        from zoo.core import ZooDataModule, ZooModule


        class ScratchDataModule(ZooDataModule):
            def __init__(self, n: int = 1000, width: int = 3) -> None:
                super().__init__()
                self.n, self.n_widgets, self.input_dim = n, width, width

            def train_dataloader(self) -> DataLoader:
                x = torch.randn(self.n, self.n_widgets)
                return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)


        class ScratchModule(ZooModule):
            def __init__(self, n_widgets: int = 0, lr: float = 0.01) -> None:
                self.n_widgets = n_widgets
                super().__init__(lr=lr)

            def configure_models(self) -> None:
                self.model = torch.nn.Linear(self.n_widgets, 1)

            def compute_loss(self, batch):
                x, y = batch
                return {"loss": torch.nn.functional.mse_loss(self.model(x), y)}
    """,
}


@pytest.fixture
def scratch_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A method package `zoo.scratch` and its config, both outside the repository; no shared file edited."""
    package = tmp_path / "zoo_ext" / "scratch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, body in SCRATCH.items():
        (package / name).write_text(textwrap.dedent(body))
    config = tmp_path / "configs" / "scratch" / "default.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("model:\n  class_path: ScratchModule\ndata:\n  class_path: ScratchDataModule\n"
                      "trainer: {max_steps: 3, logger: false, enable_checkpointing: false}\n")  # fmt: skip
    monkeypatch.setattr(zoo, "__path__", [*zoo.__path__, str(package.parent)])
    registry.manifests.cache_clear()
    yield config
    registry.manifests.cache_clear()
    for name in [n for n in sys.modules if n.startswith("zoo.scratch")]:
        del sys.modules[name]


def test_scratch_method_plugs_in_without_shared_edits(scratch_method: Path, tmp_path: Path) -> None:
    """Listing, short class names, a new shape link declared by the manifest (`n_widgets`) and the manifest's tiny
    overrides all work for a method that only added its own package and config."""
    manifest = registry.manifests()["scratch"]
    assert registry.CLASSES["ScratchModule"] == "zoo.scratch.module.ScratchModule"
    args = ["fit", "-c", str(scratch_method), *QUIET, *manifest.tiny_overrides(str(scratch_method)),
            f"--trainer.default_root_dir={tmp_path}"]  # fmt: skip
    cli = main(args)
    assert cli.model.n_widgets == 3 and cli.datamodule.n == 32 and cli.trainer.global_step == 3
    assert cli.datamodule.n_arms is None  # an unset core shape stays None


def test_method_test_files_follow_one_naming_scheme() -> None:
    """tests/<slug>/test_<what>.py where <what> is model, module, data[_topic], callback[_topic], baselines, behaviour,
    bad_inputs, reproduce[_plots], ddp, or the name of one of the method's own source files (CONTRIBUTING.md,
    "Rules")."""
    for slug in registry.manifests():
        sources = sorted(p.stem for p in (ROOT / "zoo" / slug).glob("*.py") if not p.stem.startswith("_"))
        words = "|".join(["model", "module", r"data(_\w+)?", r"callback(_\w+)?", "baselines", "behaviour", "bad_inputs",
                          "reproduce(_plots)?", "ddp", *sources])  # fmt: skip
        for path in (ROOT / "tests" / slug).glob("test_*.py"):
            assert re.fullmatch(rf"test_({words})\.py", path.name), f"tests/{slug}/{path.name}"
