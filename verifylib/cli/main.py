"""The ``verifylib`` command line.

``run`` an audit, ``verify`` a run directory, ``attest`` (sign) a published run,
``pin-check`` a candidate upstream source, ``drift`` (attribute a package's drift to its
ops), ``compare`` published runs side by side, print ``ray-node-resources`` and check this
host with ``doctor``. Every ``--help`` is plain text (:data:`DESCRIPTION`,
:data:`EXIT_CODES`): it is read on a terminal, not rendered.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from verifylib import resources
from verifylib.errors import ParametersInvalid
from verifylib.evidence import gates

EXIT_BAD_INPUT = 2
# A host or harness problem, never the model's verdict: 1 stays REJECTED's alone. Runs made
# before verifylib 0.2.0 exited 1 for this too (their JSON says so by its schema, cli/1).
EXIT_NO_RUN = 3
# 128 + signal number: what a shell reports for a process killed by the signal, so a
# caller sees the same code whether or not verifylib got to clean up.
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143

DESCRIPTION = """\
Prove from physical runs that a pinned whisper.cpp build ran a Core ML encoder, and measure
what it costs in accuracy. Start with "verifylib run" (the default audit) and open the
report it names; "verifylib COMMAND --help" tells more of each command."""

EXIT_CODES = {
    "verifylib": """\
exit codes:
  0    success (run: every verdict ADMISSIBLE or INCOMPLETE; verify: the run verifies)
  1    REJECTED, or a run that does not verify
  2    bad input or usage (one line on stderr says which file and key)
  3    no run published: the host or the harness failed (a full or read-only disk,
       a worker that died); one line says why
  130  interrupted (SIGINT), 143 terminated (SIGTERM): nothing published""",
    "run": """\
exit codes:
  0    every verdict ADMISSIBLE or INCOMPLETE (with --require admissible: ADMISSIBLE)
  1    a verdict REJECTED, or a run left unsigned
  2    bad parameters or options, a tool this host lacks, or too little space or no
       write access for the reports or the cache (nothing is written)
  3    a model with no run published: the host or the harness failed (a full or
       read-only disk, a worker that died); one line names the path and the error
  130  interrupted (SIGINT), 143 terminated (SIGTERM): nothing published""",
    "verify": """\
exit codes:
  0    the run verifies (with --replay: and no claim DIFFERS)
  1    it does not verify, a claim DIFFERS, or the attestation does not check
  2    not a run directory, or a bad key""",
    "verify-summary": """\
exit codes:
  0    the summary is signed by the key
  1    it is not
  2    no such file, or a bad key""",
    "attest": """\
exit codes:
  0    the attestation was written
  1    the run cannot be attested (e.g. it does not verify)
  2    not a run directory, or a bad key""",
    "pin-check": """\
