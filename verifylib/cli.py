"""The ``verifylib`` command line: ``run`` an audit, ``verify`` a run directory,
``pin-check`` a candidate upstream source."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import gates
from .params import DEFAULT_PARAMETERS, REPO_ROOT, ParameterError

EXIT_BAD_INPUT = 2


def _cmd_run(args) -> int:
    from .orchestrate import load_all, run_one
    try:
        all_params = load_all(args.parameters or [DEFAULT_PARAMETERS])
    except ParameterError as exc:
        print(f"verifylib: bad parameters: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    reports = Path(args.reports).resolve()
    outcomes = []
    for p in all_params:
        out = run_one(p, reports, progress=not args.no_progress)
        outcomes.append(out)
        print(f"{out.name}: verdict {out.verdict.value}")
        print(f"  report:  {out.report}")
        print(f"  receipt: {out.run_dir / 'receipt.json'}")
    worst = gates.worst(o.verdict for o in outcomes)
    from .report import render_index
    index = render_index(outcomes, reports)
    if len(outcomes) > 1:
        print(f"worst verdict: {worst.value}")
        print(f"  index:   {index}")
    return gates.exit_code(worst, require_admissible=args.require == "admissible")


def _cmd_verify(args) -> int:
    from .receipt import verify
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"verifylib: {run_dir}: not a run directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    res = verify(run_dir)
    if res.ok:
        print(f"OK: {run_dir} verifies; verdict {res.verdict}")
        return 0
    print(f"REJECTED: {run_dir} does not verify ({len(res.problems)} problem(s)):")
    for p in res.problems:
        print(f"  - {p}")
    return 1


def _cmd_pin_check(args) -> int:
    from .pincheck import cli_main
    return cli_main(args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``verifylib`` console script.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (``sys.argv[1:]`` by default).

    Returns
    -------
    int
        0 for ADMISSIBLE/INCOMPLETE (or a verifying run dir), 1 for REJECTED, 2 for bad
        input or usage.
    """
    ap = argparse.ArgumentParser(prog="verifylib", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="audit one or more models (parameter files or folders)")
    r.add_argument("parameters", nargs="*", help=f"default: {DEFAULT_PARAMETERS.relative_to(REPO_ROOT)}")
    r.add_argument("--reports", default=str(REPO_ROOT / "reports"),
                   help="root folder for run directories (default: reports/)")
    r.add_argument("--require", choices=["admissible"], default=None,
                   help="exit 1 unless every verdict is ADMISSIBLE")
    r.add_argument("--no-progress", action="store_true", help="hide papermill's progress bar")
    r.set_defaults(fn=_cmd_run)
    v = sub.add_parser("verify", help="re-verify a run directory from its files")
    v.add_argument("run_dir")
    v.set_defaults(fn=_cmd_verify)
    pc = sub.add_parser("pin-check", help="assess a candidate whisper.cpp source against the "
                                          "guide's patch-deletion conditions (never deletes)")
    pc.add_argument("candidate", help="40-hex upstream commit id, source archive or folder")
    pc.add_argument("--pin", help="pin whose patch to try (default: by tree id)")
    pc.add_argument("--url", default="https://github.com/ggml-org/whisper.cpp.git",
                    help="repository for a commit id")
    pc.add_argument("--subdir", help="whisper.cpp root inside the archive or folder")
    pc.add_argument("--runs", type=int, default=20, help="lifecycle runs (default 20)")
    pc.add_argument("--no-build", action="store_true", help="skip building and running")
    pc.add_argument("--jobs", type=int, default=2, help="parallel compile jobs")
    pc.add_argument("--model", help="a ggml model for the GGML positive path (default: the "
                                    "default parameter file's model, written by verifylib)")
    pc.set_defaults(fn=_cmd_pin_check)
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code else 0
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
