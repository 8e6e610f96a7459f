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


def _bad_fixture(tmp_path, name, make):
    path = tmp_path / name
    make(path)

    def mutate(d):
        d["fixtures"] = [{"id": "clip", "public": True, "path": str(path), "text": "hi"}]
    return path, _write(tmp_path, mutate)


def _wav_of(seconds, rate=1000, value=100):
    import numpy as np
    import soundfile

    def make(path):
        soundfile.write(str(path), np.full(int(rate * seconds), value, np.int16), rate,
                        format="WAV", subtype="PCM_16")
    return make


def test_unusable_recordings_exit_2_in_one_line_before_any_work(tmp_path):
    """Not audio, empty, silent, 30 minutes: refused at validation, nothing left behind."""
    cases = [("text.mp3", lambda p: p.write_text("not audio"), "not an audio file"),
             ("empty.wav", lambda p: p.write_bytes(b""), "not an audio file"),
             ("nothing.wav", _wav_of(0), "holds no audio"),
             ("silent.wav", _wav_of(2, 16000, 0), "silent"),
             ("half-hour.wav", _wav_of(1800), "1800.0 s long")]
    for name, make, needle in cases:
        audio, f = _bad_fixture(tmp_path, name, make)
        reports = tmp_path / "reports"
        before = sorted(p.name for p in tmp_path.iterdir())
        res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(f), "--reports",
                              str(reports), "--no-progress"], capture_output=True, text=True)
        assert res.returncode == 2, (name, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (name, lines)
        assert "key fixtures[0].path" in lines[0] and str(audio) in lines[0]
        assert not reports.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == before
