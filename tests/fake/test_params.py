"""Parameter files are validated before any work: ``verifylib run`` exits 2, naming file and
key, and writes nothing (a child ``python -m verifylib``)."""

import shutil
import subprocess
import sys
import time

import yaml

from tests.helpers import ROOT
from verifylib import params


def _write(tmp_path, mutate):
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    mutate(data)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def test_cli_exits_2_fast_and_leaves_no_run_directory(tmp_path):
    f = _write(tmp_path, lambda d: d["runtime"].__setitem__("pin", "nope"))
    reports = tmp_path / "reports"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(f), "--reports",
                          str(reports)], capture_output=True, text=True)
    assert res.returncode == 2
    assert time.monotonic() - t0 < 20
    assert str(f) in res.stderr and "runtime.pin" in res.stderr
    assert not reports.exists()


def test_batch_validates_every_file_before_running(tmp_path):
    good = tmp_path / "good.yaml"
    shutil.copy(ROOT / "parameters" / "tiny-en.yaml", good)
    shutil.copytree(ROOT / "parameters" / "fixtures", tmp_path / "fixtures")
    assert params.load(good).name == "tiny-en"  # relative paths follow the file
    bad = _write(tmp_path, lambda d: d.__setitem__("extra", 1))
    reports = tmp_path / "reports"
    res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(good), str(bad),
                          "--reports", str(reports)], capture_output=True, text=True)
    assert res.returncode == 2 and "unknown key extra" in res.stderr
    assert not reports.exists()


def test_usage_error_exits_2():
    res = subprocess.run([sys.executable, "-m", "verifylib", "frobnicate"],
                         capture_output=True, text=True)
    assert res.returncode == 2
