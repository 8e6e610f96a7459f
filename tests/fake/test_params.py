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


def test_hostile_parameter_files_exit_2_in_one_line_and_leave_nothing(tmp_path):
    """An alias bomb, 10^5-deep nesting, a 50 MB file, a string over its limit: each is
    refused by ``verifylib run`` before any expansion (the bomb would take gigabytes, the
    nesting a RecursionError), on one line of stderr, with no reports folder."""
    from verifylib import user_yaml
    base = (ROOT / "parameters" / "tiny-en.yaml").read_text()
    bomb = ['b0: &a0 "lol"'] + [f"b{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]"
                                for i in range(1, 10)]
    big = tmp_path / "big.yaml"
    big.write_text(base)
    with open(big, "r+b") as fh:
        fh.truncate(50_000_000)  # sparse: its size is refused before it is read
    cases = {
        "bomb.yaml": ("\n".join(bomb) + "\n" + base.replace("\ndescription:", "\ndescription: "
                      "*a9\nold:", 1), "YAML alias *a0 refused"),
        "deep.yaml": ("name: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper than 32"),
        "deepmap.yaml": ("name: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n",
                         "nested deeper than 32"),
        "long.yaml": (base.replace("description: >-\n", "description: "
                                   + "x" * (user_yaml.MAX_STRING_BYTES + 1) + "\nold: >-\n"),
                      "key description: a string of 16385 bytes"),
        "big.yaml": (None, "50000000 bytes, above the limit of 1048576"),
    }
    for name, (text, needle) in cases.items():
        f = tmp_path / name
        if text is not None:
            f.write_text(text)
        before = sorted(p.name for p in tmp_path.iterdir())
        reports = tmp_path / "reports"
        res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(f), "--reports",
                              str(reports), "--no-progress"], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 2, (name, res.stderr[-2000:])
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and str(f) in lines[0], (name, lines)
        assert not reports.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_unreadable_encoder_is_refused_in_exactly_one_line(tmp_path):
    """Reading the encoder's protobuf imports coremltools, which logs a torch-version warning
    at import on this torch; the refusal is still the one line on stderr."""
    pkg = tmp_path / "ggml-tiny.en-encoder.mlpackage"
    (pkg / "Data" / "com.apple.CoreML").mkdir(parents=True)
    (pkg / "Manifest.json").write_text(
        '{"fileFormatVersion": "1.0.0", "rootModelIdentifier": "a", "itemInfoEntries": '
        '{"a": {"path": "com.apple.CoreML/model.mlmodel"}}}')
    (pkg / "Data" / "com.apple.CoreML" / "model.mlmodel").write_bytes(b"\xff" * 64)

    def mutate(d):
        d["encoder"] = {"path": str(pkg)}
        d["export"] = {"fp16": False}
        d["fixtures"] = d["fixtures"][:1]
    f = _write(tmp_path, mutate)
    reports = tmp_path / "reports"
    res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(f), "--reports",
                          str(reports), "--no-progress"], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "key encoder.path" in lines[0] and "not a readable Core ML protobuf" in lines[0]
    assert not reports.exists()
