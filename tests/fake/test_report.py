"""The report: self-contained, script-free, hostile run text rendered inert (also in Chromium)."""

import shutil
import subprocess

import nbformat
import pytest

from verifylib import canonical, params
from verifylib.evidence import gates, receipt
from verifylib.views import report
from verifylib.evidence import registry as rules
from verifylib.evidence.gates import Judgement, Status
from verifylib.stages.context import StageContext

from tests.helpers import ROOT

HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


@pytest.fixture
def hostile_run(tmp_path, monkeypatch):
    monkeypatch.setitem(rules.RULES, "build.source_identity",
                        lambda ev: Judgement(Status.FAIL, ev.json("t")["transcript"]))
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    run_dir = tmp_path / "run"
    ctx = StageContext("01_build", p, run_dir)
    g = ctx.begin("build.source_identity")
    with g:
        g.judge([ctx.write_json("t", {"transcript": HOSTILE})])
    ctx.finish()
    for stage in gates.STAGES[1:]:
        StageContext(stage, p, run_dir).finish()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print('x')")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=HOSTILE),
        nbformat.v4.new_output("display_data", data={"text/html": f"<p>{HOSTILE}</p>",
                                                     "text/plain": HOSTILE}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "alert(2)"}),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# 01_build"), cell]
    (run_dir / "notebooks").mkdir()
    nbformat.write(nb, run_dir / "notebooks" / "01_build.ipynb")
    receipt.build_receipt(run_dir)
    report.render(run_dir)
    return run_dir


def test_hostile_text_is_inert_and_no_script_or_remote_loads(hostile_run):
    for name in ("report.html", "report-full.html"):
        page = (hostile_run / name).read_text()
        assert "<script" not in page.lower()
        assert "onerror=" not in page.replace("onerror=alert(1)&gt;", "")
        assert "&lt;script&gt;" in page  # shown as text
        assert 'src="http' not in page and "https://cdn" not in page
        assert "alert(2)" not in page  # the JavaScript output was dropped
        assert "Verdict: <b>REJECTED</b>" in page


def test_summary_lists_identities_host_and_packages(hostile_run):
    page = (hostile_run / "report.html").read_text()
    for anchor, heading in (("gates", "Required gates"), ("informational", "Informational gates"),
                            ("identities", "Identities"), ("host", "Host"),
                            ("packages", "Package versions")):
        assert f'<h2 id="{anchor}">{heading}</h2>' in page
    assert "coremltools" in page and "build.source_identity" in page


@pytest.mark.skipif(not shutil.which("chromium"), reason="Debian chromium not installed "
                    "(.ci/run installs it)")
def test_report_in_headless_chromium(hostile_run, tmp_path):
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    url = (hostile_run / "report.html").as_uri()
    dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<script" not in dom.stdout.lower()
    assert "pwned" not in dom.stdout.split("<title>")[1].split("</title>")[0]
    assert "Verdict:" in dom.stdout
    shot = tmp_path / "report.png"
    res = subprocess.run(base + ["--window-size=1280,2000", f"--screenshot={shot}", url],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and shot.stat().st_size > 20_000
