"""Benchmark: the default audit, cold then warm, with per-stage overhead.

Prints, per stage, the wall time of the whole notebook execution (kernel start-up,
papermill, the stage's verifylib work), the time inside the stage's verifylib call (from
its sidecar) and the rest; then the totals and the share of the warm run spent outside
verifylib work. Cold uses a fresh, empty cache folder; warm reuses it.

Usage: ``.venv/bin/python benchmarks/stages.py [parameters/tiny-en.yaml]``
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _table(label: str, seconds: dict, total: float) -> float:
    print(f"\n{label}: total {total:.1f} s")
    print(f"{'stage':<16}{'wall s':>10}{'verifylib s':>14}{'rest s':>10}")
    inside = 0.0
    for stage, t in seconds.items():
        v = t["verifylib"]
        rest = t["wall"] - (v or 0.0)
        inside += v or 0.0
        vs = f"{v:.2f}" if v is not None else "-"
        print(f"{stage:<16}{t['wall']:>10.2f}{vs:>14}{rest:>10.2f}")
    outside = total - inside
    print(f"{'all':<16}{total:>10.2f}{inside:>14.2f}{outside:>10.2f}   "
          f"outside verifylib work: {100 * outside / total:.0f}%")
    return outside / total


def main() -> None:
    from verifylib.orchestrate import load_all, run_one
    param_file = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "parameters" / "tiny-en.yaml")
    (params,) = load_all([param_file])
    with tempfile.TemporaryDirectory(prefix="verifylib-bench-") as tmp:
        os.environ["VERIFYLIB_CACHE"] = str(Path(tmp) / "cache")
        reports = Path(tmp) / "reports"
        for label in ("cold", "warm"):
            t0 = time.perf_counter()
            out = run_one(params, reports, log=lambda s: None, progress=False)
            total = time.perf_counter() - t0
            _table(f"{label} run ({out.verdict.value})", out.stage_seconds, total)


if __name__ == "__main__":
    main()
