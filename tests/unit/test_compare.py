"""``verifylib compare`` and ``notebooks/07_compare.ipynb`` on synthetic runs (milliseconds,
no build): bad input, runs without any parity or WER result, a run that cannot be read,
labels and the default output folder, and the notebook against its generator. The
published run of the simulated Mac is compared in tests/simmac/test_compare.py, the
notebook executed in tests/notebooks/test_compare_notebook.py."""

from __future__ import annotations

from datetime import datetime, timezone
import sys

import nbformat
import pytest

from verifylib.evidence.layout import inside_a_run

from verifylib.cli import main as cli
from verifylib.compare import runs as vcmp
from verifylib.views import compare as view

from tests.helpers.forge import clone
from tests.helpers.synthetic import install_rules, make_run
from tests.helpers.forge import snapshot

from tests.helpers import ROOT


# ----------------------------------------------------------------------------- forging runs


# ----------------------------------------------------------------------------- fixtures


# ----------------------------------------------------------------------------- synthetic

def test_bad_input_exits_2(tmp_path, capsys, monkeypatch):
    install_rules(monkeypatch)
    run = make_run(tmp_path / "one")
    assert cli.main(["compare", str(run)]) == 2
    assert "at least two runs" in capsys.readouterr().err
    assert cli.main(["compare", str(run), str(tmp_path / "missing")]) == 2
    assert "run B" in capsys.readouterr().err
    unpublished = make_run(tmp_path / "two", receipt_too=False)
    assert cli.main(["compare", str(run), str(unpublished)]) == 2
    assert "not published" in capsys.readouterr().err
    assert cli.main(["compare"]) == 2
    with pytest.raises(vcmp.CompareInputInvalid):
        vcmp.compare_runs([run])
    with pytest.raises(vcmp.CompareInputInvalid):
        vcmp.compare_runs(str(run))


def test_runs_without_parity_or_wer_say_so(tmp_path, monkeypatch):
    install_rules(monkeypatch)
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", fail={"build.ggml"})
    before = snapshot(a), snapshot(b)
    cmp = vcmp.compare_runs([a, b])
    assert [r.verification for r in cmp.runs] == ["verified", "verified"]
    row = next(g for g in cmp.gates if g.gate == "build.ggml")
    assert [c.status for c in row.cells] == ["PASS", "FAIL"] and row.differs
    assert cmp.wer is None and any("no run has a WER result" in n for n in cmp.notes_on("wer"))
    assert any("judged in no run" in n for n in cmp.notes_on("parity.program"))
    assert "gates that differ: build.ggml (A PASS, B FAIL)" in "\n".join(cmp.summary)
    html = view.page(cmp)
    assert "Not compared" in html and "vl-FAIL" in html
    recorded = vcmp.compare_runs([a, b], verify=False)
    assert [r.verification for r in recorded.runs] == ["skipped", "skipped"]
    assert [r.verified_verdict for r in recorded.runs] == [None, None]
    assert "not verified (as recorded)" in view.page(recorded)
    assert (snapshot(a), snapshot(b)) == before


def test_a_run_that_cannot_be_read_is_flagged_not_hidden(tmp_path, monkeypatch):
    install_rules(monkeypatch)
    a = make_run(tmp_path / "a")
    b = clone(a, tmp_path / "b-run")
    (b / "run.json").unlink()
    (b / "run.json").write_text("{}")
    cmp = vcmp.compare_runs([a, b])
    assert cmp.runs[1].verification == "unreadable" and cmp.runs[1].flagged
    assert all(g.cells[1].status is None for g in cmp.gates)
    assert any("cannot be read" in n for n in cmp.notes_on("runs"))
    assert "unreadable" in view.page(cmp)


def test_labels_and_default_output_dir(tmp_path, monkeypatch):
    assert [vcmp.label_for(i) for i in (0, 1, 25, 26, 27)] == ["A", "B", "Z", "AA", "AB"]
    monkeypatch.chdir(tmp_path)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    d = vcmp.default_output_dir(when)
    assert d == tmp_path / "reports" / "compare-20260102T030405Z"
    d.mkdir(parents=True)
    assert vcmp.default_output_dir(when).name == "compare-20260102T030405Z-2"
    run = tmp_path / "r"
    assert inside_a_run(run / "x", [tmp_path / "other", run]) == str(run.resolve())
    assert inside_a_run(tmp_path / "elsewhere", [run]) is None


# ----------------------------------------------------------------------------- notebook

sys.path.insert(0, str(ROOT / "scripts"))
import make_notebooks  # noqa: E402


