"""The committed spoken fixtures: our own synthesized data, digests and format checked."""

import wave

import yaml

from verifylib import params
from verifylib.canonical import sha256_file

from tests.helpers import ROOT

FIX = ROOT / "parameters" / "fixtures"


def _sums():
    out = {}
    for line in (FIX / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ")
        out[name] = digest
    return out


def test_fixture_files_match_their_digests_and_format():
    sums = _sums()
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    synthesized = [fx for fx in p["fixtures"] if "path" in fx]
    assert len(synthesized) >= 8
    total = 0.0
    for fx in synthesized:
        path = p.resolve(fx["path"])
        assert sums[path.name] == sha256_file(path), fx["id"]
        with wave.open(str(path)) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            seconds = w.getnframes() / 16000
        assert 2 < seconds < 30, fx["id"]  # HF's encoder window is 30 s
        total += seconds
        assert params.fixture_text(p, params.Fixture(**fx)), fx["id"]
    assert total >= 90
    assert set(sums) == {p.resolve(fx["path"]).name for fx in synthesized}


def test_private_fixture_keeps_its_text_out_of_the_parameters():
    raw = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    private = [fx for fx in raw["fixtures"] if not fx["public"]]
    assert private and all("text" not in fx and "text_file" in fx for fx in private)
