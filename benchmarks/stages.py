"""Benchmark: the default audit, cold then warm, with per-stage overhead.

Prints, per stage, the wall time of the whole notebook execution, the time spent in the
notebook's verifylib cells (setup, the stage call, its plots: papermill's per-cell
durations), the part of that inside the stage's own work (``timings.json``'s
``verifylib``: from opening the stage to its last gate record), and the rest (kernel
start-up, papermill, notebook writing); then totals and the overhead ratio: the audit's
total wall time over the sum of in-stage work (the receipt and report count as overhead).
Cold uses a fresh, empty cache folder; warm reuses it.

Usage: ``.venv/bin/python benchmarks/stages.py [--warm-only] [parameters/tiny-en.yaml]``
(``--warm-only`` runs once against the user's existing cache.)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cell_seconds(notebook: Path) -> float:
    """Seconds papermill measured in the notebook's own code cells (not the parameters)."""
    import nbformat
    nb = nbformat.read(notebook, as_version=4)
    total = 0.0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type != "code" or "parameters" in tags or "injected-parameters" in tags:
            continue
        total += cell.metadata.get("papermill", {}).get("duration") or 0.0
    return total


def _table(label: str, run_dir: Path, seconds: dict, total: float) -> float:
    print(f"\n{label}: total {total:.1f} s")
    print(f"{'stage':<16}{'wall s':>9}{'cells s':>9}{'stage s':>9}{'rest s':>9}")
    inside = work = 0.0
    for stage, t in seconds.items():
        nb = run_dir / "notebooks" / f"{stage}.ipynb"
        cells = _cell_seconds(nb) if nb.exists() else t["wall"]
        inside += cells
        work += t["verifylib"] or 0.0
        g = f"{t['verifylib']:.2f}" if t["verifylib"] is not None else "-"
        print(f"{stage:<16}{t['wall']:>9.2f}{cells:>9.2f}{g:>9}{t['wall'] - cells:>9.2f}")
    outside = total - inside
    print(f"{'all':<16}{total:>9.2f}{inside:>9.2f}{work:>9.2f}{outside:>9.2f}   "
          f"outside the verifylib cells: {100 * outside / total:.0f}%")
    ratio = total / work if work else float("inf")
    print(f"overhead ratio (total wall / in-stage work from timings.json): {ratio:.3f} "
          f"(target <= 1.10)")
    return ratio


def main() -> None:
    from verifylib import resources
    from verifylib.batch.audit import load_all, run_one
    args = [a for a in sys.argv[1:] if a != "--warm-only"]
    warm_only = len(args) != len(sys.argv) - 1
    param_file = args[0] if args else str(resources.default_parameters())
    (params,) = load_all([param_file])
    with tempfile.TemporaryDirectory(prefix="verifylib-bench-") as tmp:
        if not warm_only:
            os.environ["VERIFYLIB_CACHE"] = str(Path(tmp) / "cache")
        reports = Path(tmp) / "reports"
        for label in (("warm",) if warm_only else ("cold", "warm")):
            t0 = time.perf_counter()
            out = run_one(params, reports, log=lambda s: None, progress=False)
            total = time.perf_counter() - t0
            _table(f"{label} run ({out.verdict.value})", out.run_dir, out.stage_seconds, total)


if __name__ == "__main__":
    main()
