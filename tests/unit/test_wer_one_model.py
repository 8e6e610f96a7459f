"""Stage 05 holds one Hugging Face model at a time: the source leg is released before the
model imported from the ggml file is loaded (issue: a large model's two legs at once)."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

from verifylib.models import hf
from verifylib.stages import wer


class _Bundle:
    def __init__(self, hf_dir, multilingual):
        self.hf_dir, self.is_multilingual = hf_dir, multilingual


def _fakes(monkeypatch, multilingual=False):
    live: weakref.WeakSet = weakref.WeakSet()
    peak = {"n": 0, "loads": []}

    def load(hf_dir):
        gc.collect()
        b = _Bundle(str(hf_dir), multilingual)
        live.add(b)
        peak["n"] = max(peak["n"], len(live))
        peak["loads"].append(str(hf_dir))
        return b

    monkeypatch.setattr(hf, "load_hf", load)
    monkeypatch.setattr(hf, "transcribe_hf",
                        lambda b, audio, lang, **k: f"{b.hf_dir}:{audio}:{lang}")
    monkeypatch.setattr(hf, "detect_language_hf", lambda b, audio: ("de", 0.9))
    monkeypatch.setattr(wer, "read_wav_16k", lambda path: f"audio({path})")
    monkeypatch.setattr(wer, "fixture_language", lambda params, fx: fx.language)
    return peak


FIXTURES = [SimpleNamespace(id="a", language="en"), SimpleNamespace(id="b", language="de")]
INTAKES = {"a": SimpleNamespace(pcm_path="a.wav"), "b": SimpleNamespace(pcm_path="b.wav")}
PIN = {"beam_size": 1, "timestamps": False}


def test_the_two_legs_are_never_in_memory_together(monkeypatch):
    peak = _fakes(monkeypatch)
    heard = wer._hf_legs(None, FIXTURES, INTAKES, PIN, "/src", "/from-ggml")
    assert peak["loads"] == ["/src", "/from-ggml"] and peak["n"] == 1
    assert heard.source == {"a": ("/src:audio(a.wav):en", None),
                            "b": ("/src:audio(b.wav):de", None)}
    assert heard.from_ggml["b"] == ("/from-ggml:audio(b.wav):de", None)
    assert heard.multilingual is False


def test_the_same_weights_load_once_and_a_multilingual_source_detects(monkeypatch):
    peak = _fakes(monkeypatch, multilingual=True)
    heard = wer._hf_legs(None, FIXTURES, INTAKES, PIN, "/src", None)
    assert peak["loads"] == ["/src"]
    assert heard.from_ggml is heard.source and heard.multilingual is True
    assert heard.source["a"][1] == ("de", 0.9)
