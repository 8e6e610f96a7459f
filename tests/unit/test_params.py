"""Parameter files are validated before any work: exit 2, naming file and key, nothing written."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from verifylib import params
from verifylib.params import ParameterError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["tiny-en.yaml", "tiny-en-97c56f1.yaml"])
def test_shipped_parameter_files_validate(name):
    p = params.load(ROOT / "parameters" / name)
    assert p.name == name[:-5]
    assert p["canary"]["runs"] == 20


def _write(tmp_path, mutate):
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    mutate(data)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


CASES = [
    (lambda d: d.__setitem__("colour", "blue"), "unknown key colour"),
    (lambda d: d["runtime"].__setitem__("turbo", True), "unknown key runtime.turbo"),
    (lambda d: d["canary"].__setitem__("runs", "twenty"), "key canary.runs: expected integer"),
    (lambda d: d["runtime"].__setitem__("pin", "v0.0.1"), "key runtime.pin: unknown pin"),
    (lambda d: d["runtime"].__setitem__("source", {"kind": "folder", "path": "/nonexistent/x"}),
     "key runtime.source.path"),
    (lambda d: d["fixtures"][0].update({"path": "nope.wav"}) or d["fixtures"][0].pop("runtime_file"),
     "key fixtures[0].path"),
    (lambda d: d.pop("model"), "missing key model"),
    (lambda d: d["fixtures"][0].__setitem__("public", False), "key fixtures[0].text: a non-public"),
    (lambda d: d["fixtures"][0].__setitem__("text_file", "nope.txt"), "give text or text_file"),
    (lambda d: d["runtime"].__setitem__("source", {"kind": "git", "url": "x", "commit": "a" * 40}),
     "key runtime.source.commit"),
]


@pytest.mark.parametrize("mutate,message", CASES)
def test_bad_parameters_are_named(tmp_path, mutate, message):
    f = _write(tmp_path, mutate)
    with pytest.raises(ParameterError) as exc:
        params.load(f)
    assert str(f) in str(exc.value)
    assert message in str(exc.value)


def test_missing_and_non_yaml_files(tmp_path):
    with pytest.raises(ParameterError, match="not found"):
        params.load(tmp_path / "absent.yaml")
    bad = tmp_path / "x.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ParameterError, match="not valid YAML"):
        params.load(bad)


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
