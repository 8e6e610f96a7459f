"""Benchmark: the MIL-program executor against the Hugging Face encoder, same process.

Converts the default model's encoder (tiny.en) to the fp32 and fp16 ML programs (timing
trace and conversion), then times, on jfk.wav's log-mel, the HF encoder (float32, eager,
CPU, inference mode) and the executor in float32 and float64 on the saved packages, each
the median of N runs after one warm-up, interleaved so both see the same machine load.
Prints the float32 executor's time over the HF encoder's (target <= 2) and the SNR /
cosine of each candidate.

Usage: ``.venv/bin/python benchmarks/parity.py [N]`` (default N = 5)
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
    import numpy as np
    import torch
    import yaml

    from verifylib import resources
    from verifylib.whispercpp import source
    from verifylib.runtime.audio import read_wav_16k
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder
    from verifylib.models.coreml_package import place_mlpackage
    from verifylib.numerics.mil_exec import execute, load_program
    from verifylib.models.hf import load_hf
    from verifylib.models.intake import obtain_model
    from verifylib.numerics.parity import compare
    from verifylib.resources import cache_dir
    from verifylib.numerics.reference import fixture_logmel

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    spec = yaml.safe_load(resources.default_parameters().read_text())["model"]
    info = obtain_model(spec, cache_dir(), log=lambda s: None)
    bundle = load_hf(info.hf_dir)
    encoder = bundle.model.get_encoder()
    contract = contract_of(encoder)
    tree = source.obtain_source(source.PYWHISPERCPP_V185, cache_dir(), log=lambda s: None)
    mel = fixture_logmel(bundle, read_wav_16k(tree.path / "samples" / "jfk.wav"), contract)
    print(f"torch threads: {torch.get_num_threads()}; runs per timing: {n} (median, after "
          f"one warm-up)")

    with tempfile.TemporaryDirectory(prefix="verifylib-bench-parity-") as tmp:
        traced, _, trace_s = trace_encoder(encoder, contract)
        print(f"trace: {trace_s:.2f} s")
        programs = {}
        for prec in ("fp32", "fp16"):
            conv = convert_traced(traced, contract, prec)
            t0 = time.perf_counter()
            placed = place_mlpackage(conv.model, Path(tmp) / prec / "ggml-model-encoder.mlpackage",
                                     contract, prec)
            save_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            programs[prec] = load_program(placed.final)
            load_s = time.perf_counter() - t0
            print(f"convert {prec}: {conv.seconds:.2f} s; save + read back + check: "
                  f"{save_s:.2f} s; executor load: {load_s:.2f} s")

        x = torch.from_numpy(mel)

        def hf():
            with torch.inference_mode():
                c0, t0 = time.process_time(), time.perf_counter()
                out = encoder(x).last_hidden_state
                return time.perf_counter() - t0, time.process_time() - c0, out.numpy()

        def ex(prec, mode):
            def go():
                c0 = time.process_time()
                r = execute(programs[prec], {"logmel_data": mel}, compute=mode)
                # r.seconds is the op-by-op wall time (big weights widened per use).
                return r.seconds, time.process_time() - c0, r.outputs["output"]
            return go

        cases = {"HF encoder (float32)": hf, "executor fp32 float32": ex("fp32", "float32"),
                 "executor fp32 float64": ex("fp32", "float64"),
                 "executor fp16 float32": ex("fp16", "float32")}
        wall = {k: [] for k in cases}
        cpu = {k: [] for k in cases}
        outs = {}
        for k, fn in cases.items():   # warm-up
            _, _, outs[k] = fn()
        for _ in range(n):
            for k, fn in cases.items():
                w, c, _ = fn()
                wall[k].append(w)
                cpu[k].append(c)
        hf_w = statistics.median(wall["HF encoder (float32)"])
        hf_c = statistics.median(cpu["HF encoder (float32)"])
        print(f"\n{'candidate':<26}{'wall s':>9}{'/ HF':>7}{'CPU s':>9}{'/ HF':>7}"
              f"{'SNR dB':>10}{'cosine':>17}")
        ref = outs["HF encoder (float32)"]
        for k in cases:
            w, c = statistics.median(wall[k]), statistics.median(cpu[k])
            m = compare(ref, outs[k])
            print(f"{k:<26}{w:>9.3f}{w / hf_w:>7.2f}{c:>9.3f}{c / hf_c:>7.2f}"
                  f"{m.snr_db:>10.2f}{m.cosine:>17.12f}")
        rw = statistics.median(wall["executor fp32 float32"]) / hf_w
        rc = statistics.median(cpu["executor fp32 float32"]) / hf_c
        print(f"\nfloat32 executor / HF encoder on CPU: {rw:.2f} wall, {rc:.2f} process CPU "
              f"time (target <= 2): {'OK' if max(rw, rc) <= 2 else 'ABOVE TARGET'}")


if __name__ == "__main__":
    main()
