"""``notebooks/07_compare.ipynb`` executed with papermill on the session's published run of
the simulated Mac and its forged checkpoint (:mod:`tests.helpers.forged_runs`)."""

from __future__ import annotations

import nbformat
import pytest

from tests.helpers import ROOT
from tests.helpers.forge import snapshot
from tests.helpers.forged_runs import checkpoint2, parity_not_run, three_blocks
from tests.helpers.published_runs import simulated_published_run

# ----------------------------------------------------------------------------- forging runs


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def published(tmp_path_factory):
    return simulated_published_run(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def runs(published, tmp_path_factory):
    """The published run and its forged variants (one clone each per module)."""
    base = tmp_path_factory.mktemp("compare-runs")
    a = published.run_dir
    return {"a": a, "b": checkpoint2(a, base / "ckpt2"), "short": three_blocks(a, base / "short"),
            "not_run": parity_not_run(a, base / "not-run")}


@pytest.mark.physical
@pytest.mark.notebook
def test_compare_notebook_against_published_runs(runs, tmp_path):
    import papermill as pm
    before = {k: snapshot(runs[k]) for k in ("a", "b")}
    out = tmp_path / "cmp.ipynb"
    pm.execute_notebook(str(ROOT / "notebooks" / "07_compare.ipynb"), str(out),
                        parameters={"runs": [str(runs["a"]), str(runs["b"])],
                                    "allow_simulated": True},
                        progress_bar=False, cwd=str(tmp_path), kernel_name="python3")
    nb = nbformat.read(out, as_version=4)
    html = "".join(o.get("data", {}).get("text/html", "") for c in nb.cells
                   if c.cell_type == "code" for o in c.outputs)
    assert "layers.2.fc1" in html and "What changed" in html
    assert {k: snapshot(runs[k]) for k in ("a", "b")} == before
