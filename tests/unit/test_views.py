"""The views: every stage display escapes run text, HTML lives only in the view templates,
and one stylesheet serves the notebooks, the audit report and the batch index."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from verifylib.views.gates import stage_table

from tests.helpers import synthetic
from verifylib.evidence import gates
from verifylib.evidence.canary import result as canary_results
from verifylib.evidence.parity import result as parity_results
from verifylib.evidence.placement import result as placement_results
from verifylib.evidence.wer import result as wer_results
from verifylib import params, views
from verifylib.views import report
from verifylib.evidence import registry as rules
from verifylib.evidence.records import GateRecord, Reason
from verifylib.evidence.gates import Judgement, Status, Verdict
from verifylib.stages.context import StageContext
from verifylib.evidence.stage_report import StageReport
from verifylib.evidence.parity.schema import Measurement
from verifylib.evidence.placement.schema import PlanEvidence

from tests.helpers import ROOT

PACKAGE = ROOT / "verifylib"
HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
STAGE_VIEWS = ("build", "export", "canary", "parity", "wer", "placement")

# Tag names whose opening or closing form in a Python string means HTML is being built.
HTML_TAG = re.compile(
    r"<\s*/?\s*(table|thead|tbody|tr|td|th|div|span|p|h[1-6]|b|i|em|strong|code|pre|br|hr|"
    r"small|a|img|ul|ol|li|style|script|html|head|body|title|meta|link|iframe)(?=[\s>/])",
    re.IGNORECASE)


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture
def shown(monkeypatch):
    """Everything a view displays (HTML text, or "PLOT" for a matplotlib figure)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out: list[str] = []
    monkeypatch.setattr("IPython.display.display", lambda obj: out.append(obj.data))

    def _show(*_a, **_k):
        out.append("PLOT")
        plt.close("all")
    monkeypatch.setattr(plt, "show", _show)
    return out


def _records() -> list[GateRecord]:
    return [GateRecord("canary.coreml_negative", Status.NOT_RUN,
                       Reason("platform", f"needs macOS {HOSTILE}")),
            GateRecord("canary.coreml_positive", Status.FAIL, Reason("rule", HOSTILE)),
            GateRecord("canary.lifecycle_ab", Status.ERROR, Reason("exception", HOSTILE)),
            GateRecord("canary.sanitizer", Status.PASS, Reason("rule", f"ASan saw {HOSTILE}"))]


def _counts(h: int, s: int, d: int, i: int) -> dict:
    return {"hits": h, "substitutions": s, "deletions": d, "insertions": i}