exit codes:
  0    every patch-deletion condition was assessed (and --write-manifest's FILE written)
  1    the candidate could not be assessed
  2    bad input, or a tool this host lacks; --write-manifest refused (FILE exists, a
       packaged pin's name, --no-build, a packaged tree, nothing to patch)""",
    "drift": """\
exit codes:
  0    the attribution was printed
  2    bad input""",
    "compare": """\
exit codes:
  0    the comparison page was written
  2    bad input (fewer than two runs, an output folder inside a run)""",
    "doctor": """\
exit codes:
  0    this host can audit
  2    a required tool is missing, or the parameter file is refused""",
    "lab": """\
exit codes:
  0    JupyterLab ended
  2    not a published run, or a working folder inside the run
  130  interrupted (Ctrl-C)""",
    "ray-node-resources": """\
exit codes:
  0    printed""",
}
"""The exit codes each command's ``--help`` ends with (README's table, per command)."""


def _interruptible(cmd):
    """Run ``cmd`` with SIGINT/SIGTERM turned into one orderly path.

    The command's run publishes nothing and removes its staging folder (see
    :func:`verifylib.batch.audit.run_one`); this prints the one line on stderr and maps
    the signal to its exit code, with no traceback.
    """
    def wrapped(args) -> int:
        from verifylib.batch.signals import interrupts_raise
        with interrupts_raise() as scope:
            try:
                return cmd(args)
            except KeyboardInterrupt as exc:
                done = ", ".join(str(p) for p in scope.published)
                print("interrupted; nothing published" if not done else
                      f"interrupted; nothing else published (already published: {done})",
                      file=sys.stderr)
                sig = getattr(exc, "signum", scope.signum)
                return EXIT_TERMINATED if sig == signal.SIGTERM else EXIT_INTERRUPTED
    return wrapped


def _load_sign_key(path):
    """Load the signer for ``--sign-key``/``attest --key``, or None after printing why not."""
    from verifylib.evidence.attest import AttestKeyError, load_signer
    try:
        return load_signer(path)
    except AttestKeyError as exc:
        print(f"verifylib: bad signing key: {exc}", file=sys.stderr)
        return None


def _load_public_key(path):
    """Load the key for ``--key PUB.pem``, or None after printing why not."""
    from verifylib.evidence.attest import AttestKeyError, load_public_key
    try:
        return load_public_key(path)
    except AttestKeyError as exc:
        print(f"verifylib: bad public key: {exc}", file=sys.stderr)
        return None


def _sign_published(run_dir: Path, signer) -> bool:
    """Attest a just-published run for ``run --sign-key``; True when it was signed."""
    from verifylib.evidence.attest import AttestError, attest
    try:
        res = attest(run_dir, signer)
    except AttestError as exc:
        print(f"verifylib: not signed: {exc}", file=sys.stderr)
        return False
    print(f"  attestation: {res.path} (key {res.keyid[:16]}..., {len(res.subjects)} subjects)")
    return True


def _cmd_run(args) -> int:
    if not args.json:
        return _run(args)
    import contextlib
    import json
    # One JSON object on stdout; every line meant for people goes to stderr.
    holder: dict = {}
    with contextlib.redirect_stdout(sys.stderr):
        code = _run(args, holder)
    if "object" in holder:
        print(json.dumps(holder["object"], indent=2, sort_keys=True), flush=True)
    return code


def _load_run_parameters(args) -> list | None:
    """Check ``run``'s batch options, load its parameter files; None after printing why not."""
    # Nothing heavier than the parameter checks is imported before they end: a refused
    # file exits 2 without loading the kernel client, notebook formats or the report.
    from verifylib.batch.executors import BatchOptionInvalid, check_options
    from verifylib.batch.inputs import load_all
    try:
        check_options(args.executor, args.jobs, args.address)
    except BatchOptionInvalid as exc:
        print(f"verifylib: {exc}", file=sys.stderr)
        return None
    from verifylib.runtime.tools import ToolMissing
    try:
        # A Ray driver builds nothing itself; each node checks its own tools (run_one).
        return load_all(args.parameters or [resources.default_parameters()],
                        build_tools=args.executor == "local")
    except ToolMissing as exc:
        print(f"verifylib: cannot audit on this host: {exc} (see `verifylib doctor`)",
              file=sys.stderr)
        return None
    except ParametersInvalid as exc:
        print(f"verifylib: bad parameters: {exc}", file=sys.stderr)
        return None


def _run(args, holder: dict | None = None) -> int:
    signer = None  # a bad --sign-key is refused before any audit work
    if getattr(args, "sign_key", None) is not None:
        signer = _load_sign_key(args.sign_key)
        if signer is None:
            return EXIT_BAD_INPUT
    unsigned = 0
    all_params = _load_run_parameters(args)
    if all_params is None:
        return EXIT_BAD_INPUT
    from verifylib.batch.executors import run_batch
    from verifylib.batch.failures import FailedRun
    from verifylib.batch.ray import RayUnavailable
    reports = Path(args.reports).resolve() if args.reports else resources.reports_dir()
    if args.executor == "local" and not _room_for(all_params, reports):
        return EXIT_BAD_INPUT
    from verifylib.batch.staging import remove_stale_staging
    for gone in remove_stale_staging(reports):
        print(f"removed staging left by a process that is gone: {gone}")
    # A producer sweeps its own area of the cache; a killed one's folder in an area no
    # later audit produces into would stay without this.
    from verifylib.locks import sweep_cache_staging
    for gone in sweep_cache_staging(resources.cache_dir()):
        print(f"removed cache staging left by a process that is gone: {gone}")

    from verifylib.cli.outputs import summarize
    if args.junit_xml is not None and not Path(args.junit_xml).resolve().parent.is_dir():
        print(f"verifylib: --junit-xml {args.junit_xml}: its folder does not exist",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    summaries = []

    def show(out) -> None:
        nonlocal unsigned
        summary = summarize(out)
        summaries.append(summary)
        if isinstance(out, FailedRun):
            where = f" on {out.node}" if out.node else ""
            print(f"{out.name}: ERROR{where}, no run published: {out.reason}", flush=True)
            return
        print(f"{out.name}: verdict {out.verdict.value}: {summary.why}")
        print(f"  report:  {out.report}")
        print(f"  receipt: {out.run_dir / 'receipt.json'}", flush=True)
        if signer is not None and not _sign_published(out.run_dir, signer):
            unsigned += 1

    # Several models at once print interleaved: papermill's bars would overwrite each other.
    # A log file (stderr not a terminal) gets one line per event, never a redrawn bar.
    together = args.executor == "ray" or (args.jobs > 1 and len(all_params) > 1) \
        or not sys.stderr.isatty()
    try:
        outcomes = run_batch(all_params, reports, executor=args.executor, jobs=args.jobs,
                             address=args.address,
                             require_admissible=args.require == "admissible",
                             progress=not (args.no_progress or together), on_outcome=show)
    except (ParametersInvalid, RayUnavailable) as exc:  # BatchOptionInvalid among them
        print(f"verifylib: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _conclude_run(args, outcomes, summaries, reports, unsigned, holder)


def _room_for(all_params: list, reports: Path) -> bool:
    """Check the reports folder and the cache before any work; False after one line why not."""
    from verifylib.batch.disk import check_audit, problems
    found = problems(check_audit(all_params, reports))
    if found:
        print(f"verifylib: cannot audit here: {'; '.join(found)} (see `verifylib doctor`)",
              file=sys.stderr)
    return not found


def _conclude_run(args, outcomes: list, summaries: list, reports: Path, unsigned: int,
                  holder: dict | None) -> int:
    """Print ``run``'s closing lines, write its JUnit file and JSON object; the exit code."""
    from verifylib.batch.failures import FailedRun
    from verifylib.cli.outputs import run_object, write_junit
    published = [o for o in outcomes if not isinstance(o, FailedRun)]
    failed = [o for o in outcomes if isinstance(o, FailedRun)]
    code = EXIT_NO_RUN  # a batch where no model published a run
    from verifylib.views import report
    index = reports / report.INDEX
    if published:
        worst = gates.worst(o.verdict for o in published)
        index = report.render_index(published, reports)
        code = gates.exit_code(worst, require_admissible=args.require == "admissible")
    if len(outcomes) > 1:
        print(f"worst verdict: {'ERROR' if failed else worst.value}")
    # Without a published run the page is the one the failure records rebuilt, if any
    # could be written.
    if index.is_file():
        print(f"  index:   {index}")
    if failed:
        print(f"ERROR: no run published for {', '.join(o.name for o in failed)}")
    code = max(code, 1) if unsigned else code
    code = EXIT_NO_RUN if failed else code
    if args.junit_xml is not None:
        print(f"  junit:   {write_junit(args.junit_xml, summaries)}")
    if holder is not None:
        holder["object"] = run_object(
            summaries, verdict="ERROR" if failed else worst.value if published else "ERROR",
            exit_code=code, index=str(index) if index.is_file() else None)
    return code


def _cmd_lab(args) -> int:
    from verifylib.cli.lab import cli_main
    return cli_main(args)


def _cmd_ray_node_resources(args) -> int:  # noqa: ARG001 - argparse handler signature
    import json

    from verifylib.batch.ray import node_resources
    print(json.dumps(node_resources(), sort_keys=True))
    return 0


def _cmd_verify(args) -> int:
    from verifylib.evidence.receipt import verify
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"verifylib: {run_dir}: not a run directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    key = None
    if getattr(args, "key", None) is not None:
        key = _load_public_key(args.key)
        if key is None:
            return EXIT_BAD_INPUT
    if getattr(args, "replay", False):
        if getattr(args, "json", False):
            print("verifylib: --json goes without --replay (a replay writes replay.json)",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        if key is not None:
            # Everything verify does comes first, the attestation included.
            from verifylib.evidence.attest import verify_attestation
            att = verify_attestation(run_dir, key)
            if not att.ok:
                print(f"REJECTED: {run_dir}: the attestation does not check "
                      f"({len(att.problems)} problem(s)); nothing replayed:")
                for p in att.problems:
                    print(f"  - {p}")
                return 1
            print(f"OK: attestation signed by {key.keyid[:16]}... matches the run")
        return _replay(args, run_dir)
    if getattr(args, "sign_key", None) or getattr(args, "output", None):
        print("verifylib: -o and --sign-key go with --replay", file=sys.stderr)
        return EXIT_BAD_INPUT
    res = verify(run_dir, allow_simulated=args.allow_simulated)
    if key is not None:
        from verifylib.evidence.attest import verify_attestation
        att = verify_attestation(run_dir, key, res)
        res.problems += att.problems
        res.ok = res.ok and att.ok
    if args.json:
        import json

        from verifylib.cli.outputs import verify_object
        code = 0 if res.ok else 1
        print(json.dumps(verify_object(run_dir, res, exit_code=code), indent=2,
                         sort_keys=True))
        return code
    if res.versions is not None:
        print(f"judged under: {_judged_under(res.versions)}")
    if res.ok:
        print(f"OK: {run_dir} verifies; verdict {res.verdict}")
        if key is not None:
            print(f"OK: attestation signed by {key.keyid[:16]}... matches the run "
                  f"({len(att.subjects)} subjects)")
        return 0
    print(f"REJECTED: {run_dir} does not verify ({len(res.problems)} problem(s)):")
    for p in res.problems:
        print(f"  - {p}")
    if res.cause:
        print(f"likely cause: {res.cause}")
    return 1


def _judged_under(versions: dict) -> str:
    """Say in one line which versions a run was verified under."""
    policies = sorted({p for ids in (versions.get("policies") or {}).values() for p in ids})
    return (f"gate table {versions.get('gate_table')}, receipt {versions.get('receipt')}, "
            f"policies {', '.join(policies) or 'none'} (made by verifylib "
            f"{versions.get('verifylib')})")


def _replay(args, run_dir: Path) -> int:
    from verifylib.errors import ParametersInvalid
    from verifylib.replay.engine import replay
    signer = None
    if args.sign_key is not None:
        # The key is read before an hour of work, not after it.
        signer = _load_sign_key(args.sign_key)
        if signer is None:
            return EXIT_BAD_INPUT
    try:
        res = replay(run_dir, args.output, allow_simulated=args.allow_simulated)
    except ParametersInvalid as exc:
        print(f"verifylib: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not res.verified:
        print(f"REJECTED: {run_dir} does not verify ({len(res.verify_problems)} problem(s)); "
              f"nothing replayed:")
        for p in res.verify_problems:
            print(f"  - {p}")
    width = max((len(c.id) for c in res.claims), default=0)
    for c in res.claims:
        label = " (rebuilt binary)" if c.rebuilt else ""
        print(f"  {c.id:<{width}}  {c.status.value:<14} {c.detail}{label}")
    counts = ", ".join(f"{k} {v}" for k, v in res.counts().items())
    out = Path(res.output_dir or ".")
    if signer is not None and res.run_id is not None:
        from verifylib.replay.summary import sign_summary
        print(f"  summary: {sign_summary(res, signer, out)}")
    print(f"  replay:  {out / 'replay.html'}")
    if res.passed:
        print(f"OK: {run_dir} replays ({counts}) in {res.seconds:.0f} s")
    else:
        names = ", ".join(c.id for c in res.differs)
        print(f"DIFFERS: {run_dir}: {names or 'the run does not verify'} ({counts})")
    return res.exit_code


def _cmd_verify_summary(args) -> int:
    from verifylib.replay.summary import verify_summary
    key = _load_public_key(args.key)
    if key is None:
        return EXIT_BAD_INPUT
    if not Path(args.file).is_file():
        print(f"verifylib: {args.file}: no such file", file=sys.stderr)
        return EXIT_BAD_INPUT
    check = verify_summary(args.file, key)
    if not check.ok:
        print(f"REJECTED: {args.file} ({len(check.problems)} problem(s)):")
        for p in check.problems:
            print(f"  - {p}")
        return 1
    print(f"OK: {args.file} signed by {key.keyid[:16]}...; run {check.resource} replay "
          f"{check.result} ({len(check.claims)} claims)")
    return 0


def _cmd_attest(args) -> int:
    from verifylib.evidence.attest import AttestError, attest
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"verifylib: {run_dir}: not a run directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    signer = _load_sign_key(args.key)
    if signer is None:
        return EXIT_BAD_INPUT
    try:
        res = attest(run_dir, signer)
    except AttestError as exc:
        print(f"REFUSED: {exc}")
        return 1
    print(f"OK: {res.path} written; verdict {res.verdict}, key {res.keyid[:16]}..., "
          f"{len(res.subjects)} subjects")
    return 0


def _cmd_pin_check(args) -> int:
    from verifylib.runtime.tools import ToolMissing, require_tools
    try:
        # git obtains and identifies the candidate; cmake and the compilers build it.
        require_tools(build=not args.no_build)
    except ToolMissing as exc:
        print(f"verifylib pin-check: {exc} (see `verifylib doctor`)", file=sys.stderr)
        return EXIT_BAD_INPUT
    from verifylib.whispercpp.pincheck import cli_main
    return cli_main(args)


def _cmd_doctor(args) -> int:
    from verifylib.cli.doctor import cli_main
    return cli_main(args)


def _cmd_drift(args) -> int:
    from verifylib.cli.drift import cli_main
    return cli_main(args)


def _cmd_compare(args) -> int:
    from verifylib.compare.runs import CompareInputInvalid, compare_runs, default_output_dir
    from verifylib.evidence.layout import inside_a_run
    out_dir = Path(args.output) if args.output else default_output_dir()
    # Checked before reading anything: compare never writes into a run.
    inside = inside_a_run(out_dir, args.runs)
    if inside is not None:
        print(f"verifylib: {out_dir}: inside the run {inside}; compare never writes into a "
              f"run, name a folder outside it", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        comparison = compare_runs(args.runs, verify=not args.no_verify,
                                  allow_simulated=args.allow_simulated)
    except CompareInputInvalid as exc:
        print(f"verifylib: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from verifylib.views.compare import write
    page = write(comparison, out_dir)
    for line in comparison.summary:
        print(f"  {line}")
    print(f"comparison: {page}")
    return 0


def _add_run_parser(sub) -> None:
    """Add the ``run`` command and its options."""
    r = sub.add_parser("run", help="audit one or more models (parameter files or folders)")
    r.add_argument("parameters", nargs="*",
                   help=f"default: {resources.default_parameters()}")
    # Resolved when the command runs, so the default follows the caller's folder.
    r.add_argument("--reports", metavar="DIR", default=None,
                   help="root folder for run directories (default: ./reports of the current "
                        "directory)")
    r.add_argument("--require", choices=["admissible"], default=None,
                   help="exit 1 unless every verdict is ADMISSIBLE")
    r.add_argument("--no-progress", action="store_true",
                   help="hide the progress bar (hidden anyway when stderr is not a terminal: "
                        "a log file gets one line per event)")
    r.add_argument("--json", action="store_true",
                   help="print one JSON object on stdout at the end (every other line goes "
                        "to stderr)")
    r.add_argument("--junit-xml", metavar="FILE", default=None,
                   help="also write FILE: JUnit XML with one test case per gate (NOT_RUN as "
                        "skipped, with its reason)")
    r.add_argument("--sign-key", metavar="KEY.pem", default=None,
                   help="attest each published run with this Ed25519 private key (PEM)")
    r.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="audit up to N models at once on this host, one worker process each "
                        "(default 1: one after another)")
    r.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local: this host (default); ray: each model's audit is a task on a "
                        "Ray cluster (pip install 'verifylib[ray]')")
    r.add_argument("--address", metavar="ADDR", default=None,
                   help="with --executor ray: the cluster to join (auto, HOST:6379 or "
                        "ray://HOST:10001; default $RAY_ADDRESS, else a Ray on this host "
                        "alone)")
    r.set_defaults(fn=_interruptible(_cmd_run))


def _add_verify_parsers(sub) -> None:
    """Add the ``ray-node-resources``, ``verify``, ``verify-summary`` and ``attest`` commands."""
    rn = sub.add_parser("ray-node-resources",
                        help="print what this host can run as Ray custom resources (JSON for "
                             "ray start --resources)")
    rn.set_defaults(fn=_cmd_ray_node_resources)
    v = sub.add_parser("verify", help="re-verify a run directory from its files")
    v.add_argument("run_dir")
    v.add_argument("--json", action="store_true",
                   help="print one JSON object (ok, verdict, problems) instead of text")
    v.add_argument("--allow-simulated", action="store_true",
                   help="inspect a run recorded on the test suite's simulated host (such a "
                        "run is refused otherwise)")
    v.add_argument("--key", metavar="PUB.pem",
                   help="also check attestation.intoto.jsonl against this Ed25519 public key")
    v.add_argument("--replay", action="store_true",
                   help="also re-derive on this host every Linux-physical claim of the run "
                        "and compare each (REPRODUCED / DIFFERS / NOT_REPLAYABLE; exit 1 if "
                        "any DIFFERS)")
    v.add_argument("-o", "--output", metavar="DIR",
                   help="with --replay: where replay.json, replay.html and the scratch run "
                        "go (default ./reports/replay-<run id>-<time>/; never inside the run)")
    v.add_argument("--sign-key", metavar="KEY.pem",
                   help="with --replay: sign a SLSA verification summary "
                        "(replay.intoto.jsonl) with this Ed25519 private key")
    v.set_defaults(fn=_interruptible(_cmd_verify))
    vs = sub.add_parser("verify-summary", help="check a replay's replay.intoto.jsonl against "
                                               "an Ed25519 public key")
    vs.add_argument("file")
    vs.add_argument("--key", metavar="PUB.pem", required=True,
                    help="the Ed25519 public key (PEM)")
    vs.set_defaults(fn=_cmd_verify_summary)
    at = sub.add_parser("attest", help="sign a published run: write attestation.intoto.jsonl "
                                       "(in-toto Statement in a DSSE envelope)")
    at.add_argument("run_dir")
    at.add_argument("--key", metavar="KEY.pem", required=True,
                    help="Ed25519 private key (unencrypted PEM)")
    at.set_defaults(fn=_cmd_attest)


def _add_tool_parsers(sub) -> None:
    """Add the ``pin-check``, ``drift``, ``compare`` and ``doctor`` commands."""
    pc = sub.add_parser("pin-check", help="assess a candidate whisper.cpp source against the "
                                          "patch-deletion conditions of "
                                          "docs/runtime-contract.md §6.4 (never deletes)")
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
    pc.add_argument("--write-manifest", metavar="FILE",
                    help="also declare the candidate as a user pin: write a new manifest FILE "
                         "(and NAME.patch beside it) once every condition this host can run "
                         "was assessed; a parameter file names it as runtime.manifest")
    pc.add_argument("--name", help="the user pin's name (default: user-<commit[:12]>)")
    pc.add_argument("--commit", help="the upstream commit of an archive or folder candidate "
                                     "(recorded in the manifest entry)")
    pc.set_defaults(fn=_cmd_pin_check)
    dr = sub.add_parser("drift", help="attribute a package's numeric drift to its ops, against "
                                      "the model of a parameter file (touches no run)")
    dr.add_argument("package", help="a saved .mlpackage (the encoder's ML program)")
    dr.add_argument("--model", metavar="PARAMS.yaml", required=True,
                    help="parameter file whose model is the reference")
    dr.add_argument("--fixture", metavar="ID", help="fixture of the parameter file to encode "
                                                    "(default: its first)")
    dr.add_argument("--compute", choices=["float32", "float64"], default="float32",
                    help="arithmetic of the package's execution (default float32)")
    dr.add_argument("--json", metavar="OUT", help="write the attribution as JSON")
    dr.add_argument("--top", type=int, default=10, help="ops to print (default 10)")
    dr.set_defaults(fn=_cmd_drift)
    cp = sub.add_parser("compare", help="compare published runs side by side (gates, "
                                        "identities, drift, WER) in one HTML page")
    cp.add_argument("runs", nargs="*", metavar="RUN",
                    help="two or more published run directories; the first is the baseline")
    cp.add_argument("-o", "--output", metavar="DIR",
                    help="folder for compare.html (default: ./reports/compare-<UTC time>/)")
    cp.add_argument("--no-verify", action="store_true",
                    help="show the recorded verdicts without re-verifying each run")
    cp.add_argument("--allow-simulated", action="store_true",
                    help="verify runs recorded on the test suite's simulated host (flagged "
                         "as not verifying otherwise)")
    cp.set_defaults(fn=_cmd_compare)
    dc = sub.add_parser("doctor", help="check this host before an audit: build tools, Xcode, "
                                       "disk, and which gates it can run (exit 2 when a "
                                       "required tool is missing)")
    dc.add_argument("params", nargs="?", metavar="PARAMS.yaml",
                    help="a parameter file: check its audit's gates instead of the default's, "
                         "and warn when every encoder it would plan is float32 (never on the "
                         "Neural Engine)")
    dc.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    dc.set_defaults(fn=_cmd_doctor)
    lb = sub.add_parser("lab", help="explore a published run in JupyterLab without touching "
                                    "it: its notebooks as working copies outside the run")
    lb.add_argument("run_dir", metavar="RUN", help="a published run directory")
    lb.add_argument("--port", type=int, help="JupyterLab's port (default: a free one)")
    lb.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    lb.add_argument("--work", metavar="DIR",
                    help="the working folder (default: <cache>/lab/<run-id>), outside the run")
    lb.set_defaults(fn=_cmd_lab)


def _parser() -> argparse.ArgumentParser:
    """Build the ``verifylib`` parser: every command, in the order ``--help`` lists them."""
    from verifylib.cli.outputs import version

    plain = argparse.RawDescriptionHelpFormatter
    ap = argparse.ArgumentParser(prog="verifylib", description=DESCRIPTION,
                                 epilog=EXIT_CODES["verifylib"], formatter_class=plain)
    from verifylib.evidence.gates import GATE_TABLE
    from verifylib.evidence.receipt_schema import SCHEMA
    ap.add_argument("--version", action="version",
                    version=f"verifylib {version()} (gate table {GATE_TABLE}, receipt {SCHEMA})")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    _add = sub.add_parser

    def add_parser(name, *, help):  # noqa: A002 - argparse's own keyword
        # Every command's help says what it does and ends with its exit codes.
        return _add(name, help=help, description=help[0].upper() + help[1:] + ".",
                    epilog=EXIT_CODES[name], formatter_class=plain)
    sub.add_parser = add_parser  # type: ignore[method-assign]
    _add_run_parser(sub)
    _add_verify_parsers(sub)
    _add_tool_parsers(sub)
    return ap


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
        input or usage; for ``run``, 130 on SIGINT and 143 on SIGTERM.
    """
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code else 0
    if args.cmd is None:
        ap.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return args.fn(args)
    except BrokenPipeError:
        # `verifylib doctor --json | head`: the reader left; say nothing more. stdout is
        # pointed at /dev/null so the interpreter's final flush cannot fail again.
        import os
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
