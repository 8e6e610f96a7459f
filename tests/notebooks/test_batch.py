"""Audits sharing one cache and one reports folder: a batch of two parameter files in one
``verifylib run`` (two reports, one index, one shared build, ``--require admissible``)
and, at the same time, a second ``verifylib run`` process auditing the batch's first model
under the same name. Both are one test because the two properties are about the same runs:
the batch's sequence in one process, and two processes on one cache, one model folder and
one index at once.

Both processes run stage 01 only (``verifylib.batch.executors.DEFAULT_STAGES`` narrowed in
the launched process, as tests/notebooks/test_jobs.py and test_ray.py narrow it): what is
under test is the batch, the two processes and the publication, not the stages (the
session's default audit runs them all). A run of stage 01 alone is REJECTED, fail-closed
(the other stages' gates have no record), and still verifies; that an INCOMPLETE verdict
exits 1 under ``--require admissible`` is tests/unit/test_gates.py's.
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.batches import published_dirs, tiny_en_params
from verifylib import canonical

pytestmark = [pytest.mark.physical, pytest.mark.notebook]


# `verifylib run` with every batch narrowed to stage 01.
STAGE_01_ONLY = """
import sys
from verifylib.batch import executors
executors.DEFAULT_STAGES = ("01_build",)
from verifylib.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_batch_and_a_simultaneous_audit_share_one_build_and_one_index(
        tmp_path, v185_ggml_build, v185_asan_builds):
    batch = tmp_path / "batch"
    batch.mkdir()
    tiny_en_params(batch, "tiny-en")
    tiny_en_params(batch, "model-b")
    alone = tiny_en_params(tmp_path, "tiny-en")
    reports = tmp_path / "reports"
    common = ["--reports", str(reports), "--no-progress"]
    t0 = time.monotonic()
    procs = {
        "batch": subprocess.Popen([sys.executable, "-c", STAGE_01_ONLY, "run", str(batch),
                                   *common, "--require", "admissible"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        "alone": subprocess.Popen([sys.executable, "-c", STAGE_01_ONLY, "run", str(alone),
                                   *common],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)}
    outs = {k: p.communicate(timeout=3600) for k, p in procs.items()}
    print(f"a batch of two and one audit at once: {time.monotonic() - t0:.0f} s")
    (b_out, b_err), (a_out, a_err) = outs["batch"], outs["alone"]
    # REJECTED exits 1 with or without --require admissible; the reports are still written.
    assert procs["batch"].returncode == 1, b_out + b_err[-3000:]
    assert "worst verdict: REJECTED" in b_out
    assert procs["alone"].returncode == 1, a_out + a_err[-3000:]
    assert "tiny-en: verdict REJECTED" in a_out, a_out

    same_name = sorted(published_dirs(reports, "tiny-en"))
    (model_b,) = published_dirs(reports, "model-b")
    assert len(same_name) == 2, same_name
    runs = [*same_name, model_b]
    for run_dir in runs:
        assert (run_dir / "report.html").is_file()
        assert canonical.read_json(run_dir / "receipt.json")["verdict"] == "REJECTED"
    for run_dir in same_name:
        assert any(str(run_dir / "receipt.json") in out for out in (a_out, b_out))
        res = subprocess.run([sys.executable, "-m", "verifylib", "verify", str(run_dir)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "verdict REJECTED" in res.stdout
    for name in ("tiny-en", "model-b"):
        assert not (reports / name / ".staging").exists(), "staging left behind"
    # One shared build: the session's, found in the cache by all three runs.
    builds = [canonical.read_json(d / "evidence" / "01_build" / "build.json") for d in runs]
    assert all(b["cached"] is True for b in builds)
    assert len({b["sha256"] for b in builds}) == 1
    # One index over every run, whichever process wrote it last.
    index = (reports / "index.html").read_text()
    assert "<script" not in index.lower()
    assert "model-b" in index and "tiny-en" in index
    for run_dir in runs:
        assert f"{run_dir.relative_to(reports).as_posix()}/report.html" in index
    assert index.count("REJECTED") >= 3