def _facts() -> dict[str, dict]:
    """Per stage, the smallest facts its view shows in full, with hostile text in them."""
    kv = {"cmake": HOSTILE, "binary.sha256": "ab" * 32, "seconds": 1.5}
    return {
        "build": kv,
        "export": kv,
        "canary": {
            "lifecycle": {"trigger": f"-nfa -dtw {HOSTILE}", "runs_per_side": 2, "sides": {
                "unpatched": {"available": True, "binary_sha256": "cd" * 32,
                              "counts": {"SIGSEGV": 2, HOSTILE: 1}, "wall_s_median": 0.25},
                "patched": {"available": False, "reason": HOSTILE}}},
            "sanitizer": {"trigger": "-nfa -dtw large.v3", "runs_per_side": 3,
                          "asan_options": f"detect_leaks=0:{HOSTILE}", "sides": {
                "unpatched": {"available": True, "binary_sha256": "ef" * 32,
                              "variant": "ggml-unpatched-asan",
                              "outcomes": {f"AddressSanitizer BUS in {HOSTILE}": 3},
                              "kind": f"BUS {HOSTILE}",
                              "frames": ("#0 __interceptor_free", f"#1 {HOSTILE} w.cpp:499"),
                              "wall_s_median": 0.29},
                "patched": {"available": False, "reason": HOSTILE}}},
            "positive": {"outcome": "exit 0", "detail": HOSTILE, "warmup_wall_s": 1.0,
                         "measured_wall_s": 0.5, "warmup_encode_ms": None,
                         "measured_encode_ms": 12.5, "transcript": HOSTILE}},
        "parity": {
            "candidates": {"parity.program": {
                "policy": {"id": "fp32-v1", "variant": "fp32",
                           "pass": {"snr_db_min": 60.0, "cosine_min": 0.9999},
                           "gated": {"input": "fixture"}},
                "variant": "fp32", "kind": "program", "status": "FAIL", "detail": HOSTILE,
                "reference_seconds": {"fixture": 1.25, "random": 0.5},
                "measurements": [{"input": "fixture", "execution": HOSTILE, "seconds": 0.5,
                                  "metrics": {"n": 4, "signal_energy": 4.0,
                                              "noise_energy": 0.0, "dot": 4.0,
                                              "candidate_energy": 4.0,
                                              "snr_db": float("inf"), "cosine": 1.0,
                                              "max_abs_error": 0.0, "mean_abs_error": 1e-9,
                                              "finite": True}}],
                "drift": {"frames": {"float32": [30.0, "inf", 12.5]},
                          "histogram": {"float32": {"edges": [1e-9, 1e-6, 1e-3],
                                                    "counts": [3, 1], "zeros": 2}},
                          "speech_frames": 1,
                          "layers": {"float32": [{"label": "conv1", "snr_db": 80.0},
                                                 {"label": HOSTILE, "snr_db": "inf"}]}}}},
            "reference": {"implementation": HOSTILE, "dtype": "float64", "attention": "eager",
                          "device": "cpu", "mode": "eval", "torch": "2", "transformers": "5"},
            "inputs": {"fixture": {"id": "jfk", "front_end": "hf"}, "random": {"seed": 0}}},
        "wer": {
            "clips": [
                {"id": "clip" + HOSTILE, "public": True, "words": 3,
                 "counts": {"source": _counts(2, 1, 0, 0), "ggml": _counts(3, 0, 0, 1),
                            "hybrid": None},
                 "reference": HOSTILE, "source": "a b c", "ggml": "a b c d", "hybrid": None,
                 "wer_source": 1 / 3, "wer_ggml": 1 / 3, "wer_hybrid": None,
                 "wer_pairwise": 0.25},
                {"id": "c2", "public": True, "words": 2,
                 "counts": {"source": _counts(2, 0, 0, 0), "ggml": _counts(1, 1, 0, 0),
                            "hybrid": _counts(0, 0, 2, 0)},
                 "reference": "x y", "source": "x y", "ggml": "x z", "hybrid": HOSTILE,
                 "wer_source": 0.0, "wer_ggml": 0.5, "wer_hybrid": 1.0, "wer_pairwise": 0.5}],
            "corpus": {"source": 0.2, "ggml": 0.4, "pairwise": 0.3}},
        "placement": {"fp16": {
            "cost_sum": 2.0, "cost_by_device": {"ane": 1.5, "cpu": 0.5}, "claim": HOSTILE,
            "ops": [{"operator": HOSTILE, "outputs": ["o1", HOSTILE], "preferred": None,
                     "supported": ["cpu", "ane"], "cost": 0.25},
                    {"operator": "conv", "outputs": ["o3"], "preferred": "ane",
                     "supported": ["ane"], "cost": None}]}},
    }


def _typed(name: str, facts: dict):
    """The stage's typed result built from the plain values of :func:`_facts`."""
    if not facts or name in ("build", "export"):
        return None
    if name == "canary":
        lc = facts.get("lifecycle")
        pos = facts.get("positive")
        sz = facts.get("sanitizer")
        return canary_results.CanaryResult(
            lifecycle=None if lc is None else canary_results.LifecycleSummary(
                lc["runs_per_side"], lc["trigger"],
                {k: canary_results.LifecycleSide(**v) for k, v in lc["sides"].items()}),
            sanitizer=None if sz is None else canary_results.SanitizerSummary(
                sz["runs_per_side"], sz["trigger"], sz["asan_options"],
                {k: canary_results.SanitizerSide(**v) for k, v in sz["sides"].items()}),
            positive=None if pos is None else canary_results.PositiveControl(**pos))
    if name == "parity":
        cands = {gid: parity_results.ParityCandidate(gid, **{
                     **c, "drift": parity_results.Drift.from_evidence(c["drift"]),
                     "status": Status(c["status"]),
                     "measurements": tuple(Measurement.from_json(m, f"measurements[{i}]")
                                           for i, m in enumerate(c["measurements"]))})
                 for gid, c in facts["candidates"].items()}
        return parity_results.ParityResult(facts["reference"], facts["inputs"], cands)
    if name == "wer":
        return wer_results.WerResult([wer_results.ClipResult(**c) for c in facts["clips"]],
                                 wer_results.CorpusWer(**facts["corpus"]))
    return placement_results.PlacementResult({v: PlanEvidence.from_json(p) for v, p in facts.items()})


