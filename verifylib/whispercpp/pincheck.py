"""``verifylib pin-check``: whether a proposed pin bump may drop the compatibility patch.

docs/runtime-contract.md §6.4: keep the patch until a proposed pin is inspected and
physically tested; delete it only when the new upstream source initializes
``whisper_batch`` safely on every early-return path, the *unpatched* candidate passes the
repeated negative control without a crash, the ordinary GGML and the Core ML positive
paths still pass, and the manifests and cache identity are migrated deliberately.

:func:`assess` reports those conditions for one candidate source (a git commit, an
archive, or a folder, identified by its git tree id) as a table:

1. whether the chosen pin's patch still applies (if it does, the old declaration is there);
2. whether ``whisper_state`` still declares ``whisper_batch batch;`` uninitialized;
3. the unpatched candidate's lifecycle A/B outcome: N runs of its static GGML build with
   the ``-nfa -dtw`` trigger on the tree's own test model (the negative control without
   Core ML, docs/runtime-contract.md §6.2); on macOS, whose allocator can hide the bad
   free, a clean outcome is ``unknown``, not ``met`` (:func:`lifecycle_row`);
4. the ordinary GGML positive path of the unpatched candidate: exit 0, ``COREML = 0`` and
   a non-empty transcript of the tree's sample with a real model (``--model``, default: the
   default parameter file's model written by :mod:`verifylib.models.ggml_writer`; the
   tree's own test model has no tensors and transcribes nothing);
   beside it, informational: what AddressSanitizer prints for an ASan build of the
   unpatched candidate under the same trigger (supporting evidence for row 2, never a
   deletion condition of its own);
5. the Core ML positive path: NOT_RUN(platform) off macOS with Xcode; on a Mac it is
   decided by ``canary.coreml_positive`` in a full ``verifylib run`` of the candidate;
6. the manifest/cache migration, which is always a human decision.

It only reads the candidate (a folder is used in place and re-identified after the
build; builds happen outside it) and it never deletes or edits a patch or the manifest.

With ``--write-manifest FILE`` it also declares the candidate as a user pin
(:mod:`verifylib.whispercpp.pin_entry`): once every condition it can run on this host has
been assessed, it writes a new manifest holding one entry (the commit, the tree id, a
full-index patch generated for the candidate and proved on it, its SHA-256, the touched
path) and lists under ``not_run_here`` the conditions this host could not run. A parameter
file names it as ``runtime.manifest``. It refuses (exit 2), before any build, a file that
exists, a name that clashes with a packaged pin, ``--no-build``, a candidate that is a
packaged pin's tree, and a tree whose batch member is not declared uninitialized.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from verifylib.canonical import describe_litter, os_litter
from verifylib.errors import ParametersInvalid
from verifylib.evidence.canary.rules import runs_system, unpatched_caveat
from verifylib.evidence.gates import Capability
from verifylib.runtime import contracts
from verifylib.runtime import sanitizer as _sanitizer
from verifylib.runtime.capabilities import detect
from verifylib.runtime.runner import run_record, run_whisper_cli
from verifylib.whispercpp import build as _build
from verifylib.whispercpp import pin_entry as _entry
from verifylib.whispercpp import source as _source
from verifylib.whispercpp.cmake_steps import BuildError

DEFAULT_URL = "https://github.com/ggml-org/whisper.cpp.git"
"""Where a candidate given as a commit id is fetched from (``--url`` overrides it)."""

MET, NOT_MET, UNKNOWN, INFO, MANUAL = "met", "NOT MET", "unknown", "n/a", "manual"


class PinCheckError(ParametersInvalid):
    """The candidate cannot be obtained or identified (bad input)."""


@dataclass(frozen=True)
class ManifestRequest:
    """What ``--write-manifest`` asks for.

    Attributes
    ----------
    path : Path
        The manifest to write (it must not exist).
    name : str or None
        The pin's name; None: ``user-<commit[:12]>``.
    commit : str or None
        The upstream commit of the candidate tree; None for a candidate given as a commit.
    """

    path: Path
    name: str | None = None
    commit: str | None = None


@dataclass(frozen=True)
class Condition:
    """One row of the assessment.

    Attributes
    ----------
    check : str
        What was checked.
    observed : str
        What was found.
    deletion : str
        Whether this row supports deleting the patch: ``met``, ``NOT MET``, ``unknown``,
        ``n/a`` (informational), ``manual``, or ``NOT_RUN(<kind>: <why>)``.
    """

    check: str
    observed: str
    deletion: str


@dataclass
class Assessment:
    """The outcome of :func:`assess`.

    Attributes
    ----------
    candidate : str
        As given.
    source : Path
        The source folder examined.
    tree_id : str
        Its git tree id.
    known_pin : str or None
        The manifest pin with that tree id, if any.
    pin : str
        The pin whose patch was tried.
    patch_applies : bool
        Whether that patch applies.
    batch_state : str
        ``"uninitialized"``, ``"initialized"`` or ``"absent"``.
    conditions : list of Condition
        The table rows, in the order of docs/runtime-contract.md §6.4.
    conclusion : str
        One paragraph; starts with ``PATCH STILL NEEDED`` or ``THE PATCH NO LONGER
        APPLIES``.
    manifest : Path or None
        The user manifest written (``--write-manifest``), else None.
    """

    candidate: str
    source: Path
    tree_id: str
    known_pin: str | None
    pin: str
    patch_applies: bool
    batch_state: str
    conditions: list[Condition] = field(default_factory=list)
    conclusion: str = ""
    manifest: Path | None = None


def _struct_body(text: str, name: str) -> str | None:
    m = re.search(r"\nstruct " + re.escape(name) + r" \{", text)
    if not m:
        return None
    depth = 0
    for i in range(m.end() - 1, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[m.start():i + 1]
    return None


def batch_member_state(whisper_cpp: str) -> tuple[str, int | None]:
    """How ``struct whisper_state`` declares its ``batch`` member.

    Parameters
    ----------
    whisper_cpp : str
        The text of ``src/whisper.cpp``.

    Returns
    -------
    (str, int or None)
        ``"uninitialized"`` (``whisper_batch batch;``), ``"initialized"`` (``= {}`` or
        ``{}``), or ``"absent"``; and the 1-based line number of the declaration.
    """
    body = _struct_body(whisper_cpp, "whisper_state")
    if body is None:
        return "absent", None
    start = whisper_cpp.index(body)
    for m in re.finditer(r"^[ \t]*whisper_batch[ \t]+batch[ \t]*(=[ \t]*\{[ \t]*\}|\{[ \t]*\})?"
                         r"[ \t]*;", body, re.M):
        line = whisper_cpp.count("\n", 0, start + m.start()) + 1
        decl = m.group(0).strip()
        return ("uninitialized" if decl == contracts.BATCH_MEMBER_UNINITIALIZED
                else "initialized"), line
    return "absent", None


def resolve_candidate(candidate: str, *, url: str, subdir: str | None, cache_dir: Path,
                      scratch: Path, log: Callable[[str], None]) -> tuple[Path, str]:
    """Find the candidate's source folder without touching anything the user owns.

    A 40-hex commit is fetched with git into the shared source cache; an archive is
    extracted into a private scratch cache (so a shared cache entry is never replaced);
    a folder is used in place, read-only.

    Parameters
    ----------
    candidate : str
        A 40-hex commit id, a source archive or a source folder.
    url : str
        Repository for a commit id.
    subdir : str or None
        The whisper.cpp root inside the archive or folder.
    cache_dir : Path
        The shared source cache (for a commit).
    scratch : Path
        A private cache (for an archive).
    log : callable
        Receives progress lines.

    Returns
    -------
    folder : Path
        The source folder.
    origin : str
        A description of where it came from.

    Raises
    ------
    PinCheckError
        If the candidate is none of these or cannot be obtained.
    """
    try:
        if re.fullmatch(r"[0-9a-f]{40}", candidate):
            st = _source.obtain_source(_source.SourceSpec(kind="git", url=url, commit=candidate,
                                                          subdir=subdir), cache_dir, log=log)
            return st.path, f"git commit {candidate} from {url}"
        path = Path(candidate).expanduser()
        if path.is_dir():
            folder = path / subdir if subdir else path
            if not folder.is_dir():
                raise PinCheckError(f"{folder} is not a folder")
            return folder.resolve(), f"folder {folder.resolve()} (used in place, read-only)"
        if path.is_file():
            st = _source.obtain_source(_source.SourceSpec(kind="archive", path=path.resolve(),
                                                          subdir=subdir), scratch, log=log)
            return st.path, f"archive {path.resolve()} (sha256 {st.origin.get('archive_sha256')})"
    except (_source.SourceError, ValueError) as exc:
        if isinstance(exc, PinCheckError):
            raise
        raise PinCheckError(f"cannot obtain {candidate}: {exc}") from exc
    raise PinCheckError(f"{candidate} is not a 40-hex commit id, an archive or a folder")


def _try_patch(src: Path, tree: str, pin: _source.Pin, work: Path) -> tuple[bool, str]:
    try:
        _source.prepare_patched_tree(src, pin, work, name=f"try-{pin.name}", expected_tree=tree)
    except _source.PatchError as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines()]
        errs = [ln for ln in lines if ln.startswith("error:")]
        return False, ("; ".join(errs) or (lines[-1] if lines else "git apply failed"))[-300:]
    finally:
        shutil.rmtree(work / f"try-{pin.name}", ignore_errors=True)
    return True, "yes: `git apply` succeeds on this tree"


def assess(candidate: str, *, pin_name: str | None = None, url: str = DEFAULT_URL,
           subdir: str | None = None, runs: int = 20, build: bool = True,
           timeout: float = 120.0, jobs: int = 2, options: dict | None = None,
           model: str | Path | None = None, cache_dir: Path | None = None,
           log: Callable[[str], None] = print,
           write: ManifestRequest | None = None) -> Assessment:
    """Assess a candidate source against the patch-deletion conditions.

    The conditions are those of docs/runtime-contract.md §6.4 (see the module docstring).

    Parameters
    ----------
    candidate : str
        A 40-hex upstream commit id, a source archive, or a source folder.
    pin_name : str, optional
        The pin whose patch to try; default: the pin with the candidate's tree id, else
        the first pin whose patch applies, else the first pin of the manifest.
    url : str
        Repository for a commit id.
    subdir : str, optional
        The whisper.cpp root inside the archive or folder.
    runs : int
        Lifecycle runs of the unpatched candidate.
    build : bool
        Build and run the unpatched candidate (False: those rows are NOT_RUN(disabled)).
    timeout : float
        Seconds per whisper-cli run.
    jobs : int
        Parallel compile jobs.
    options : dict, optional
        CMake options of the GGML build (default ``GGML_NATIVE=ON``, as ``verifylib run``).
    model : path-like, optional
        A real ggml model for the GGML positive path; default: the default parameter
        file's model, written to a scratch ``ggml-model.bin``.
    cache_dir : Path, optional
        Shared cache (default ``$VERIFYLIB_CACHE`` or ``~/.cache/verifylib``).
    log : callable
        Progress lines.
    write : ManifestRequest, optional
        Also write the candidate's user pin entry (module docstring), checked first.

    Returns
    -------
    Assessment
        The candidate, source, tree id, known pin, rows, conclusion and manifest written.

    Raises
    ------
    PinCheckError
        For an unusable candidate, an unknown pin, or a manifest that cannot be written.
    """
    from verifylib.resources import cache_dir as default_cache
    cache = Path(cache_dir) if cache_dir else default_cache()
    pins = _source.load_pins()
    write = _check_inputs(pins, pin_name, runs, write, candidate, build)
    scratch = Path(tempfile.mkdtemp(prefix="verifylib-pincheck-"))
    try:
        src, origin = resolve_candidate(candidate, url=url, subdir=subdir, cache_dir=cache,
                                        scratch=scratch / "cache", log=log)
        tree = _source.git_tree_id(src)
        known = next((p.name for p in pins.values() if p.tree == tree), None)
        if known is None:
            _note_litter(src, log)
        pin_name, applies, why = _choose_pin(src, tree, pins, pin_name, known, scratch / "work")
        state, line = _batch_state(src)
        if write is not None:
            _refuse_entry(known, state, line)
        result = Assessment(candidate, src, tree, known, pin_name, applies, state)
        result.conditions.extend(_source_rows(pin_name, pins[pin_name], applies, why, state,
                                              line))
        result.conditions.extend(_run_rows(src, tree, scratch, runs=runs, build=build,
                                           model=model, timeout=timeout, jobs=jobs,
                                           options=options, cache=cache, log=log))
        result.conditions.extend(_unassessed_rows())
        result.conclusion = _conclude(result)
        if write is not None and line is not None:
            result.manifest = _write_entry(result, write, line, scratch / "entry", log)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_inputs(pins: dict[str, _source.Pin], pin_name: str | None, runs: object,
                  write: ManifestRequest | None, candidate: str, build: bool
                  ) -> ManifestRequest | None:
    """Refuse an unknown pin, a bad run count or an unusable write request (before any work)."""
    if pin_name is not None and pin_name not in pins:
        raise PinCheckError(f"unknown pin {pin_name!r} (known: {', '.join(pins)})")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise PinCheckError(f"runs must be a positive integer, got {runs!r}")
    return None if write is None else _checked_request(write, candidate, build)


def _note_litter(src: Path, log: Callable[[str], None]) -> None:
    """Name the macOS litter in a candidate: counted in the tree id, no pin's tree can match."""
    litter = os_litter(src)
    if litter:
        log(f"note: {describe_litter(src, litter)}")


