"""The committed notebooks are exactly what scripts/make_notebooks.py generates."""

import sys

import nbformat

from verifylib.params import PARAMETER_KEYS

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import make_notebooks  # noqa: E402


def test_notebooks_match_generator():
    for stage in make_notebooks.STAGES:
        committed = nbformat.read(ROOT / "notebooks" / f"{stage}.ipynb", as_version=4)
        assert committed == make_notebooks.make(stage), f"regenerate {stage}"


def test_parameters_cell_declares_every_key():
    for stage in make_notebooks.STAGES:
        nb = nbformat.read(ROOT / "notebooks" / f"{stage}.ipynb", as_version=4)
        cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(cells) == 1
        names = {l.split("=")[0].strip() for l in cells[0].source.splitlines()
                 if "=" in l and not l.startswith("#")}
        assert names == set(PARAMETER_KEYS) | {"run_dir"}