def _report(name: str, facts: dict) -> StageReport:
    plain = facts if name in ("build", "export") else {}
    return StageReport(name, _records(), {"k": HOSTILE}, 0.5, plain, _typed(name, facts))


def _show(name: str, facts: dict, shown: list) -> list[str]:
    """What ``views.<name>.show`` displays (it returns None: the view contract)."""
    view = importlib.import_module(f"verifylib.views.{name}")
    shown.clear()
    result = view.show(_report(name, facts))
    assert result is None, f"views.{name}.show returned {result!r} instead of displaying it"
    return list(shown)


# ----------------------------------------------------------------------------- escaping

@pytest.mark.parametrize("name", STAGE_VIEWS)
def test_stage_view_escapes_run_text(name, shown):
    out = _show(name, _facts()[name], shown)
    html = "".join(x for x in out if x != "PLOT")
    assert ESCAPED in html
    assert "<script" not in html.lower()
    # The stylesheet opens the view's first HTML, and appears once in its output.
    assert next(x for x in out if x != "PLOT").startswith(views.style_block())
    assert html.count(views.style_block()) == 1


@pytest.mark.parametrize("name", STAGE_VIEWS)
def test_stage_view_without_facts_says_why(name, shown):
    out = _show(name, {}, shown)
    html = "".join(x for x in out if x != "PLOT")
    assert "did not run" in html and "<script" not in html.lower()
    assert "PLOT" not in out


def test_stage_views_keep_their_plots_and_tables(shown):
    facts = _facts()
    out = _show("canary", facts["canary"], shown)
    assert out[1] == "PLOT"  # the A/B chart sits between the A/B table and the Core ML runs
    assert "2 &times; SIGSEGV" in out[0] and "not available: " + ESCAPED in out[0]
    # The sanitizer runs follow the A/B chart: both sides, the first report's kind and stack.
    assert "<h3>canary.sanitizer (informational)" in out[2]
    assert f"3 &times; AddressSanitizer BUS in {ESCAPED}" in out[2]
    assert f"<b>BUS {ESCAPED}</b>" in out[2] and f"#1 {ESCAPED} w.cpp:499" in out[2]
    assert f"Gate: PASS (rule): ASan saw {ESCAPED}" in out[2]
    assert "not an uninitialized read" not in out[2]
    assert f"canary.coreml_negative</code> did not run here: NOT_RUN (platform): needs macOS " \
           f"{ESCAPED}" in out[3]
    assert "<h3>canary.coreml_positive</h3>" in out[4]
    out = _show("parity", facts["parity"], shown)
    assert out[-1] == "PLOT" and "<td>inf</td>" in out[0] and "SNR &ge; 60 dB" in out[0]
    out = _show("wer", facts["wer"], shown)
    assert out[-1] == "PLOT" and "<th>hybrid (Core ML)</th>" in out[0]
    assert "<td><b>1/0/1</b></td><td><b>0.4000</b></td>" in out[1]  # corpus GGML S/D/I, WER
    out = _show("placement", facts["placement"], shown)
    # The plan's rows open the stage's output; the cost share chart follows them.
    assert out[-1] == "PLOT" and "<td>25.00%</td>" in out[0]


# ----------------------------------------------------------------------------- one view contract

VIEWS_DIR = PACKAGE / "views"
DISPLAY_CALLS = {"display_html", "show_html", "display"}
"""Calls that put an output into the running notebook (``plt.show`` is a plot's own)."""


def _view_sources() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(VIEWS_DIR.glob("*.py")) if p.stem != "__init__"}


def _called(fn: ast.FunctionDef) -> set[str]:
    return {c.func.id if isinstance(c.func, ast.Name) else c.func.attr
            for c in ast.walk(fn) if isinstance(c, ast.Call)
            and isinstance(c.func, (ast.Name, ast.Attribute))}


def _displaying(tree: ast.Module) -> list[ast.FunctionDef]:
    """A view module's public functions that display: ``show``, ``show_*`` and any other
    that calls a display function."""
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
            and (n.name == "show" or n.name.startswith("show_") or _called(n) & DISPLAY_CALLS)]