def _batch_state(src: Path) -> tuple[str, int | None]:
    """:func:`batch_member_state` of the candidate's ``src/whisper.cpp`` (absent: no file)."""
    whisper_cpp = src / "src" / "whisper.cpp"
    if not whisper_cpp.is_file():
        return "absent", None
    return batch_member_state(whisper_cpp.read_text(errors="replace"))


def _choose_pin(src: Path, tree: str, pins: dict[str, _source.Pin], pin_name: str | None,
                known: str | None, work: Path) -> tuple[str, bool, str]:
    """Pick the pin whose patch to try (see :func:`assess`); whether it applies, and why."""
    tries: dict[str, tuple[bool, str]] = {}
    if pin_name is None and known is None:
        for name, p in pins.items():
            tries[name] = _try_patch(src, tree, p, work)
            if tries[name][0]:
                break
        pin_name = next((n for n, (ok, _) in tries.items() if ok), next(iter(pins)))
    pin_name = pin_name or known
    pin = pins[pin_name]
    applies, why = tries.get(pin_name) or _try_patch(src, tree, pin, work)
    return pin_name, applies, why


def _source_rows(pin_name: str, pin: _source.Pin, applies: bool, why: str, state: str,
                 line: int | None) -> list[Condition]:
    """Return the rows read from the source: the pin's patch applies, the batch member."""
    decl = {"uninitialized": (f"yes: `{contracts.BATCH_MEMBER_UNINITIALIZED}` at "
                              f"src/whisper.cpp:{line}", NOT_MET),
            "initialized": (f"no: initialized at src/whisper.cpp:{line}", MET),
            "absent": ("no `whisper_batch batch` member found in struct whisper_state",
                       UNKNOWN)}[state]
    return [Condition(f"pin {pin_name}'s patch ({pin.patch_sha256[:12]}...) applies",
                      why if applies else f"no: {why}", INFO),
            Condition(f"`{contracts.BATCH_MEMBER_UNINITIALIZED}` still uninitialized", *decl)]


