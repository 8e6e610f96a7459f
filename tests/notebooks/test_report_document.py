"""The default run's documents as an auditor and a researcher meet them.

- Every evidence link of the report's gate tables opens a file of the run whose SHA-256 is
  the one shown beside it (and the receipt's); no absolute path of the audit host is left
  outside the host facts.
- In Chromium (Playwright driving Debian's ``chromium``), the report, the reports index and
  a compare page (the run beside a copy of itself, which it calls the same run) at 1400
  and 800 px: no sideways scrolling, and axe-core reports no serious or critical
  violation. The first screen of each is kept as a screenshot (copied into
  ``docs/screenshots/`` when ``VERIFYLIB_UPDATE_SCREENSHOTS=1``).
- A published notebook, copied with its run to another folder and executed top to bottom by
  papermill without parameters, writes nothing and shows the run.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.helpers import ROOT
from verifylib import canonical

pytestmark = [pytest.mark.physical, pytest.mark.notebook]

WIDTHS = (1400, 800)
SCREENSHOTS = ROOT / "docs" / "screenshots"


class _Links(HTMLParser):
    """Collect the gate tables' evidence links and the digest shown after each."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []   # (href, digest shown)
        self.hrefs: list[str] = []
        self._href: str | None = None
        self._in_hash = False
        self._in_evidence = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td" and "vl-evidence" in (a.get("class") or ""):
            self._in_evidence = True
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
            if self._in_evidence:
                self._href = a["href"]
        if tag == "code" and "vl-hash" in (a.get("class") or "") and self._href:
            self._in_hash = True

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_evidence = False
        if tag == "code":
            self._in_hash = False

    def handle_data(self, data):
        if self._in_hash and self._href:
            self.links.append((self._href, data.strip()))
            self._href = None