def _comparison():
    from verifylib.compare.model import Comparison, GateCell, GateRow, RunInfo
    from verifylib.evidence.gates import Status
    runs = tuple(RunInfo(lab, Path(f"/runs/{lab}"), f"run-{lab}", "tiny-en", None, False,
                         "INCOMPLETE", None, "skipped") for lab in "AB")
    row = GateRow("build.ggml", "01_build", True, (GateCell(Status.PASS), GateCell(Status.FAIL, "rule",
                                                                              HOSTILE)))
    return Comparison(runs, (row,), (), (), None, (), (f"gate {HOSTILE} differs",))


def _replay_result():
    from verifylib.replay.claims import Claim, ClaimStatus, ReplayResult
    return ReplayResult(run_dir="/runs/A", run_id="run-A", verified=True, verify_problems=[],
                        verdict="INCOMPLETE",
                        claims=[Claim("wer.transcripts.jfk", ClaimStatus.DIFFERS, HOSTILE,
                                      "x", HOSTILE)])


def _samples(name: str) -> list:
    """What a view module's ``show`` is shown with: a stage report with and without facts."""
    if name == "compare":
        return [_comparison()]
    if name == "replay":
        return [_replay_result()]
    return [_report(name, _facts()[name]), _report(name, {})]


def test_every_display_function_returns_none_on_the_source():
    found, shows = [], set()
    for name, tree in _view_sources().items():
        for fn in _displaying(tree):
            shows |= {name} if fn.name == "show" else set()
            found += [f"views/{name}.py:{r.lineno}: {fn.name} returns a value"
                      for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None
                      and not (isinstance(r.value, ast.Constant) and r.value.value is None)]
    assert found == [], "a view displays and returns None (verifylib/views/__init__.py)"
    assert set(STAGE_VIEWS) | {"compare"} <= shows


def test_the_contract_scan_would_see_a_returned_html():
    tree = ast.parse("def show(r):\n    return html_object('x')\n"
                     "def note(r):\n    display_html('y')\n    return 1\n"
                     "def page(r):\n    return render('z')\n"
                     "def a_plot(r):\n    plt.show()\n    return fig\n")
    assert [f.name for f in _displaying(tree)] == ["show", "note"]


@pytest.mark.parametrize("name", sorted(n for n, tree in _view_sources().items()
                                        if any(f.name == "show" for f in _displaying(tree))))
def test_every_views_show_displays_and_returns_none(name, shown):
    view = importlib.import_module(f"verifylib.views.{name}")
    for sample in _samples(name):
        shown.clear()
        assert view.show(sample) is None
        html = [x for x in shown if x != "PLOT"]
        assert html and html[0].startswith(views.style_block()), name
        assert "<script" not in "".join(html).lower()


@pytest.mark.parametrize("name", ["build", "export"])
def test_html_is_the_text_show_displays(name, shown):
    view = importlib.import_module(f"verifylib.views.{name}")
    for facts in (_facts()[name], {}):
        text = view.html(_report(name, facts))
        assert isinstance(text, str) and text.startswith(views.style_block())
        assert _show(name, facts, shown) == [text]
    assert ESCAPED in view.html(_report(name, _facts()[name]))
    assert "did not run" in view.html(_report(name, {}))


def test_the_comparison_page_is_text_and_show_displays_its_fragment(shown):
    from verifylib.views import compare as view
    cmp = _comparison()
    assert isinstance(view.page(cmp), str) and ESCAPED in view.page(cmp)
    shown.clear()
    assert view.show(cmp) is None
    assert shown == [view.fragment(cmp)]


def test_stage_report_repr_escapes_reason_detail(tmp_path, monkeypatch):
    monkeypatch.setitem(rules.RULES, "build.source_identity",
                        lambda ev: Judgement(Status.FAIL, ev.json("t")["transcript"]))
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    ctx = StageContext("01_build", p, tmp_path / "run")
    g = ctx.begin("build.source_identity")
    with g:
        g.judge([ctx.write_json("t", {"transcript": HOSTILE})], {"runtime.tree": HOSTILE})
    page = stage_table(ctx.finish())
    assert page.startswith(views.style_block())
    assert "<script" not in page.lower() and page.count(ESCAPED) >= 2
    assert "<td class=\"vl-FAIL\"><b>FAIL</b></td>" in page


