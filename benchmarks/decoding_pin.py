"""Benchmark: which decoding settings make whisper-cli and the Hugging Face reference agree.

Reads a published run (its parameters, its ``ggml-model.bin``, its GGML whisper-cli and
its source model, all named by the run's evidence) and transcribes every fixture in its
language with each candidate setting, on both implementations, from the one 16 kHz file
the intake makes. Every setting stays inside the runtime contract's rules: a fixed
``-l``, temperature 0 with no fallback, one processor, never ``-np`` or ``-ac``:

- ``greedy-nt``: ``-bs 1 -bo 1 -nt`` / ``generate(num_beams=1, return_timestamps=False)``
  (the pin of wer-v1 and of wer-v2's first runs);
- ``greedy-ts``: ``-bs 1 -bo 1`` with timestamps (stripped from stdout) /
  ``generate(num_beams=1, return_timestamps=True)``;
- ``beam5-nt``: ``-bs 5 -bo 1 -nt`` / ``generate(num_beams=5, return_timestamps=False)``.

It prints, per setting and fixture, the pairwise rate (whisper-cli against the reference,
WER or CER as wer-v2 scores that language) and each side's rate against the reference
text, then the corpus figures per setting: the ratios a choice of pin rests on.

Usage: ``.venv/bin/python benchmarks/decoding_pin.py RUN_DIR [--settings a,b]``
(``$VERIFYLIB_CACHE`` names the cache the run was made with.)
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = {
    "greedy-nt": (["-bs", "1", "-bo", "1", "-nt"], {"num_beams": 1, "return_timestamps": False}),
    "greedy-ts": (["-bs", "1", "-bo", "1"], {"num_beams": 1, "return_timestamps": True}),
    "beam5-nt": (["-bs", "5", "-bo", "1", "-nt"], {"num_beams": 5, "return_timestamps": False}),
}
_STAMP = re.compile(r"^\s*\[\d\d:\d\d:\d\d\.\d+ --> \d\d:\d\d:\d\d\.\d+\]\s*")


def cli_text(binary: Path, model: Path, audio: Path, language: str, args: list[str]) -> str:
    """whisper-cli's transcript under ``args`` (timestamps stripped from each line)."""
    from verifylib.runtime.runner import run_whisper_cli

    argv = [str(binary), "-m", str(model), "-f", str(audio), "-t", "2", *args, "-l", language,
            "--temperature", "0", "--temperature-inc", "0", "-p", "1"]
    res = run_whisper_cli(argv, timeout=600)
    if not res.ok:
        sys.exit(f"whisper-cli failed: {res.describe()}\n{res.stderr_text[-1500:]}")
    lines = [_STAMP.sub("", line) for line in res.stdout_text.splitlines()]
    return " ".join(" ".join(lines).split())


def main(argv: list[str]) -> int:
    from verifylib.canonical import read_json
    from verifylib.models.hf import load_hf, transcribe_hf
    from verifylib.numerics.scoring import corpus_wer, load_policy, scoring_for
    from verifylib.params import fixture_text, validate
    from verifylib.resources import cache_dir
    from verifylib.runtime.audio import read_wav_16k
    from verifylib.runtime.audio_intake import intake

    args = [a for a in argv if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    run = Path(args[0])
    chosen = list(SETTINGS)
    for a in argv:
        if a.startswith("--settings="):
            chosen = a.split("=", 1)[1].split(",")
    doc = read_json(run / "run.json")
    params = validate(doc["params"], str(run / "run.json"), Path(doc["params_origin"]).parent)
    model_ev = read_json(run / "evidence" / "02_export" / "model.json")
    binary = Path(read_json(run / "evidence" / "01_build" / "build.json")["binary"])
    ggml = run / "fp32" / "ggml-model.bin"
    rules = load_policy("wer-v2").rules
    bundle = load_hf(model_ev["hf_dir"])
    tree = None
    rows = []
    with tempfile.TemporaryDirectory(prefix="verifylib-pin-") as tmp:
        # A model with nothing beside it: no .mlmodelc can be picked up.
        model = Path(tmp) / "ggml-model.bin"
        model.symlink_to(ggml.resolve())
        for fx in params.fixtures:
            if fx.runtime_file:
                if tree is None:
                    src = read_json(run / "evidence" / "01_build" / "source.json")
                    tree = Path(src.get("tree") or src.get("path") or "")
                path = tree / fx.runtime_file
            else:
                path = params.resolve(fx.path)
            got = intake(path, cache_dir() / "audio", fx.id)
            audio = read_wav_16k(got.pcm_path)
            lang = fx.language or params.model.language
            sc = scoring_for(rules, lang)
            ref = sc.normalize(rules, fixture_text(params, fx) or "")
            for name in chosen:
                cli_args, hf_kwargs = SETTINGS[name]
                c = sc.normalize(rules, cli_text(binary, model, got.pcm_path, lang, cli_args))
                h = sc.normalize(rules, transcribe_hf(bundle, audio, lang, **hf_kwargs))
                rows.append((name, fx.id, lang, sc.unit, sc.count(rules, h, c),
                             sc.count(rules, ref, h), sc.count(rules, ref, c), h, c))
                print(f"{name:<10} {fx.id:<12} {lang}  pairwise "
                      f"{sc.count(rules, h, c).wer:.3f}  HF {sc.count(rules, ref, h).wer:.3f}"
                      f"  cli {sc.count(rules, ref, c).wer:.3f}", flush=True)
                if h != c:
                    print(f"    HF : {h}\n    cli: {c}", flush=True)
    print("\ncorpus per setting (pairwise = whisper-cli vs HF; identical = clips with the "
          "same normalized text)")
    for name in chosen:
        mine = [r for r in rows if r[0] == name]
        for unit in ("words", "characters"):
            part = [r for r in mine if r[3] == unit]
            if not part:
                continue
            same = sum(1 for r in part if r[7] == r[8])
            print(f"{name:<10} {unit:<10} pairwise {corpus_wer([r[4] for r in part]):.4f}  "
                  f"HF {corpus_wer([r[5] for r in part]):.4f}  cli "
                  f"{corpus_wer([r[6] for r in part]):.4f}  identical {same}/{len(part)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