def test_compare_notebook_matches_generator_and_takes_runs():
    nb = nbformat.read(ROOT / "notebooks" / "07_compare.ipynb", as_version=4)
    assert nb == make_notebooks.make_compare()
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and "runs = []" in params[0].source
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "compare_runs(" in code and "view.show(" in code
    assert "07_compare" not in make_notebooks.STAGES


def test_the_audit_runs_only_the_six_stage_notebooks():
    from verifylib.evidence import gates
    from verifylib import resources
    assert "07_compare" not in gates.STAGES and len(gates.STAGES) == 6
    assert resources.notebook("07_compare").is_file()


def test_a_copy_of_a_run_compared_with_it_is_named_as_the_same_run(tmp_path, monkeypatch):
    import shutil

    install_rules(monkeypatch)
    a = make_run(tmp_path / "a")
    copy = shutil.copytree(a, tmp_path / "copy")
    other = make_run(tmp_path / "b", fail={"build.ggml"})
    cmp = vcmp.compare_runs([a, copy, other])
    (note,) = [n for n in cmp.notes_on("runs") if "same run" in n]
    assert note.startswith("runs A and B are the same run (") and "identical receipt" in note
    assert "a copy compared with itself, nothing below can differ" in note
    assert "same run" in view.page(cmp)
    assert not [n for n in vcmp.compare_runs([a, other]).notes_on("runs") if "same run" in n]


def test_the_b_minus_a_view_lists_status_changes_and_every_shared_measurement_that_moved():
    from pathlib import Path

    from verifylib.compare.model import (
        CandidateComparison,
        ClipRow,
        Comparison,
        CorpusRow,
        GateCell,
        GateRow,
        RunInfo,
        WerComparison,
    )
    from verifylib.evidence.gates import Status
    from verifylib.views import compare as compare_view

    runs = tuple(RunInfo(label=lab, path=Path(lab), run_id=f"r{lab}", name="m",
                         created_utc=None, simulated=False, recorded_verdict="INCOMPLETE",
                         verified_verdict="INCOMPLETE", verification="verified")
                 for lab in "ABC")
    P, F = Status.PASS, Status.FAIL
    gates_ = (GateRow("export.pair", "02_export", True, tuple(GateCell(s) for s in (P, P, F))),
              GateRow("wer.ggml_vs_source", "05_wer", True, tuple(GateCell(P) for _ in "ABC")))
    cands = (CandidateComparison("export.pair", None, "pair", (P, P, F), (60.0, 61.5, 12.0),
                                 (1.0, 1.0, 0.9)),
             CandidateComparison("parity.program", "fp32", "program", (P, P, P),
                                 (float("inf"), float("inf"), 140.0), (1.0, 1.0, 1.0)))
    wer = WerComparison(
        clips=(ClipRow("jfk", (22, 22, 22), (0.0, 0.0, 0.0), (0.0, 0.0, 0.05),
                       (None, None, None)),),
        corpus=(CorpusRow(0.0, 0.0, None, 0.0), CorpusRow(0.0, 0.0, None, 0.0),
                CorpusRow(0.0, 0.05, None, 0.05)))
    cmp = Comparison(runs=runs, gates=gates_, identities=(), candidates=cands, wer=wer,
                     notes=(), summary=())
    assert [(c.gate, c.run, c.baseline, c.status) for c in cmp.status_changes] == \
        [("export.pair", "C", "PASS", "FAIL")]
    rows = {r.measure: r for r in cmp.differences}
    # Unchanged everywhere (source WER) is not listed; exact in both A and B differs by 0.
    assert set(rows) == {"export.pair SNR", "parity.program SNR", "corpus GGML WER",
                         "GGML WER, clip jfk"}
    assert rows["export.pair SNR"].deltas == (1.5, -48.0)
    assert rows["export.pair SNR"].worse == (False, True)
    assert rows["parity.program SNR"].deltas == (0.0, float("-inf"))
    assert rows["GGML WER, clip jfk"].baseline == 0.0
    assert rows["GGML WER, clip jfk"].worse == (False, True)
    page = compare_view.fragment(cmp, style=False)
    assert "Each run against the baseline (B − A)" in page
    assert "<th>C − A</th>" in page and "+1.50 dB" in page and "-48.00 dB <b>worse</b>" in page
    assert "-inf dB <b>worse</b>" in page and "+0.050 <b>worse</b>" in page
    assert "<code>export.pair</code>: A PASS, C <b>FAIL</b>" in page