def _run_rows(src: Path, tree: str, scratch: Path, *, runs: int, build: bool,
              model: str | Path | None, timeout: float, jobs: int, options: dict | None,
              cache: Path, log: Callable[[str], None]) -> list[Condition]:
    """Return the rows of the unpatched candidate's runs: lifecycle A/B, GGML, sanitizer."""
    from verifylib.runtime.contracts import lifecycle_argv
    test_model = src / contracts.TEST_MODEL_IN_TREE
    audio = src / contracts.TEST_AUDIO_IN_TREE
    ab_check = (f"unpatched lifecycle A/B ({' '.join(contracts.lifecycle_trigger_args())}, "
                f"{runs} runs)")
    ggml_check = "GGML positive path (unpatched candidate, tree's sample)"
    if not build:
        skip = "NOT_RUN(disabled: --no-build)"
        return [Condition(ab_check, "not run", skip), Condition(ggml_check, "not run", skip),
                Condition(SANITIZER_CHECK, "not run", skip)]
    if not (test_model.is_file() and audio.is_file()):
        skip = (f"NOT_RUN(prerequisite: the candidate has no {contracts.TEST_MODEL_IN_TREE} "
                f"or {contracts.TEST_AUDIO_IN_TREE})")
        return [Condition(ab_check, "not run", skip), Condition(ggml_check, "not run", skip),
                Condition(SANITIZER_CHECK, "not run", skip)]
    real_model = Path(model) if model else _default_model(scratch, cache, log)
    rows = _physical_rows(src, tree, test_model, real_model, audio, runs=runs,
                          timeout=timeout, jobs=jobs, options=options, cache=cache,
                          log=log, ab_check=ab_check, ggml_check=ggml_check,
                          lifecycle_argv=lifecycle_argv)
    rows.append(sanitizer_row(src, tree, test_model, audio, timeout=timeout, jobs=jobs,
                              options=options, cache=cache, log=log))
    return rows


