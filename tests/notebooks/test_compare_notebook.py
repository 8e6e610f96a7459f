"""``notebooks/07_compare.ipynb`` executed with papermill on the session's published run of
the simulated Mac and its forged checkpoint (:mod:`tests.helpers.forged_runs`)."""

from __future__ import annotations

import nbformat
import pytest

from tests.helpers import ROOT
from tests.helpers.forge import snapshot


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
