"""``verifylib lab`` in a real browser: a published run explored the documented way stays
intact, byte for byte and mtime for mtime, and still verifies.

Playwright drives Debian's chromium against the real ``jupyter lab`` that ``verifylib lab``
starts. Every notebook of the run is opened in the working folder and run whole ("Run All
Cells" from the Run menu); the test then waits past JupyterLab's autosave interval, which
it shortens to 3 s through JupyterLab's own user settings (the mechanism is the one that
rewrote published notebooks after two minutes), and checks the run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.forge import snapshot

AUTOSAVE_S = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_lab(run_dir: Path, work: Path, settings: Path) -> tuple[subprocess.Popen, str, list]:
    port = _free_port()
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings)}
    proc = subprocess.Popen([sys.executable, "-m", "verifylib", "lab", str(run_dir),
                             "--no-browser", "--port", str(port), "--work", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    lines: list[str] = []
    found: dict = {}

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            m = re.search(rf"(http://(?:127\.0\.0\.1|localhost):{port}/lab\?token=\w+)", line)
            if m and "url" not in found:
                found["url"] = m.group(1)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 120
    while "url" not in found and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    if "url" not in found:
        proc.kill()
        pytest.fail("jupyter lab did not start: " + "".join(lines)[-3000:])
    return proc, found["url"], lines


_PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
_STATUS = (f"() => {{ const e = document.querySelector('{_PANEL} "
           ".jp-Notebook-ExecutionIndicator'); return e && e.getAttribute('data-status'); }")
_PROMPTS = (f"() => [...document.querySelectorAll('{_PANEL} .jp-CodeCell .jp-InputPrompt')]"
            ".map(e => e.textContent.trim())")


def _menu(page, menu: str, item: str) -> None:
    page.get_by_role("menuitem", name=menu, exact=True).click()
    page.get_by_role("menuitem", name=item, exact=True).click()


def _run_all(page, url: str, name: str) -> None:
    base, token = url.split("/lab?token=")
    page.goto(f"{base}/lab/tree/{name}?token={token}")
    page.wait_for_selector(f"{_PANEL} .jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function(f"() => ({_STATUS})() === 'idle'", timeout=120_000)
    # Cleared first, so that a cell run now is told from one papermill ran: every prompt
    # is "[ ]:" until this kernel runs it.
    _menu(page, "Edit", "Clear Outputs of All Cells")
    page.wait_for_function(f"() => ({_PROMPTS})().every(t => !/[0-9*]/.test(t))",
                           timeout=60_000)
    _menu(page, "Run", "Run All Cells")
    page.wait_for_function(f"() => {{ const p = ({_PROMPTS})(); return p.length > 0 && "
                           f"p.every(t => /[0-9]/.test(t)) && ({_STATUS})() === 'idle'; }}",
                           timeout=900_000, polling=1000)


@pytest.mark.notebook
def test_exploring_a_published_run_in_jupyterlab_leaves_it_intact(default_audit, tmp_path):
    from playwright.sync_api import sync_playwright

    _, published = default_audit
    # A copy of the run, under its own id, so a failure here cannot touch the session's.
    run_dir = tmp_path / "runs" / published.name
    shutil.copytree(published, run_dir, symlinks=True)
    before = snapshot(run_dir)
    settings = tmp_path / "lab-settings"
    plugin = settings / "@jupyterlab" / "docmanager-extension"
    plugin.mkdir(parents=True)
    (plugin / "plugin.jupyterlab-settings").write_text(
        json.dumps({"autosave": True, "autosaveInterval": AUTOSAVE_S}))
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed (.ci/run installs Debian's)")

    work = tmp_path / "work"
    proc, url, lines = _start_lab(run_dir, work, settings)
    names = sorted(p.name for p in (run_dir / "notebooks").glob("*.ipynb"))
    errors = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                for name in names:
                    _run_all(page, url, name)
                    errors[name] = page.locator(
                        f"{_PANEL} [data-mime-type='application/vnd.jupyter.error']").count()
                    # Past the autosave interval with the notebook open and changed.
                    time.sleep(3 * AUTOSAVE_S)
            finally:
                browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    out = "".join(lines)
    assert f"run:            {run_dir}" in out and "verifies" in out, out[-2000:]
    assert errors == {n: 0 for n in names}, errors
    # The explorer's saves went to the working folder, the run kept every byte and mtime.
    assert snapshot(run_dir) == before
    assert not list(run_dir.rglob(".ipynb_checkpoints"))
    assert (work / ".ipynb_checkpoints").is_dir()
    saved = [n for n in names if (work / n).stat().st_mtime > (run_dir / "notebooks" / n)
             .stat().st_mtime]
    assert saved, "JupyterLab saved nothing: the test did not exercise autosave"
    res = subprocess.run([sys.executable, "-m", "verifylib", "verify", str(run_dir)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and f"OK: {run_dir} verifies" in res.stdout, \
        res.stdout + res.stderr