@pytest.fixture(scope="module")
def run_dir(default_audit) -> Path:
    return default_audit[1]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_evidence_link_opens_its_file_and_the_digest_matches(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    parser = _Links()
    parser.feed(page)
    receipt = canonical.read_json(run_dir / "receipt.json")
    cited = {ev["path"]: ev["sha256"] for g in receipt["gates"] for ev in g.get("evidence", [])}
    assert parser.links and {href for href, _ in parser.links} == set(cited)
    for href, shown in parser.links:
        target = run_dir / href
        assert target.is_file(), href
        assert _sha256(target) == shown == cited[href], href
    # The run's own files are one click from the first screen as well.
    for href in ("receipt.json", "report-full.html", "notebooks/01_build.ipynb"):
        assert href in parser.hrefs and (run_dir / href).is_file(), href
    # Every in-page link leads to an anchor of the page (the contents, the gate rows).
    anchors = {h[1:] for h in parser.hrefs if h.startswith("#")}
    assert {"gates", "informational", "stage-01_build", "stage-06_placement"} <= anchors
    for anchor in anchors:
        assert f'id="{anchor}"' in page, anchor
    assert "<title>tiny-en: INCOMPLETE · verifylib audit " in page
    # Each public clip plays from the report: its audio is the cited file both legs heard.
    audio = re.findall(r'<audio [^>]*src="([^"]+)"', page)
    wer = canonical.read_json(run_dir / "evidence" / "05_wer" / "wer.json")
    assert audio == [f"evidence/05_wer/audio-{c['id']}.wav" for c in wer["clips"] if c["public"]]
    assert "evidence/05_wer/audio-jfk.wav" in audio
    for src in audio:
        assert _sha256(run_dir / src) == cited[src], src
    # Each rendering links to the other, never to itself.
    full = (run_dir / "report-full.html").read_text(encoding="utf-8")
    assert 'href="report.html"' in full and 'href="report-full.html"' not in full
    assert 'href="report.html"' not in page


def test_no_host_path_is_left_outside_the_host_facts(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    body, host_facts = page.split('<h2 id="host">', 1)
    host_facts = host_facts.split("</table>", 1)[1]
    cache = os.environ.get("VERIFYLIB_CACHE")
    host = [str(run_dir.parent), sys.prefix, str(Path.home())] + ([cache] if cache else [])
    for text in (body, host_facts):
        for path in host:
            assert path not in text, path
    assert ".staging" not in page
    # Printed output is shown as output (folded when long), never as an error box.
    assert "jp-OutputArea-stderr" not in page and '<details class="vl-log">' in page


def _browser():
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed (.ci/run installs Debian's)")
    return sync_playwright(), chromium


@pytest.fixture(scope="module")
def compare_page(run_dir, tmp_path_factory) -> Path:
    """The default run compared with a copy of itself (which the page must call the same run)."""
    base = tmp_path_factory.mktemp("compare")
    copy = shutil.copytree(run_dir, base / "copy" / run_dir.name)
    res = subprocess.run([sys.executable, "-m", "verifylib", "compare", str(run_dir), str(copy),
                          "-o", str(base / "out")], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    page = base / "out" / "compare.html"
    assert "same run" in page.read_text(encoding="utf-8")
    return page


@pytest.mark.parametrize("page_name", ["report.html", "index.html", "compare.html"])
def test_the_pages_in_chromium_fit_the_window_and_pass_axe(run_dir, page_name, tmp_path,
                                                           request):
    from axe_playwright_python.sync_playwright import Axe

    if page_name == "compare.html":
        url = request.getfixturevalue("compare_page").as_uri()
    else:
        url = (run_dir / page_name if page_name == "report.html"
               else run_dir.parent.parent / page_name).as_uri()
    manager, chromium = _browser()
    with manager as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            for width in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.goto(url)
                assert page.evaluate("document.documentElement.scrollWidth") <= width, width
                bad = [(v["id"], v["impact"], v["help"])
                       for v in Axe().run(page).response["violations"]
                       if v["impact"] in ("serious", "critical")]
                assert bad == [], (width, bad)
                if page_name == "report.html":
                    # The clip's player loads the file: Chromium reads its duration.
                    seconds = page.evaluate(
                        "async () => { const a = document.querySelector('audio[src$=\"audio-jfk.wav\"]');"
                        " a.preload = 'auto'; a.load(); await new Promise((ok, no) => {"
                        " a.onloadedmetadata = ok; a.onerror = no; }); return a.duration; }")
                    assert 10.0 < seconds < 12.0, seconds
                shot = tmp_path / f"{Path(page_name).stem}-first-screen-{width}.png"
                page.screenshot(path=str(shot))
                assert shot.stat().st_size > 10_000
                if os.environ.get("VERIFYLIB_UPDATE_SCREENSHOTS") == "1":
                    SCREENSHOTS.mkdir(exist_ok=True)
                    shutil.copyfile(shot, SCREENSHOTS / shot.name)
                page.close()
        finally:
            browser.close()


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _sha256(p) for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_published_notebook_reopens_its_run_from_a_copy(run_dir, tmp_path):
    copy = shutil.copytree(run_dir, tmp_path / "elsewhere" / run_dir.name)
    before = _tree(copy)
    out = tmp_path / "out.ipynb"
    # As JupyterLab runs it: the kernel starts in the notebook's folder; no parameters.
    res = subprocess.run([sys.executable, "-m", "papermill", "--cwd", str(copy / "notebooks"),
                          str(copy / "notebooks" / "05_wer.ipynb"), str(out)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert _tree(copy) == before  # nothing written into the run
    shown = out.read_text(encoding="utf-8")
    assert f"published run {copy} (read-only" in shown
    assert "And so my fellow Americans" in shown  # the run's transcripts, read back
    # The notebook's parameters name its run relative to itself.
    assert 'run_dir = \\"..\\"' in shown and f"published_run = '{run_dir.name}'" in shown
    # Started anywhere else (not its folder, nor the run folder) it refuses to start a run.
    res = subprocess.run([sys.executable, "-m", "papermill", "--cwd", str(tmp_path),
                          str(copy / "notebooks" / "01_build.ipynb"), str(tmp_path / "o2.ipynb")],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode != 0
    assert f"belongs to the published run {run_dir.name}" in res.stdout + res.stderr
    assert _tree(copy) == before and not (tmp_path / "reports").exists()
