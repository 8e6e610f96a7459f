"""Benchmark: a cold default audit against one full plain whisper-cli build, side by side.

In one run, on one machine state:

1. the default audit (``run_one`` on the embedded default parameters) in a fresh, empty
   cache, its stage lines printed as they come, each stamped with the seconds since start;
2. one full, monolithic plain ``whisper-cli`` build (ggml compiled into it, as upstream's
   own ``cmake -B build && cmake --build build --target whisper-cli`` does) of the same
   pinned source, with the same options as the audit's patched GGML build.

Prints each stage's wall time, each build the audit made (the shared ggml and every
whisper-cli variant, as their cache records give them), the longest silence between two
printed lines, and the two ratios the issue sets: cold stage 01 over the one build
(target <= 1.5) and the whole cold audit over the one build (target <= 1.8). A variant's
``seconds`` count from its call to its publication, so they include the time it waited
for (or built) the shared ggml and the time it shared the machine with another variant.

Usage: ``.venv/bin/python benchmarks/cold.py [--keep DIR]`` (``--keep`` leaves the cache
and the run in DIR instead of a temporary folder).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _stamped(t0: float, lines: list[tuple[float, str]]):
    def log(line: str) -> None:
        now = time.perf_counter() - t0
        lines.append((now, line))
        print(f"{now:7.1f}  {line}", flush=True)
    return log


def _builds(cache: Path) -> list[tuple[str, float, str]]:
    from verifylib.canonical import read_json
    rows = []
    for rec in sorted((cache / "ggml").glob("*/ggml.json")):
        data = read_json(rec)
        rows.append(("ggml (shared)", float(data.get("seconds") or 0.0), rec.parent.name[:12]))
    for rec in sorted((cache / "builds").glob("*/build.json")):
        data = read_json(rec)
        rows.append((f"whisper-cli [{data['variant']}]", float(data["seconds"]),
                     rec.parent.name[:12]))
    return rows


def _one_plain_build(cache: Path, work: Path) -> float:
    """Seconds of one monolithic plain whisper-cli build of the audit's pristine source."""
    from verifylib import params as params_mod
    from verifylib import resources
    from verifylib.stages import build as build_stage
    from verifylib.stages.artifacts import source_spec
    from verifylib.whispercpp import build_options, cmake_steps, source

    p = params_mod.load(resources.default_parameters())
    tree = source.obtain_source(source_spec(p), cache, log=lambda s: None)
    opts = build_options.effective_options("ggml", build_stage.build_options(p),
                                           backend=build_stage.ggml_backend(p))
    bdir = work / "plain-build"
    shutil.rmtree(bdir, ignore_errors=True)
    t0 = time.perf_counter()
    cmake_steps.cmake_target(tree.path, bdir, opts, "whisper-cli",
                             "whisper-cli [plain, one build]", jobs=p.runtime.jobs,
                             timeout=3600, log=print)
    seconds = time.perf_counter() - t0
    shutil.rmtree(bdir, ignore_errors=True)
    return seconds


def main() -> None:
    args = sys.argv[1:]
    keep = Path(args[args.index("--keep") + 1]) if "--keep" in args else None
    tmp = keep or Path(tempfile.mkdtemp(prefix="verifylib-cold-"))
    cache = tmp / "cache"
    if cache.exists():
        sys.exit(f"{cache} exists: a cold run needs an empty cache folder")
    os.environ["VERIFYLIB_CACHE"] = str(cache)
    from verifylib import resources
    from verifylib.batch.audit import load_all, run_one

    (params,) = load_all([str(resources.default_parameters())])
    lines: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    try:
        out = run_one(params, tmp / "reports", log=_stamped(t0, lines), progress=False)
        audit = time.perf_counter() - t0
        plain = _one_plain_build(cache, tmp)
        stamps = [0.0] + [t for t, _ in lines] + [audit]
        gap = max(b - a for a, b in zip(stamps, stamps[1:]))
        print(f"\ncold default audit: {audit:.1f} s, verdict {out.verdict.value}, "
              f"run {out.run_dir}")
        print(f"{'stage':<16}{'wall s':>9}")
        for stage, t in out.stage_seconds.items():
            print(f"{stage:<16}{t['wall']:>9.1f}")
        print(f"\n{'build (cache record)':<36}{'seconds':>9}  key")
        for name, seconds, key in _builds(cache):
            print(f"{name:<36}{seconds:>9.1f}  {key}")
        print(f"{'one plain monolithic whisper-cli':<36}{plain:>9.1f}  (side by side, now)")
        stage01 = out.stage_seconds["01_build"]["wall"]
        print(f"\nlongest silence between two printed lines: {gap:.1f} s (target <= 15)")
        print(f"cold stage 01 / one plain build: {stage01 / plain:.2f} (target <= 1.5)")
        print(f"cold audit / one plain build:    {audit / plain:.2f} (target <= 1.8)")
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
