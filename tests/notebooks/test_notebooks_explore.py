"""The stage notebooks are explorable, and pointed at a published run they only read it.

Each notebook keeps its one audit call (``vnb.audit``), then an *Explore* section with the
typed result in named variables. Executed by papermill against a published run, every
notebook reads the run through ``verifylib.open_run`` and the run stays byte-identical and
verifying; the executed notebook goes where the caller says, outside the run.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import nbformat
import pytest

from verifylib import canonical, params
from verifylib.evidence import gates, receipt
from verifylib import notebook as vnb
from verifylib.errors import ParametersInvalid

from tests.helpers.published_runs import run_params
from tests.helpers.forge import snapshot

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import make_notebooks  # noqa: E402


NAMED = {"01_build": ("facts", "records"), "02_export": ("facts", "records"),
         "03_canary": ("result", "lifecycle", "sanitizer", "negative", "positive"),
         "04_parity": ("result", "fp32", "fp16"), "05_wer": ("result", "clips", "corpus"),
         "06_placement": ("result", "plans")}
"""The variables each notebook's explore section defines for a researcher."""


def test_each_notebook_keeps_one_audit_call_then_explore_cells():
    for stage in make_notebooks.STAGES:
        nb = nbformat.read(ROOT / "notebooks" / f"{stage}.ipynb", as_version=4)
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        assert sum("vnb.audit(stage, params, run_dir)" in s for s in code) == 1, stage
        assert not any("stage.run(" in s for s in code), stage
        tags = [c.metadata.get("tags", []) for c in nb.cells]
        first = next(i for i, t in enumerate(tags) if make_notebooks.EXPLORE_TAG in t)
        assert nb.cells[first - 1].source == "view.show(report)"
        assert all(make_notebooks.EXPLORE_TAG in t for t in tags[first:]), stage
        explore = "\n".join(c.source for c in nb.cells[first:])
        assert "open_run" in explore, stage
        for name in NAMED[stage]:
            assert f"{name} = " in explore or f"{name}, " in explore, (stage, name)


@pytest.mark.physical
def test_setup_and_audit_read_a_published_run(published, capsys):
    """In process: no parameters means the run's own; other parameters are refused; the
    stage module is never run."""
    run_dir = published.run_dir
    stage = SimpleNamespace(STAGE="05_wer", run=lambda *a, **k: pytest.fail("stage ran"))
    p, got_dir = vnb.setup({k: None for k in params.PARAMETER_KEYS} | {"run_dir": str(run_dir)},
                           "05_wer")
    assert got_dir == run_dir.resolve() and p.data == run_params().data
    assert "published run" in capsys.readouterr().out
    report = vnb.audit(stage, p, got_dir)
    assert report.result == published.reports["05_wer"].result
    same = dict(run_params().as_papermill(), run_dir=str(run_dir))
    assert vnb.setup(same, "05_wer")[0].data == p.data
    other = dict(same, canary={"runs": 3})
    with pytest.raises(ParametersInvalid, match="other parameters"):
        vnb.setup(other, "05_wer")


@pytest.mark.physical
@pytest.mark.notebook
def test_notebooks_against_a_published_run_write_nothing(published, tmp_path):
    import papermill as pm

    run_dir = published.run_dir
    before = snapshot(run_dir)
    for stage in gates.STAGES:
        out = tmp_path / f"{stage}.ipynb"
        pm.execute_notebook(str(ROOT / "notebooks" / f"{stage}.ipynb"), str(out),
                            parameters={"run_dir": str(run_dir)}, kernel_name="python3",
                            progress_bar=False, cwd=str(tmp_path))
        nb = nbformat.read(out, as_version=4)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
        assert not [o for o in outputs if o.output_type == "error"], stage
        text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "published run" in text and "read-only" in text, stage
        explore = [c for c in nb.cells if c.cell_type == "code"
                   and make_notebooks.EXPLORE_TAG in c.metadata.get("tags", [])]
        assert explore and all(c.execution_count for c in explore), stage
        if stage == "04_parity":
            shown = "".join(str(o.get("data", {}).get("text/plain", "")) for c in explore
                            for o in c.outputs)
            assert "parity.program" in shown and "block 0" in shown
    assert snapshot(run_dir) == before
    res = receipt.verify(run_dir, allow_simulated=True)
    assert res.ok, res.problems
    assert canonical.read_json(run_dir / "receipt.json")["verdict"] == "ADMISSIBLE"
