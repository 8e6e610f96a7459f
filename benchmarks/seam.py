"""Benchmark: what the Core ML seam adds to a warm default audit.

Runs the default audit once to warm the cache (unless ``--warm-only``), then, interleaved,
``--rounds`` warm audits with the seam (the default parameters) and as many with
``seam.enabled: false`` (a copy of the parameter file beside the original, so its relative
paths still resolve), each as the command line runs it. Prints every wall time, the medians,
their ratio (target: the seam adds at most 35 %, ratio <= 1.35), the three seam gates'
share of the stage walls (``timings.json``), and the seam executor's own start and program
load as ``canary.seam_positive`` recorded them.

Usage: ``.venv/bin/python benchmarks/seam.py [--warm-only] [--rounds N]
[parameters/tiny-en.yaml]`` (``$VERIFYLIB_CACHE`` names the cache; default the user's.)
"""

from __future__ import annotations

import json
import statistics
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


def _without_seam(params: Path) -> Path:
    import yaml
    data = yaml.safe_load(params.read_text(encoding="utf-8"))
    data["seam"] = {"enabled": False}
    # Beside the original: fixtures and the model are named relative to the file's folder.
    out = params.parent / f".bench-no-seam-{params.name}"
    out.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return out


def main(argv: list[str]) -> int:
    warm_only = "--warm-only" in argv
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 1
    args = [a for i, a in enumerate(argv) if not a.startswith("--")
            and (i == 0 or argv[i - 1] != "--rounds")]
    params = Path(args[0]) if args else ROOT / "parameters" / "tiny-en.yaml"
    plain = _without_seam(params)
    try:
        with tempfile.TemporaryDirectory(prefix="verifylib-seam-bench-") as tmp:
            tmp_path = Path(tmp)
            if not warm_only:
                print("warming the cache with one audit …", flush=True)
                _audit(params, tmp_path / "warmup")
            walls: dict[str, list[float]] = {"seam": [], "no seam": []}
            last: Path | None = None
            for r in range(rounds):
                for label, p in (("no seam", plain), ("seam", params)):
                    wall, run_dir = _audit(p, tmp_path / f"{label.replace(' ', '-')}-{r}")
                    walls[label].append(wall)
                    print(f"round {r + 1}: {label}: {wall:.1f} s", flush=True)
                    if label == "seam":
                        last = run_dir
            med = {k: statistics.median(v) for k, v in walls.items()}
            ratio = med["seam"] / med["no seam"]
            print(f"median warm audit: with the seam {med['seam']:.1f} s, without "
                  f"{med['no seam']:.1f} s; ratio {ratio:.3f} (target <= 1.35)")
            if last is not None:
                _breakdown(last)
    finally:
        plain.unlink(missing_ok=True)
    return 0


def _breakdown(run_dir: Path) -> None:
    timings = json.loads((run_dir / "timings.json").read_text(encoding="utf-8"))
    print("stage walls of the last seam audit:",
          ", ".join(f"{k} {v['wall']:.1f} s" for k, v in timings.items()
                    if isinstance(v, dict) and isinstance(v.get("wall"), (int, float))))
    pos = run_dir / "evidence" / "03_canary" / "seam_positive.json"
    if pos.is_file():
        doc = json.loads(pos.read_text(encoding="utf-8"))
        calls = (doc.get("executor") or {}).get("calls", [])
        print(f"seam executor start {doc['executor_start_s']} s, program load "
              f"{doc['program_load_s']} s, launch wall {doc['run']['wall_s']} s, "
              f"encode execution {sum(c['seconds'] for c in calls):.2f} s")
    wer = run_dir / "evidence" / "05_wer" / "seam_wer.json"
    if wer.is_file():
        doc = json.loads(wer.read_text(encoding="utf-8"))
        for v in doc["variants"]:
            walls = [c["run"]["wall_s"] for c in v["clips"]]
            execs = [s["seconds"] for c in v["clips"]
                     for s in (c.get("executor") or {}).get("calls", [])]
            print(f"wer.seam {v['encoder']['variant']}: {len(walls)} launches, "
                  f"{sum(walls):.1f} s of launches, {sum(execs):.1f} s executing the program")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
