"""Two real ``verifylib run`` processes at once on the session's build cache and one reports
folder: both publish, both verify, one shared build."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.helpers.batches import tiny_en_params
from verifylib import canonical

# ----------------------------------------------------------------------------- two real audits


@pytest.mark.physical
@pytest.mark.notebook
def test_two_simultaneous_default_audits_both_publish_and_verify(tmp_path, v185_ggml_build,
                                                                  v185_asan_builds):
    reports = tmp_path / "reports"
    # The default model and name with jfk as its one fixture, three lifecycle runs and the
    # fp32 variant alone: what is under test is two processes on one cache and one reports
    # folder, not the fixtures, the A/B or the fp16 path (the session's default audit has
    # them all).
    pfile = tiny_en_params(tmp_path, "tiny-en", **{"canary.runs": 3, "export.fp16": False})
    argv = [sys.executable, "-m", "verifylib", "run", str(pfile),
            "--reports", str(reports), "--no-progress"]
    t0 = time.monotonic()
    # Same cache (the session's, through the inherited environment), same reports folder,
    # same model: the two runs share every cache entry and the model's folder.
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=3600) for p in procs]
    seconds = time.monotonic() - t0
    print(f"two simultaneous default audits: {seconds:.0f} s")
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err[-3000:]
        assert "tiny-en: verdict INCOMPLETE" in out, out
    run_dirs = sorted(p for p in (reports / "tiny-en").iterdir() if not p.name.startswith("."))
    assert len(run_dirs) == 2, run_dirs
    for run_dir in run_dirs:
        assert any(str(run_dir / "receipt.json") in out for out, _ in outs)
        assert canonical.read_json(run_dir / "receipt.json")["verdict"] == "INCOMPLETE"
        res = subprocess.run([sys.executable, "-m", "verifylib", "verify", str(run_dir)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "verdict INCOMPLETE" in res.stdout
    assert not (reports / "tiny-en" / ".staging").exists(), "staging left behind"
    # One shared build: both runs' build.ggml evidence names the same binary.
    builds = {canonical.read_json(d / "evidence" / "01_build" / "build.json")["sha256"]
              for d in run_dirs}
    assert len(builds) == 1
    index = (reports / "index.html").read_text()
    for run_dir in run_dirs:
        assert f"{run_dir.relative_to(reports).as_posix()}/report.html" in index
