"""``verifylib compare`` and ``notebooks/07_compare.ipynb``: published runs side by side.

The physical tests compare the session's published run of the simulated Mac
(:mod:`tests.published_runs`) with clones of it, re-sealed after an edit
(:mod:`tests.forge`):

- *checkpoint 2*: the attribution and the per-layer curve of ``parity.program`` say that
  layer 2's ``fc1`` now drifts (61 dB from there on, every ΔSNR, ranking and module summary
  recomputed so the run still verifies), and ``run.json`` records another coremltools;
- *fp16 skipped*: ``parity.program`` relabelled NOT_RUN (it no longer verifies: flagged);
- *three blocks*: the last block's ops and curve point removed (a program of another length).

The synthetic tests (milliseconds, no build) cover bad input and runs without any parity
or WER result.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timezone
import sys
from pathlib import Path

import nbformat
import pytest

from verifylib.cli import main as cli
from verifylib import views
from verifylib.compare import model as vcmp
from verifylib.numerics.drift import Attribution, _rank, _summaries, derive
from verifylib.views import compare as view

from .forge import clone, edit_json, relabel, reseal
from .published_runs import simulated_published_run
from .synthetic import install_rules, make_run
from .test_runs import snapshot

ROOT = Path(__file__).resolve().parents[1]
ATTRIBUTION = "evidence/04_parity/program-attribution.json"
DRIFT = "evidence/04_parity/program-drift.json"


# ----------------------------------------------------------------------------- forging runs

def _edit_attribution(run_dir: Path, edit) -> None:
    """Apply ``edit(ops) -> ops`` to the fp32 attribution and recompute everything derived
    from the SNRs (ΔSNR, both rankings, the module summary), as the stage would."""
    def fn(doc):
        att = Attribution.from_dict(doc)
        ops = tuple(edit(list(att.ops)))
        produced = {o.name for o in ops}
        inputs = {n for o in ops for n in o.inputs if n not in produced}
        ops = derive(ops, inputs, att.input_precision)
        snr = {o.name: o.snr_db for o in ops}
        points = tuple(dict(p, snr_db=snr[p["value"]]) for p in att.points if p["value"] in snr)
        return dataclasses.replace(
            att, ops=ops, top=_rank(ops, "delta_snr_db"),
            precision_top=_rank(ops, "precision_delta_snr_db"), modules=_summaries(ops),
            points=points, unmapped=sum(o.module is None for o in ops)).as_dict()
    edit_json(run_dir, ATTRIBUTION, fn)


def checkpoint2(src: Path, dest: Path, *, layer: int = 2, snr: float = 61.0) -> Path:
    """A clone whose program loses ``snr`` dB at ``layers.<layer>.fc1`` (and keeps that
    loss downstream), recorded with coremltools 9.1; re-sealed, so it verifies."""
    run = clone(src, dest)

    def lose(ops):
        start = next(o.index for o in ops if o.module == f"layers.{layer}.fc1")
        return [dataclasses.replace(o, snr_db=min(o.snr_db, snr), cosine=0.9999)
                if o.module is not None and o.index >= start and o.snr_db is not None else o
                for o in ops]
    _edit_attribution(run, lose)

    def curve(doc):
        for row in doc["layers"]["float32"]:
            label = row["label"]
            if label == "output" or (label.startswith("block ") and int(label[6:]) >= layer):
                row["snr_db"] = snr
    edit_json(run, DRIFT, curve)

    def upgrade(rec):
        rec["packages"]["coremltools"] = "9.1"
        rec["run_id"] = "checkpoint-2"
    edit_json(run, "run.json", upgrade)
    reseal(run)
    return run


def three_blocks(src: Path, dest: Path) -> Path:
    """A clone whose program and curve lack block 3 (another model's shape)."""
    run = clone(src, dest)
    _edit_attribution(run, lambda ops: [o for o in ops if not (o.module or o.scope)
                                        .startswith("layers.3")])
    edit_json(run, DRIFT, lambda doc: doc["layers"].update(
        {m: [r for r in rows if r["label"] != "block 3"] for m, rows in doc["layers"].items()}))
    reseal(run)
    return run


def parity_not_run(src: Path, dest: Path) -> Path:
    """A clone with ``parity.program`` relabelled NOT_RUN (it does not verify)."""
    run = clone(src, dest)
    relabel(run, "parity.program", "NOT_RUN", "prerequisite", "forged: said not to have run")
    reseal(run)
    return run


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
    assert ab.wer is not None and [r.id for r in ab.wer.clips] == ["jfk", "directions"]
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
    assert vcmp.inside_a_run(run / "x", [tmp_path / "other", run]) == str(run.resolve())
    assert vcmp.inside_a_run(tmp_path / "elsewhere", [run]) is None


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