def _unassessed_rows() -> list[Condition]:
    """Return the rows pin-check leaves to others: the Core ML path, the manifest."""
    missing = detect().missing(Capability.MACOS_XCODE)
    return [Condition("Core ML positive path (unpatched candidate)", "not run here",
                      f"NOT_RUN(platform: {missing})" if missing else
                      "NOT_RUN(prerequisite: run `verifylib run` with runtime.source set to "
                      "this candidate; canary.coreml_positive decides)"),
            Condition("patches/manifest.yaml and cache identity migrated deliberately",
                      "pin-check never edits or deletes a patch", MANUAL)]


def _default_model(scratch: Path, cache: Path, log) -> Path:
    """Write the default parameter file's model as a ggml file, with our own writer."""
    from verifylib.models.ggml_writer import write_ggml_model
    from verifylib.models.intake import obtain_model
    from verifylib.params import DEFAULT_PARAMETERS, load
    p = load(DEFAULT_PARAMETERS)
    info = obtain_model(p.model.spec, cache, log=log, base_dir=p.base_dir)
    out = scratch / "model" / "ggml-model.bin"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_ggml_model(info.hf_dir, out)
    return out


def _physical_rows(src, tree, model, real_model, audio, *, runs, timeout, jobs, options, cache,
                   log, ab_check, ggml_check, lifecycle_argv) -> list[Condition]:
    try:
        res = _build.build_whisper_cli(src, tree_id=tree, patch_sha256=None,
                                       variant="ggml-unpatched",
                                       options=options or {"GGML_NATIVE": "ON"},
                                       cache_dir=cache, jobs=jobs, log=log)
    except BuildError as exc:
        why = str(exc).splitlines()[0]
        return [Condition(ab_check, f"build failed: {why}", NOT_MET),
                Condition(ggml_check, "build failed", NOT_MET)]
    if _source.git_tree_id(src) != tree:
        raise PinCheckError(f"the candidate folder {src} changed during the build")
    log(f"unpatched candidate whisper-cli {res.sha256[:12]}...: {runs} lifecycle runs")
    outcomes = Counter()
    first_bad = None
    records = []
    for i in range(runs):
        r = run_whisper_cli(lifecycle_argv(res.binary, model, audio), timeout=timeout)
        records.append(run_record(r))
        c = contracts.classify_lifecycle(records[-1], r.stderr, r.stdout)
        outcomes[c.outcome] += 1
        if not c.ok and first_bad is None:
            first_bad = f"run {i}: {c.detail}"
    summary = ", ".join(f"{n}/{runs} {label}" for label, n in outcomes.most_common())
    clean = outcomes.get(contracts.CLEAN_LIFECYCLE, 0) == runs
    rows = [lifecycle_row(ab_check, summary, clean, first_bad, runs_system(records))]
    argv = [str(res.binary), "-m", str(real_model), "-f", str(audio), "-t", "2",
            *contracts.greedy_decoding_args("en")]
    r = run_whisper_cli(argv, timeout=timeout)
    c = contracts.classify_ggml_positive(run_record(r), r.stderr, r.stdout)
    text = " ".join(r.stdout_text.split())
    rows.append(Condition(f"{ggml_check}, model {Path(real_model).name}",
                          f"{c.outcome}: {text[:60]!r}" if c.ok else c.detail,
                          MET if c.ok else NOT_MET))
    return rows


