"""Benchmark: time and peak memory of reading and importing whisper.cpp ggml files.

For each file, three fresh child processes (so each peak RSS is its own):

- ``read``: :func:`verifylib.models.ggml_file.open_ggml`, then every tensor dequantized to
  float32 one after another (what an audit that compares weights does);
- ``import``: :func:`verifylib.models.ggml_import.import_ggml` into a temporary folder;
- ``intake``: :func:`verifylib.models.intake.obtain_model` with ``{kind: ggml}`` on an empty
  cache (file digest, import, marker with every file's digest: what ``verifylib run`` does).

Files: the default model (tiny.en) written by our writer (f16) and, when the session's
``whisper-quantize`` build is in the cache, its q5_0; and a large-v3-shaped f16 file
(1.55 B parameters, 3.1 GB) with random weights, written here tensor by tensor.

Usage: ``.venv/bin/python benchmarks/ggml_intake.py [tiny|large-v3|all]`` (default all).
The large-v3 file goes to a temporary folder on the cache's filesystem and is removed.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LARGE_V3 = dict(n_vocab=51866, n_audio_ctx=1500, n_audio_state=1280, n_audio_head=20,
                n_audio_layer=32, n_text_ctx=448, n_text_state=1280, n_text_head=20,
                n_text_layer=32, n_mels=128, ftype=1)


def _peak_mib() -> float:
    # ru_maxrss survives exec on Linux (a child forked from a big parent starts at the
    # parent's size); VmHWM is the high-water mark of this image alone.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / (1 << 20)


def child(phase: str, path: str, work: str) -> None:
    """Run one phase and print its JSON record."""
    t0 = time.monotonic()
    if phase == "read":
        from verifylib.models.ggml_file import open_ggml

        with open_ggml(path) as gf:
            t_open = time.monotonic() - t0
            n = 0
            for name in gf.tensors:
                n += gf.tensor(name).size
        rec = {"open_s": round(t_open, 3), "values": n}
    elif phase == "import":
        from verifylib.models.ggml_import import import_ggml

        import_ggml(path, Path(work) / "hf")
        rec = {}
    else:
        from verifylib.models.intake import obtain_model

        info = obtain_model({"kind": "ggml", "path": path}, Path(work) / "cache",
                            log=lambda _: None)
        rec = {"cached": info.cached, "ftype": info.origin["ftype"]}
    rec.update(phase=phase, seconds=round(time.monotonic() - t0, 2),
               peak_rss_mib=round(_peak_mib(), 1))
    print(json.dumps(rec))


def measure(label: str, path: Path, scratch: Path) -> None:
    """Run the three phases on ``path`` in child processes and print a table row each."""
    from verifylib.runtime.runner import run

    size = path.stat().st_size / 1e6
    for phase in ("read", "import", "intake"):
        work = Path(tempfile.mkdtemp(prefix=f"{phase}-", dir=scratch))
        try:
            res = run([sys.executable, __file__, "--child", phase, str(path), str(work)],
                      timeout=3600, what=f"{label} {phase}")
            if not res.ok:
                print(f"{label} {phase} failed: {res.describe()}\n{res.stderr_text[-2000:]}")
                continue
            rec = json.loads(res.stdout_text.strip().splitlines()[-1])
            extra = {k: v for k, v in rec.items() if k not in ("phase", "seconds",
                                                                  "peak_rss_mib")}
            print(f"{label:<14} {size:8.1f} MB  {phase:<7} {rec['seconds']:7.2f} s  "
                  f"peak RSS {rec['peak_rss_mib']:8.1f} MiB  {extra or ''}", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def tiny_files(scratch: Path) -> list[tuple[str, Path]]:
    """tiny.en as f16 (our writer) and, if the quantizer is cached, q5_0."""
    from tests.helpers.model_data import default_model_spec
    from verifylib.models.ggml_writer import write_ggml_model
    from verifylib.models.intake import obtain_model
    from verifylib.resources import cache_dir
    from verifylib.runtime.runner import run

    cache = cache_dir()
    info = obtain_model(default_model_spec(), cache, log=lambda _: None)
    f16 = write_ggml_model(info.hf_dir, scratch / "tiny-f16.bin").path
    out = [("tiny.en f16", f16)]
    quant = sorted((cache / "builds").glob("quantize-*/bin/whisper-quantize"))
    if quant:
        q5 = scratch / "tiny-q5_0.bin"
        run([quant[0], f16, q5, "q5_0"], check=True, timeout=300, what="quantize")
        out.append(("tiny.en q5_0", q5))
    return out


def write_large_v3(dest: Path, vocab: list[bytes]) -> Path:
    """A large-v3-shaped f16 file with random weights, written one tensor at a time."""
    import numpy as np

    from verifylib.models.ggml_file import expected_layout
    from verifylib.models.ggml_writer import GGML_FILE_MAGIC, HPARAM_NAMES

    rng = np.random.default_rng(0)
    hp = LARGE_V3
    with open(dest, "wb") as fh:
        fh.write(struct.pack("<I", GGML_FILE_MAGIC))
        fh.write(struct.pack("<11i", *(hp[k] for k in HPARAM_NAMES)))
        fh.write(struct.pack("<ii", hp["n_mels"], 201))
        fh.write((rng.random((hp["n_mels"], 201)) * 0.01).astype("<f4").tobytes())
        fh.write(struct.pack("<i", len(vocab)))
        for tok in vocab:
            fh.write(struct.pack("<i", len(tok)) + tok)
        for name, (dims, gtype) in expected_layout(hp, 1).items():
            raw = name.encode()
            fh.write(struct.pack("<iii", len(dims), len(raw), gtype))
            fh.write(struct.pack(f"<{len(dims)}i", *dims) + raw)
            n = int(np.prod(dims))
            for start in range(0, n, 1 << 24):
                part = rng.standard_normal(min(1 << 24, n - start), dtype=np.float32) * 0.02
                fh.write(part.astype("<f4" if gtype == 0 else "<f2").tobytes())
    return dest


def main() -> None:
    """Measure the files named on the command line."""
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    from verifylib.models.ggml_file import open_ggml
    from verifylib.resources import cache_dir

    scratch = Path(tempfile.mkdtemp(prefix="ggml-bench-", dir=cache_dir()))
    try:
        tiny = tiny_files(scratch)
        if which in ("tiny", "all"):
            for label, path in tiny:
                measure(label, path, scratch)
        if which in ("large-v3", "all"):
            with open_ggml(tiny[0][1]) as gf:
                vocab = list(gf.vocab[:50256])     # the GPT-2 ranks; eot is 50257 here
            t0 = time.monotonic()
            big = write_large_v3(scratch / "large-v3-f16.bin", vocab)
            print(f"(large-v3-shaped f16 file written in {time.monotonic() - t0:.0f} s)")
            measure("large-v3 f16", big, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"host: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
