"""Every hostile file a parameter file can name is refused at validation (issue 35, part 1):
``verifylib run`` (and ``verifylib doctor`` for the encoders) exits 2 with one line naming the
parameter file, the key and the reason, creates no reports folder, writes nothing into the
cache or ``$TMPDIR``, and leaves the inputs' folder as it was. Each input is small and
synthetic (:mod:`tests.helpers.hostile_inputs`); nothing here starts an audit. The elapsed
time of each child ``python -m verifylib`` is printed, not asserted tightly (the host is
shared)."""

import os
import subprocess
import sys
import time

import pytest
import yaml

from tests.helpers import ROOT
from tests.helpers.hostile_inputs import (
    accepted_audio,
    hostile_audio,
    hostile_ct2,
    hostile_encoders,
)

AUDIO_NEEDLES = {"text": "not an audio file", "fake-mp3": "not an audio file",
                 "link": "is a symbolic link", "zero-samples": "holds no audio",
                 "half-hour": "1800.0 s long"}
CT2_NEEDLES = {"ct2-truncated": "truncated while reading",
               "ct2-count": "declares 4294967295 variables",
               "ct2-dims": "need 34359738368"}
ENCODER_NEEDLES = {
    "pkg-weight-link": "is a symbolic link", "pkg-weight-outside": "leads outside",
    "pkg-weight-empty": "is empty (0 bytes)", "pkg-weight-sparse": "is sparse",
    "mlmodelc-weight-link": "is a symbolic link", "mlmodelc-weight-outside": "leads outside",
    "mlmodelc-weight-empty": "is empty (0 bytes)", "mlmodelc-weight-sparse": "is sparse",
    "mlmodelc-garbage-mil": "model.mil does not parse as MIL text"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    return {"audio": hostile_audio(base / "audio"), "ct2": hostile_ct2(base / "ct2"),
            "encoder": hostile_encoders(base / "encoders"),
            "accepted": accepted_audio(base / "accepted")}


def _parameters(tmp_path, mutate):
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["fixtures"] = data["fixtures"][:1]  # jfk, from the runtime tree
    mutate(data)
    f = tmp_path / "hostile.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def _listing(*folders):
    return {str(f): sorted(str(p.relative_to(f)) for p in f.rglob("*")) for f in folders}


def _refused(tmp_path, f, key, needle, *, command="run", label=""):
    """Run ``verifylib <command> f`` in a child; assert the one-line refusal, nothing left."""
    reports, cache, tmp = tmp_path / "reports", tmp_path / "cache", tmp_path / "tmp"
    cache.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "VERIFYLIB_CACHE": str(cache), "TMPDIR": str(tmp)}
    argv = [sys.executable, "-m", "verifylib", command, str(f)]
    if command == "run":
        argv += ["--reports", str(reports), "--no-progress"]
    before = _listing(tmp_path)
    t0 = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    took = time.monotonic() - t0
    print(f"{label or key} ({command}): exit {res.returncode} in {took:.1f} s")
    assert res.returncode == 2, (label, res.stdout[-2000:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, (label, lines)
    assert f"{f}: key {key}: " in lines[0] and needle in lines[0], (label, lines[0])
    assert not reports.exists()
    assert _listing(tmp_path) == before
    assert not any(cache.iterdir()) and not any(tmp.iterdir())
    return lines[0]


@pytest.mark.parametrize("name", sorted(AUDIO_NEEDLES))
def test_a_hostile_fixture_is_refused_at_validation(inputs, tmp_path, name):
    path = inputs["audio"][name]
    f = _parameters(tmp_path, lambda d: d["fixtures"].append(
        {"id": "hostile", "public": True, "path": str(path), "text": "hi"}))
    line = _refused(tmp_path, f, "fixtures[1].path", AUDIO_NEEDLES[name], label=name)
    assert "/etc/passwd" not in line


@pytest.mark.parametrize("name", sorted(CT2_NEEDLES))
def test_a_hostile_ct2_model_is_refused_at_validation(inputs, tmp_path, name):
    folder = inputs["ct2"][name]
    f = _parameters(tmp_path, lambda d: d.update(model={"kind": "ct2-dir",
                                                        "path": str(folder)}))
    _refused(tmp_path, f, "model.path", CT2_NEEDLES[name], label=name)


@pytest.mark.parametrize("name", sorted(ENCODER_NEEDLES))
def test_a_hostile_encoder_is_refused_at_validation(inputs, tmp_path, name):
    folder = inputs["encoder"][name]

    def mutate(d):
        d.pop("export")
        d["encoder"] = {"path": str(folder)}
    f = _parameters(tmp_path, mutate)
    _refused(tmp_path, f, "encoder.path", ENCODER_NEEDLES[name], label=name)


@pytest.mark.parametrize("name", ["mlmodelc-weight-link", "pkg-weight-outside"])
def test_doctor_refuses_a_hostile_encoder_as_run_does(inputs, tmp_path, name):
    folder = inputs["encoder"][name]

    def mutate(d):
        d.pop("export")
        d["encoder"] = {"path": str(folder)}
    f = _parameters(tmp_path, mutate)
    _refused(tmp_path, f, "encoder.path", ENCODER_NEEDLES[name], command="doctor",
             label=name)


def test_8_bit_stereo_and_22050_hz_pass_validation(inputs, tmp_path):
    """What the intake decodes to 16 kHz mono 16-bit is accepted: the refusal that follows
    is for another key (an unknown pin), so no audit starts."""
    def mutate(d):
        d["runtime"]["pin"] = "v0.0.0"
        d["fixtures"] += [{"id": k.replace("-", "_"), "public": True, "path": str(p),
                           "text": "hi"} for k, p in inputs["accepted"].items()]
    f = _parameters(tmp_path, mutate)
    _refused(tmp_path, f, "runtime.pin", "unknown pin", label="8-bit/stereo/22050")