def lifecycle_row(check: str, summary: str, clean: bool, first_bad: str | None,
                  system: str | None) -> Condition:
    """Turn the unpatched candidate's lifecycle runs into their row.

    A clean side meets the condition where the defect crashes (Linux). On macOS the
    allocator can hide the bad free, so a clean side there is no evidence the defect is
    gone: the row says so, names the sanitizer as the witness, and stays ``unknown``.

    Parameters
    ----------
    check : str
        The row's check text.
    summary : str
        The outcome counts, e.g. ``"20/20 exit 3 + both markers"``.
    clean : bool
        Whether every run was clean.
    first_bad : str or None
        The first run that was not clean, described.
    system : str or None
        The OS the runs ran on
        (:func:`verifylib.evidence.canary.rules.runs_system` of their records).

    Returns
    -------
    Condition
        ``met`` for a clean side off macOS, ``unknown`` for one on macOS, else ``NOT MET``.
    """
    if not clean:
        return Condition(check, f"{summary} (first: {first_bad})", NOT_MET)
    caveat = unpatched_caveat(system, clean)
    if caveat:
        return Condition(check, f"{summary}; {caveat} (the AddressSanitizer row below)",
                         UNKNOWN)
    return Condition(check, summary, MET)


SANITIZER_CHECK = ("unpatched AddressSanitizer run (supporting evidence for row 2: is "
                   "`whisper_batch` initialized safely?)")
