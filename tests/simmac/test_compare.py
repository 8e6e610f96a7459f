"""``verifylib compare`` on the session's published run of the simulated Mac
(:mod:`tests.helpers.published_runs`) and clones of it, re-sealed after an edit
(:mod:`tests.helpers.forged_runs`):

- *checkpoint 2*: the attribution and the per-layer curve of ``parity.program`` say that
  layer 2's ``fc1`` now drifts (61 dB from there on, every ΔSNR, ranking and module summary
  recomputed so the run still verifies), and ``run.json`` records another coremltools;
- *fp16 skipped*: ``parity.program`` relabelled NOT_RUN (it no longer verifies: flagged);
- *three blocks*: the last block's ops and curve point removed (a program of another length)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.forge import snapshot
from verifylib import views
from verifylib.cli import main as cli
from verifylib.compare import runs as vcmp
from verifylib.views import compare as view

# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def ab(runs):
    return vcmp.compare_runs([runs["a"], runs["b"]], allow_simulated=True)


# ----------------------------------------------------------------------------- physical

@pytest.mark.physical
def test_the_forged_checkpoint_verifies(runs):
    from verifylib.evidence.runs import open_run
    assert open_run(runs["b"]).verify(allow_simulated=True).ok


@pytest.mark.physical
def test_runs_gate_matrix_and_identities(ab, runs):
    a, b = ab.runs
    assert (a.label, b.label) == ("A", "B") and b.run_id == "checkpoint-2"
    assert a.verification == b.verification == "verified" and not a.flagged
    assert a.verified_verdict == b.verified_verdict == "ADMISSIBLE"
    matrix = {g.gate: [c.status for c in g.cells] for g in ab.gates}
    assert matrix["parity.program"] == ["PASS", "PASS"]
    assert matrix["parity.program_fp16"] == ["NOT_RUN", "NOT_RUN"]
    assert not any(g.differs for g in ab.gates)
    diffs = {r.key: r.values for r in ab.identity_diffs}
    assert diffs == {"package.coremltools": ("9.0", "9.1")}
    same = {r.key for r in ab.identity_same}
    assert {"model.source_digest", "runtime.pin", "runtime.tree", "binary.ggml.sha256",
            "policy.fp32.id", "parameters.sha256"} <= same
    assert ab.same_summary().startswith("same in all runs: ")


@pytest.mark.physical
def test_drift_says_checkpoint2_drifts_more_and_where(ab):
    c = ab.candidate("parity.program")
    assert c.op_matching == "op" and len(c.ops) == len(c.op_curves[0].index)
    a, b = c.layer_curve("A"), c.layer_curve("B")
    assert a.snr_db[a.labels.index("block 2")] == float("inf")
    assert b.snr_db[b.labels.index("block 2")] == 61.0
    first = c.top[0].entries
    assert first[0] is None  # the baseline's conversion is exact: nothing ranked
    assert first[1].where == "layers.2.fc1" and first[1].new
    changed = [o for o in c.ops if o.differs]
    assert changed and all(o.index >= changed[0].index for o in changed)
    assert changed[0].where == "layers.2.fc1"
    summary = "\n".join(ab.summary)
    assert "largest per-layer drop at block 2" in summary
    assert "worst new conversion op layers.2.fc1" in summary
    assert "package.coremltools (A 9.0, B 9.1)" in summary
    assert "no difference" not in summary
    # The fp16 program did not run in either: said, not dropped.
    assert any("judged in no run" in n for n in ab.notes_on("parity.program_fp16"))
    assert ab.wer is not None and [r.id for r in ab.wer.clips] == ["jfk", "weather", "directions"]
    assert not any(r.differs for r in ab.wer.clips)


@pytest.mark.physical
def test_page_is_one_self_contained_file(ab, tmp_path):
    path = view.write(ab, tmp_path / "out")
    assert path == tmp_path / "out" / "compare.html"
    assert [p.name for p in path.parent.iterdir()] == ["compare.html"]  # no staging left
    html = path.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<style") == 1
    assert views.stylesheet().strip() in html
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", html, re.I)
    assert refs and all(r.startswith("#") or r.startswith("data:image/png;base64,")
                        for r in refs), [r[:40] for r in refs]
    assert "<script" not in html.lower() and "<link" not in html.lower()
    assert html.count("data:image/png;base64,") >= 3  # layers, ops, WER
    assert '<td class="vl-PASS"' in html and "checkpoint-2" in html
    assert "layers.2.fc1" in html and "What changed" in html


@pytest.mark.physical
def test_shapes_that_differ_are_compared_where_they_can(runs, tmp_path):
    before = {k: snapshot(v) for k, v in runs.items()}
    cmp = vcmp.compare_runs([runs["a"], runs["short"], runs["not_run"]],
                            allow_simulated=True)
    a, short, not_run = cmp.runs
    assert short.verification == "verified"
    assert not_run.flagged and not_run.verification == "failed" and not_run.problems
    c = cmp.candidate("parity.program")
    assert c.op_matching == "module"
    assert c.status == ("PASS", "PASS", "NOT_RUN") and c.gated_snr_db[2] is None
    notes = cmp.notes_on("parity.program")
    assert any("cannot be matched op by op" in n for n in notes)
    assert any("different points" in n and "block 3" in n for n in notes)
    assert any("not judged in run(s) C (NOT_RUN prerequisite)" in n for n in notes)
    mods = {m.module: m for m in c.modules}
    assert mods["layers.3"].precision_delta_snr_db[1] is None
    assert mods["layers.3"].precision_delta_snr_db[0] is not None
    row = next(g for g in cmp.gates if g.gate == "parity.program")
    assert row.differs and [x.status for x in row.cells] == ["PASS", "PASS", "NOT_RUN"]
    html = view.write(cmp, tmp_path).read_text()
    assert "cannot be matched op by op" in html and "does not verify" in html
    assert "instead of op by op" in html
    assert {k: snapshot(v) for k, v in runs.items()} == before


@pytest.mark.physical
def test_cli_writes_the_page_and_leaves_the_runs_byte_identical(runs, tmp_path, capsys,
                                                                 monkeypatch):
    before = {k: snapshot(runs[k]) for k in ("a", "b")}
    out = tmp_path / "cmp"
    assert cli.main(["compare", str(runs["a"]), str(runs["b"]), "-o", str(out),
                     "--allow-simulated"]) == 0
    printed = capsys.readouterr().out
    assert str(out / "compare.html") in printed and "coremltools" in printed
    assert (out / "compare.html").is_file()
    # Without -o: ./reports/compare-<UTC time>/ of the current directory.
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", str(runs["a"]), str(runs["b"])]) == 0
    (made,) = (tmp_path / "reports").glob("compare-*/compare.html")
    assert re.fullmatch(r"compare-\d{8}T\d{6}Z", made.parent.name)
    # Without --allow-simulated both runs are flagged (simulated host), not hidden.
    assert "does not verify" in made.read_text()
    assert {k: snapshot(runs[k]) for k in ("a", "b")} == before


@pytest.mark.physical
def test_cli_refuses_to_write_into_a_run(runs, capsys):
    before = snapshot(runs["a"])
    assert cli.main(["compare", str(runs["a"]), str(runs["b"]), "-o",
                     str(runs["a"] / "cmp")]) == 2
    assert "inside the run" in capsys.readouterr().err
    assert snapshot(runs["a"]) == before
