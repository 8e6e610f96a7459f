"""The report as a document, piece by piece (milliseconds): printed output folded and shown as
output, redraws collapsed, host paths written relative; the first screen's counts, links and
empty-file marks; what each gate proves; a published notebook pointed at its run.

The whole default run is checked in a browser in tests/notebooks/test_report_document.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from verifylib.evidence import gates
from verifylib.notebook import PUBLISHED_NOTE_TAG, PUBLISHED_RUN, make_reopenable
from verifylib.views import transcript
from verifylib.views.gates import EMPTY_SHA256, gate_counts, receipt_summary

pytestmark = pytest.mark.unit


def _cell(*outputs):
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = list(outputs)
    return cell


def test_printed_output_is_one_folded_block_with_redraws_collapsed_and_paths_relative():
    run = "/reports/m/.staging/20990101T000000Z-1"
    paths = transcript.host_paths(run, "/home/u/.cache/verifylib")
    bar = "".join(f"\rlifecycle A/B: {i}/40" for i in range(0, 41, 10))
    cell = _cell(
        nbformat.v4.new_output("stream", name="stdout",
                               text=f"stage 03_canary · model m · run directory {run}\n"),
        nbformat.v4.new_output("stream", name="stdout", text=bar),
        nbformat.v4.new_output("stream", name="stdout", text="\n"),
        nbformat.v4.new_output("stream", name="stderr",
                               text=f"whisper-cli from cache: /home/u/.cache/verifylib/b/x\n"
                                    f"wrote {run}/evidence/a.json\n"
                                    f"{sys.prefix}/lib/site.py warned <b>\n"),
        nbformat.v4.new_output("display_data", data={"text/html": f"<p>{run}/fp32</p>",
                                                     "text/plain": "x"}))
    transcript.rewrite_outputs(cell, paths)
    log, view = cell.outputs
    text = log["data"]["text/plain"]
    assert text.splitlines() == ["lifecycle A/B: 40/40", "whisper-cli from cache: $CACHE/b/x",
                                 "wrote ./evidence/a.json", "$PYTHON/lib/site.py warned <b>"]
    html = log["data"]["text/html"]
    assert html.startswith('<pre class="vl-log">') and "warned &lt;b&gt;" in html
    assert view["data"]["text/html"] == "<p>./fp32</p>"
    many = _cell(nbformat.v4.new_output("stream", name="stdout",
                                        text="".join(f"cmake [{i}%]\n" for i in range(40))))
    transcript.rewrite_outputs(many, paths)
    folded = many.outputs[0]["data"]["text/html"]
    assert folded.startswith('<details class="vl-log"><summary>cmake [0%] … (40 lines)')


def test_every_gate_says_what_its_pass_proves():
    assert all(g.proves and g.proves.endswith(".") for g in gates.GATES)
    assert set(gates.PROVES) == set(gates.BY_ID)


def test_the_first_screen_counts_both_kinds_and_marks_empty_evidence(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_build.ipynb").write_text("{}")
    rows = [
        {"id": "build.ggml", "stage": "01_build", "required": True, "status": "PASS",
         "reason": {"kind": "rule", "detail": "ok"},
         "evidence": [{"name": "out", "path": "evidence/01_build/probe.stdout.txt",
                       "sha256": EMPTY_SHA256},
                      {"name": "b", "path": "evidence/01_build/build.json", "sha256": "a" * 64}]},
        {"id": "build.coreml", "stage": "01_build", "required": True, "status": "NOT_RUN",
         "reason": {"kind": "platform", "detail": "needs macOS"}, "evidence": []},
        {"id": "canary.sanitizer", "stage": "03_canary", "required": False, "status": "PASS",
         "reason": {"kind": "rule", "detail": "ok"}, "evidence": []},
    ]
    receipt = {"name": "m", "verdict": "INCOMPLETE", "run_id": "20991231T235900Z-0000abcd",
               "gates": rows, "identities": {"runtime.pin": "v1.8.5"},
               "host": {"system": "Linux", "machine": "x86_64", "python": "3.11.7"},
               "packages": {}}
    assert gate_counts(rows, True) == "2 required: 1 PASS, 1 NOT_RUN"
    assert gate_counts(rows, False) == "1 informational: 1 PASS"
    html = receipt_summary(receipt, "f" * 64, run_dir=tmp_path, stages=["01_build"],
                           host_paths=[("$CACHE", "/c")])
    assert "2 required: 1 PASS, 1 NOT_RUN; 1 informational: 1 PASS" in html
    assert "2099-12-31 23:59 UTC" in html and "Linux, x86_64, Python 3.11.7" in html
    assert ('<a href="evidence/01_build/probe.stdout.txt">evidence/01_build/probe.stdout.txt'
            '</a> <b>(empty)</b>') in html
    assert f'<code class="vl-hash">{"a" * 64}</code>' in html
    assert '<a href="notebooks/01_build.ipynb">01_build</a>' in html
    assert "02_export.ipynb" not in html  # only the notebooks that exist are linked
    assert html.index('<h2 id="gates">') < html.index("build.<wbr>coreml") \
        < html.index('<h2 id="informational">') < html.index("canary.<wbr>sanitizer")
    assert gates.BY_ID["build.ggml"].proves in html
    assert '<a href="#stage-01_build">' in html and "$CACHE" in html


def test_a_published_notebook_names_its_run_relative_to_itself(tmp_path):
    nb = nbformat.v4.new_notebook()
    injected = nbformat.v4.new_code_cell('name = "m"\nrun_dir = "/reports/m/.staging/x"')
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells = [nbformat.v4.new_code_cell("run_dir = None"), injected]
    (tmp_path / "notebooks").mkdir()
    nbformat.write(nb, tmp_path / "notebooks" / "01_build.ipynb")
    assert make_reopenable(tmp_path, "20990101T000000Z-1") == [
        tmp_path / "notebooks" / "01_build.ipynb"]
    note, *cells = nbformat.read(tmp_path / "notebooks" / "01_build.ipynb", as_version=4).cells
    # First, before anything can be saved: how to explore without touching the run.
    assert note.cell_type == "markdown" and note.metadata["tags"] == [PUBLISHED_NOTE_TAG]
    assert "verifylib lab path/to/20990101T000000Z-1" in note.source
    assert cells[0].source == "run_dir = None"  # the defaults cell stays as it is
    lines = cells[1].source.split("\n")
    assert lines[0] == 'name = "m"'
    assert lines[1].startswith('run_dir = ".."') and ".staging" not in cells[1].source
    assert lines[2].startswith(f"{PUBLISHED_RUN} = '20990101T000000Z-1'")
    # Once: a second pass adds no second note.
    make_reopenable(tmp_path, "20990101T000000Z-1")
    again = nbformat.read(tmp_path / "notebooks" / "01_build.ipynb", as_version=4).cells
    assert [c.source for c in again] == [note.source, *(c.source for c in cells)]


def test_a_published_notebook_away_from_its_run_refuses(tmp_path, monkeypatch):
    from verifylib import notebook
    from verifylib.errors import ParametersInvalid

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ParametersInvalid, match="belongs to the published run r1, which is "
                                                "not at"):
        notebook.setup({"run_dir": "..", PUBLISHED_RUN: "r1"}, "01_build")
    assert list(Path(tmp_path).iterdir()) == []


def test_a_published_notebook_in_a_renamed_copy_reads_it_when_it_verifies(tmp_path,
                                                                          monkeypatch):
    import shutil

    from tests.helpers.forge import snapshot
    from tests.helpers.synthetic import install_rules, make_run
    from verifylib import notebook
    from verifylib.errors import ParametersInvalid
    from verifylib.evidence.runs import open_run

    install_rules(monkeypatch)
    run = make_run(tmp_path)
    copy = tmp_path / "my-copy"
    shutil.copytree(run, copy)
    run_id = open_run(copy).run_id
    assert run_id == run.name != copy.name
    (copy / "notebooks").mkdir()
    before = snapshot(copy)
    monkeypatch.chdir(copy / "notebooks")
    _, found = notebook.setup({"run_dir": "..", PUBLISHED_RUN: run_id}, "01_build")
    assert found == copy.resolve()
    # A notebook of another run in that place: the general refusal.
    with pytest.raises(ParametersInvalid, match="belongs to the published run r2, which is "
                                                "not at"):
        notebook.setup({"run_dir": "..", PUBLISHED_RUN: "r2"}, "01_build")
    assert snapshot(copy) == before
    # A renamed copy that does not verify is refused, saying so.
    evidence = sorted(f for f in (copy / "evidence").rglob("*") if f.is_file())[0]
    evidence.write_bytes(evidence.read_bytes() + b" ")
    with pytest.raises(ParametersInvalid, match="under another name, which does not verify"):
        notebook.setup({"run_dir": "..", PUBLISHED_RUN: run_id}, "01_build")


def test_explore_results_are_tables_not_reprs():
    from verifylib.views.tables import table

    t = table({"build.ggml": ["evidence/a.json", "evidence/<b>.txt"], "x": 0.123456789},
              ("gate", "evidence files"))
    html = t._repr_html_()
    assert "<th>gate</th><th>evidence files</th>" in html
    assert "<td>evidence/a.json, evidence/&lt;b&gt;.txt</td>" in html and "0.123457" in html
    assert repr(t).splitlines()[0].split() == ["gate", "evidence", "files"]
    rows = table([("jfk", "en", 0.0)], ("clip", "language", "rate"))
    assert rows.rows == (("jfk", "en", "0"),)
    assert table(None) is None
    nested = table({"patched": {"exit 3 + both markers": 20}}, ("build", "outcomes"))
    assert nested.rows == (("patched", "exit 3 + both markers: 20"),)