"""The informational pin-check row of the sanitizer outcome."""


def sanitizer_row(src: Path, tree: str, model: Path, audio: Path, *, timeout: float,
                  jobs: int, options: dict | None, cache: Path,
                  log: Callable[[str], None]) -> Condition:
    """Report what AddressSanitizer prints for the unpatched candidate under the trigger.

    Builds (or reuses) the candidate's ``ggml-unpatched-asan`` whisper-cli with the GGML
    build's options, outside the candidate folder, and runs the lifecycle trigger
    :data:`verifylib.runtime.sanitizer.RUNS_PER_SIDE` times with
    :data:`verifylib.runtime.sanitizer.ASAN_OPTIONS`, as ``canary.sanitizer`` does. The
    row is informational (``n/a`` toward deleting the patch): a report says the
    early-return path still frees garbage; its absence is consistent with a safely
    initialized member but proves nothing alone, which is why rows 2 and 3 decide.

    Parameters
    ----------
    src : Path
        The candidate's source folder.
    tree : str
        Its git tree id (checked again after the build).
    model, audio : Path
        The tree's test model and sample audio for the trigger.
    timeout : float
        Seconds per whisper-cli run.
    jobs : int
        Parallel compile jobs.
    options : dict or None
        CMake options of the GGML build (``GGML_NATIVE=ON`` when None).
    cache : Path
        The shared cache.
    log : callable
        Receives progress lines.

    Returns
    -------
    Condition
        The informational row (a failed ASan build is reported in it, not raised).

    Raises
    ------
    PinCheckError
        If the candidate folder changed during the build.
    """
    variant = _sanitizer.SIDES["unpatched"][0]
    try:
        res = _build.build_whisper_cli(src, tree_id=tree, patch_sha256=None, variant=variant,
                                       options=options or {"GGML_NATIVE": "ON"},
                                       cache_dir=cache, jobs=jobs, log=log)
    except BuildError as exc:
        return Condition(SANITIZER_CHECK, f"ASan build failed: {str(exc).splitlines()[0]}", INFO)
    if _source.git_tree_id(src) != tree:
        raise PinCheckError(f"the candidate folder {src} changed during the ASan build")
    n = _sanitizer.RUNS_PER_SIDE
    log(f"unpatched candidate ASan whisper-cli {res.sha256[:12]}...: {n} lifecycle runs")
    labels: Counter = Counter()
    reported = 0
    for _ in range(n):
        r = run_whisper_cli(contracts.lifecycle_argv(res.binary, model, audio), timeout=timeout,
                            env_extra=_sanitizer.sanitizer_env())
        rep = _sanitizer.parse_report(r.stderr)
        if rep is not None:
            reported += 1
            labels[rep.describe()] += 1
        else:
            c = contracts.classify_lifecycle(run_record(r), r.stderr, r.stdout)
            labels[f"{c.outcome}, no sanitizer report"] += 1
    seen = ", ".join(f"{k}/{n} {label}" for label, k in labels.most_common())
    meaning = ("the early-return path still frees garbage: against safe initialization"
               if reported else "consistent with safe initialization (not proof)")
    return Condition(SANITIZER_CHECK, f"{seen} ({meaning})", INFO)