def test_templates_escape_but_the_stylesheet_is_raw():
    assert views.ENV.from_string("{{ x }}").render(x=HOSTILE) == ESCAPED
    for path in views.TEMPLATES.glob("*.j2"):
        assert views.ENV.autoescape(path.name), path.name
    assert not views.ENV.autoescape(views.STYLESHEET)
    css = views.stylesheet()
    assert css.strip() in views.style_block()
    for cls in ("PASS", "FAIL", "NOT_RUN", "ERROR", "ADMISSIBLE", "INCOMPLETE", "REJECTED"):
        assert f".vl-{cls} " in css


# ----------------------------------------------------------------------------- HTML only in views

def _modules(exclude_views: bool):
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if exclude_views and rel.startswith("views/"):
            continue
        yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _docstrings(tree) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_no_hand_escaping_or_html_literals_outside_views():
    found = []
    for rel, tree in _modules(exclude_views=True):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "escape"
                    and isinstance(node.value, ast.Name) and node.value.id == "html"):
                found.append(f"{rel}:{node.lineno}: html.escape")
            elif isinstance(node, ast.ImportFrom) and node.module == "html":
                found.append(f"{rel}:{node.lineno}: from html import ...")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and HTML_TAG.search(node.value)):
                found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "HTML belongs in verifylib/views/templates:\n" + "\n".join(found)


def test_view_modules_build_no_html_either():
    found = []
    for rel, tree in _modules(exclude_views=False):
        if not rel.startswith("views/"):
            continue
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs and HTML_TAG.search(node.value)):
                found.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "\n".join(found)


def test_the_scan_would_see_html():
    tree = ast.parse("x = f\"<td class='a'>{y}</td>\"\nz = '<path> and <n> runs'")
    hits = [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and HTML_TAG.search(n.value)]
    assert hits == ["<td class='a'>", "</td>"]


# ----------------------------------------------------------------------------- one stylesheet

def test_stylesheet_in_view_output_index_page_and_report(tmp_path, monkeypatch, shown):
    css = views.stylesheet().strip()
    out = _show("build", _facts()["build"], shown)
    assert css in out[0]

    synthetic.install_rules(monkeypatch)
    run_dir = synthetic.make_run(tmp_path)
    outcome = SimpleNamespace(name=HOSTILE, run_dir=run_dir, verdict=Verdict.INCOMPLETE)
    index = report.render_index([outcome], tmp_path).read_text()
    assert css in index and index.count("<style") == 1
    assert ESCAPED in index and "<script" not in index.lower()
    assert 'href="run/report.html"' in index and '<b class="vl-INCOMPLETE">' in index

    # A stage notebook whose outputs carry the views' style block: the report holds the
    # stylesheet once (from the nbconvert template), never as escaped text.
    rep = StageReport("01_build", _records(), {}, 0.1, {"k": HOSTILE})
    cell = nbformat.v4.new_code_cell("view.show(report)")
    cell.outputs = [nbformat.v4.new_output("execute_result", execution_count=1,
                                           data={"text/html": stage_table(rep)}),
                    nbformat.v4.new_output("display_data", data={"text/html": out[0]})]
    nb = nbformat.v4.new_notebook(cells=[cell])
    (run_dir / "notebooks").mkdir()
    nbformat.write(nb, run_dir / "notebooks" / "01_build.ipynb")
    short, _ = report.render(run_dir, [gates.STAGES[0]])
    page = short.read_text()
    assert page.count(css) == 1
    assert "&lt;style" not in page and "vl-style" not in page
    assert ESCAPED in page and "Build facts" in page and 'class="vl-FAIL"' in page


def test_a_stage_report_displays_as_its_gate_table_once_a_notebook_is_set_up(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from verifylib import notebook

    shell = InteractiveShell.instance()
    try:
        monkeypatch.setattr("IPython.get_ipython", lambda: shell)
        rep = StageReport("01_build", _records(), {}, 0.1, {})
        html = shell.display_formatter.formatters["text/html"]
        assert html(rep) is None
        notebook._show_stage_reports_as_tables()
        assert html(rep) == stage_table(rep)
    finally:
        InteractiveShell.clear_instance()
