"""Benchmark: a replay of the default run against a warm default audit.

Runs the default audit once to warm the cache (unless ``--warm-only``), then a warm
default audit (timed), then ``verifylib verify RUN --replay`` of that run (timed), each as
the command line runs it, and prints both wall times, the ratio (target ≤ 1.2) and where
the replay's time goes: verify, each re-run stage, the published packages' re-execution
and the comparisons, from the replay's own record and claim table.

Usage: ``.venv/bin/python benchmarks/replay.py [--warm-only] [parameters/tiny-en.yaml]``
(``$VERIFYLIB_CACHE`` names the cache; default the user's.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(params: Path) -> str:
    import yaml
    return yaml.safe_load(params.read_text(encoding="utf-8"))["name"]


def _audit(params: Path, reports: Path) -> tuple[float, Path]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(params), "--reports",
                          str(reports), "--no-progress"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.exit(f"audit failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    runs = sorted(p for p in (reports / _name(params)).iterdir()
                  if not p.name.startswith("."))
    return wall, runs[-1]


def main(argv: list[str]) -> int:
    warm_only = "--warm-only" in argv
    args = [a for a in argv if not a.startswith("--")]
    params = Path(args[0]) if args else ROOT / "parameters" / "tiny-en.yaml"
    with tempfile.TemporaryDirectory(prefix="verifylib-replay-bench-") as tmp:
        tmp_path = Path(tmp)
        if not warm_only:
            print("warming the cache with one audit …", flush=True)
            _audit(params, tmp_path / "warmup")
        audit_s, run_dir = _audit(params, tmp_path / "reports")
        print(f"warm default audit: {audit_s:.1f} s ({run_dir.name})", flush=True)
        out = tmp_path / "replay"
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "verifylib", "verify", str(run_dir),
                              "--replay", "-o", str(out)], capture_output=True, text=True)
        replay_s = time.perf_counter() - t0
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:])
            return 1
        doc = json.loads((out / "replay.json").read_text(encoding="utf-8"))
        rec = json.loads((out / "work" / "replay-rederive.json").read_text(encoding="utf-8"))
        print(f"replay:             {replay_s:.1f} s ({doc['counts']})")
        print("where the replay's time goes:")
        for stage, s in rec["seconds"].items():
            print(f"  stage {stage} again        {s:8.1f} s")
        parity = sum(c["seconds"] for c in doc["claims"] if c["id"].startswith("parity."))
        print(f"  published packages again {parity:8.1f} s")
        rest = replay_s - sum(rec["seconds"].values()) - parity
        print(f"  verify, comparisons, interpreter start, pages {rest:8.1f} s")
        print(f"ratio replay / warm audit: {replay_s / audit_s:.2f} (target ≤ 1.20)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