# ----------------------------------------------------------------------------- --write-manifest

_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


def _checked_request(write: ManifestRequest, candidate: str, build: bool) -> ManifestRequest:
    """Refuse a ``--write-manifest`` request before any work; fill in its commit and name."""
    if not build:
        raise PinCheckError("--write-manifest writes an entry only when every condition this "
                            "host can run has been assessed: drop --no-build")
    given = _COMMIT_RE.fullmatch(candidate) is not None
    if given and write.commit not in (None, candidate):
        raise PinCheckError(f"--commit {write.commit!r} is not the candidate commit {candidate}")
    commit = candidate if given else write.commit
    if commit is None:
        raise PinCheckError(f"--write-manifest: name the upstream commit of {candidate} with "
                            "--commit (the candidate is not a commit id)")
    if not _COMMIT_RE.fullmatch(commit):
        raise PinCheckError(f"--commit {commit!r} must be 40 lower-case hex digits")
    name = write.name or f"user-{commit[:12]}"
    _entry.check_destination(write.path, name)
    return ManifestRequest(Path(write.path), name, commit)


def _refuse_entry(known: str | None, state: str, line: int | None) -> None:
    """Refuse, before the builds, a candidate no user pin can be written for."""
    if known is not None:
        raise PinCheckError(f"--write-manifest: the candidate is packaged pin {known}'s tree; "
                            f"name runtime.pin: {known} instead")
    if state != "uninitialized" or line is None:
        how = ("initializes it" if state == "initialized"
               else "declares no `whisper_batch batch` member in struct whisper_state")
        raise PinCheckError(f"--write-manifest: src/whisper.cpp {how}, so there is no "
                            f"`{contracts.BATCH_MEMBER_UNINITIALIZED}` to patch and verifylib "
                            "audits patched pins only; run pin-check without --write-manifest "
                            "for the deletion conditions")


def _write_entry(a: Assessment, write: ManifestRequest, line: int, scratch: Path,
                 log: Callable[[str], None]) -> Path:
    """Generate, prove and write the candidate's entry (every runnable condition assessed)."""
    skipped = [c.check for c in a.conditions if c.deletion.startswith("NOT_RUN(disabled")]
    if skipped:
        raise PinCheckError(f"--write-manifest: not written, these conditions could run here "
                            f"but were not assessed: {'; '.join(skipped)}")
    not_run = tuple(f"{c.check}: {c.deletion}" for c in a.conditions
                    if c.deletion.startswith("NOT_RUN("))
    try:
        patch = _entry.generate_patch(a.source, a.tree_id, line, scratch / "generate")
        # Both filled in by _checked_request before any work.
        entry = _entry.PinEntry(str(write.name), str(write.commit), a.tree_id, patch,
                                (_entry.TOUCHED,), not_run)
        _entry.prove_entry(a.source, entry, scratch / "prove", log=log)
    except _source.PatchError as exc:
        raise PinCheckError(f"--write-manifest: cannot make the candidate's patch: {exc}") \
            from exc
    _entry.write_manifest(entry, write.path, _entry_header(a, entry, write.path))
    return Path(write.path)


def _entry_header(a: Assessment, entry: "_entry.PinEntry", manifest: Path) -> list[str]:
    """Return the manifest's opening comment: what it is, its use, what was assessed."""
    from verifylib import __version__
    rows = [f"  - {c.check}: {c.deletion} ({c.observed})" for c in a.conditions]
    return [f"A user-declared whisper.cpp pin, written by `verifylib pin-check "
            f"--write-manifest` (verifylib {__version__}).",
            f"Use it from a parameter file: runtime.manifest: {Path(manifest).name} (relative "
            f"to the parameter file), runtime.pin: {entry.name}.",
            f"candidate: {a.candidate}, tree {a.tree_id}; the patch was generated for this "
            "tree and proved exact on it.",
            "Patch-deletion conditions (docs/runtime-contract.md §6.4) as assessed on "
            f"{detect().system} {detect().machine}:", *rows,
            "not_run_here lists the conditions this host could not run.",
            a.conclusion, ""]


