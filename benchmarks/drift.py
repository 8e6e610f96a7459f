"""Benchmark: what op-level attribution adds to stage 04_parity (tiny.en, both variants).

Converts the default model's encoder to the fp32 and fp16 ML programs, then measures, on
jfk.wav's log-mel, stage 04's work per program candidate as the stage does it
(:func:`verifylib.stages.parity.measure_program`: both inputs in both compute modes, the
per-layer taps) without attribution and with it, interleaved, the median of N rounds.
The reference encoding (done once per stage) is counted in both. Prints the seconds
attribution adds and the ratio of stage 04's measuring work with attribution to without
(the issue's budget: at most 20 s added on two cores).

Usage: ``.venv/bin/python benchmarks/drift.py [N]`` (default N = 3)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    import dataclasses

    import torch
    import yaml

    from verifylib import resources
    from verifylib.whispercpp import source
    from verifylib.resources import cache_dir
    from verifylib.runtime.audio import read_wav_16k
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder
    from verifylib.models.coreml_package import place_mlpackage
    from verifylib.models.hf import load_hf
    from verifylib.models.intake import obtain_model
    from verifylib.numerics.reference import (ReferenceRun, fixture_logmel, random_logmel,
                                              reference_encode)
    from verifylib.stages.parity import measure_program

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    spec = yaml.safe_load(resources.default_parameters().read_text())["model"]
    info = obtain_model(spec, cache_dir(), log=lambda s: None)
    bundle = load_hf(info.hf_dir)
    encoder = bundle.model.get_encoder()
    contract = contract_of(encoder)
    tree = source.obtain_source(source.PYWHISPERCPP_V185, cache_dir(), log=lambda s: None)
    mel = fixture_logmel(bundle, read_wav_16k(tree.path / "samples" / "jfk.wav"), contract)
    rnd = random_logmel(contract)
    print(f"torch threads: {torch.get_num_threads()}; rounds: {n} (median)")

    with tempfile.TemporaryDirectory(prefix="verifylib-bench-drift-") as tmp:
        traced, _, _ = trace_encoder(encoder, contract)
        paths = {}
        for prec in ("fp32", "fp16"):
            conv = convert_traced(traced, contract, prec)
            paths[prec] = place_mlpackage(conv.model, Path(tmp) / prec /
                                          "ggml-model-encoder.mlpackage", contract, prec).final

        def stage_work(with_attribution: bool) -> float:
            t0 = time.perf_counter()
            outputs, layers, secs = {}, {}, {}
            for kind, x in (("fixture", mel), ("random", rnd)):
                outputs[kind], layers[kind], secs[kind] = reference_encode(encoder, x)
            ref = ReferenceRun(contract, {"fixture": mel, "random": rnd},
                               {"fixture": {"id": "jfk"}}, outputs, layers, secs, 550, {},
                               encoder=encoder if with_attribution else None)
            for prec in ("fp32", "fp16"):
                measure_program(paths[prec], dataclasses.replace(ref), variant=prec)
            return time.perf_counter() - t0

        stage_work(True)  # warm-up: weight widening caches, allocator, first imports
        base, full = [], []
        for _ in range(n):
            base.append(stage_work(False))
            full.append(stage_work(True))
    b, f = statistics.median(base), statistics.median(full)
    print(f"stage 04 measuring work without attribution: {b:.2f} s")
    print(f"stage 04 measuring work with attribution:    {f:.2f} s")
    print(f"added by attribution (both variants, one fixture): {f - b:.2f} s (budget 20 s)")
    print(f"ratio with / without: {f / b:.3f}")


if __name__ == "__main__":
    main()