def _conclude(a: Assessment) -> str:
    if a.patch_applies:
        head = (f"PATCH STILL NEEDED: pin {a.pin}'s patch applies to this source"
                + (f", which still declares `{contracts.BATCH_MEMBER_UNINITIALIZED}`"
                   if a.batch_state == "uninitialized" else "") + ".")
    else:
        head = f"THE PATCH NO LONGER APPLIES to this source (pin {a.pin}'s patch)."
        if a.batch_state == "initialized":
            head += (" Upstream now initializes the member; the patch may be dropped for this "
                     "source only when every row of the table is met (the Core ML row on a "
                     "Mac) and the manifest is migrated by hand.")
        else:
            head += " A new compatibility patch must be written and reviewed for this source."
    automated = [c for c in a.conditions if c.deletion not in (INFO, MANUAL)]
    ran = [c for c in automated if not c.deletion.startswith("NOT_RUN")]
    pending = [c.check for c in automated if c.deletion.startswith("NOT_RUN")]
    if ran and all(c.deletion == MET for c in ran):
        head += (" Every condition checked here is met"
                 + (f"; still to show: {'; '.join(pending)}" if pending else "") + ".")
    return head + " pin-check never deletes a patch."


def format_table(a: Assessment) -> str:
    """Format the assessment as plain text: header lines, the condition table, the conclusion.

    Parameters
    ----------
    a : Assessment
        From :func:`assess`.

    Returns
    -------
    str
        The candidate, source and tree id lines, the wrapped condition table and the
        conclusion.
    """
    lines = [f"candidate: {a.candidate}", f"source:    {a.source}", f"tree id:   {a.tree_id}"
             + (f" (= pin {a.known_pin})" if a.known_pin else " (no pin in the manifest)"), ""]
    import textwrap
    head = ("check", "observed", "toward deleting the patch")
    rows = [head] + [(c.check, c.observed, c.deletion) for c in a.conditions]
    caps = (40, 56, 40)
    widths = [min(max(len(r[i]) for r in rows), caps[i]) for i in range(3)]
    for n, r in enumerate(rows):
        cells = [textwrap.wrap(r[i], widths[i]) or [""] for i in range(3)]
        for k in range(max(len(c) for c in cells)):
            lines.append(" | ".join((cells[i][k] if k < len(cells[i]) else "").ljust(widths[i])
                                    for i in range(3)).rstrip())
        lines.append("-+-".join("-" * w for w in widths))
    lines += ["", a.conclusion]
    if a.manifest is not None:
        lines += ["", f"wrote {a.manifest}: a user pin for this tree, with a compatibility "
                      "patch generated for it and proved exact on it (review it: a run on it "
                      "is reported as user-declared; name it as runtime.manifest in a "
                      "parameter file)"]
    return "\n".join(lines)


def cli_main(args) -> int:
    """Run ``verifylib pin-check`` (argparse namespace in, exit code out).

    Parameters
    ----------
    args : argparse.Namespace
        ``candidate``, ``pin``, ``url``, ``subdir``, ``runs``, ``no_build``, ``jobs``,
        ``model``, and ``write_manifest``, ``name``, ``commit``.

    Returns
    -------
    int
        0 after printing the table (and writing the manifest), 2 when the candidate, the
        pin or the manifest to write is unusable.
    """
    import sys
    write = (ManifestRequest(Path(args.write_manifest), args.name, args.commit)
             if getattr(args, "write_manifest", None) else None)
    try:
        a = assess(args.candidate, pin_name=args.pin, url=args.url, subdir=args.subdir,
                   runs=args.runs, build=not args.no_build, jobs=args.jobs, model=args.model,
                   log=lambda m: print(m, file=sys.stderr), write=write)
    except ParametersInvalid as exc:
        print(f"verifylib pin-check: {exc}", file=sys.stderr)
        return 2
    print(format_table(a))
    return 0
