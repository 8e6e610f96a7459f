"""The classifiers of a recorded run.

Its integrity, its ending, and the conditions of the lifecycle, negative, positive and
GGML-only runs (docs/runtime-contract.md §2.3, §2.4, §6.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from verifylib.errors import ContractBroken
from verifylib.runtime.contracts.argv import (
    check_cli_argv,
    has_lifecycle_trigger,
    lifecycle_trigger_args,
)
from verifylib.runtime.contracts.markers import (
    AHEADS_FAILURE_MARKER,
    COREML_FLAG,
    COREML_LOAD_FAILURE_MARKER,
    COREML_LOAD_FAILURE_PREFIX,
    COREML_LOAD_MARKER,
    COREML_LOADING_PREFIX,
    COREML_OFF,
    COREML_ON,
    DTW_DISABLED_BY_FLASH_ATTN,
    EXIT_INIT_FAILURE,
    EXIT_OK,
    INIT_FAILURE_MARKER,
    SYSTEM_INFO_PREFIX,
)
from verifylib.runtime.contracts.paths import coreml_encoder_path, model_arg_of
from verifylib.runtime.contracts.signals import (
    LEGACY_SIGNAL_TABLE,
    SIGNAL_TABLE_KEY,
    SIGNAL_TABLES,
    decode_signal,
)

# --- classifiers (docs/runtime-contract.md §2.3, §2.4, §6.2) ------------------------------
#
# Each takes one run's record (argv, returncode, signal, timed_out and the SHA-256 of its
# streams, as written by ``verifylib.runtime.runner.run_record``) and that run's own stderr bytes.
# They are pure: ``verifylib verify`` calls them again on the stored files.

CLEAN_LIFECYCLE = "exit 3 + both markers"
"""Outcome label of a lifecycle run that failed cleanly."""

CLEAN_NEGATIVE = "exit 3 + load-failure + init-failure"
"""Outcome label of a clean negative control."""

CLEAN_POSITIVE = "exit 0 + four conditions"
"""Outcome label of a passing positive run."""


@dataclass(frozen=True)
class Classification:
    """What a classifier concluded about one run.

    Constructed as ``Classification(outcome, problems)``; ``ok`` is derived.

    Attributes
    ----------
    ok : bool
        True iff the run meets the rule.
    outcome : str
        Short label for tables: the clean label, ``"SIGSEGV"``, ``"timeout"``, ``"exit 0"``,
        or ``"exit 3, marker missing"``.
    problems : tuple of str
        Every reason the run fails the rule, in a fixed order (empty when ``ok``).
    """

    # Declared first, and derived, so the repr reads ok, outcome, problems and a caller can
    # never pass an ``ok`` that disagrees with the problems.
    ok: bool = field(init=False)
    outcome: str
    problems: tuple[str, ...]

    def __post_init__(self):
        # Callers pass lists; a tuple keeps the frozen value hashable and unchangeable.
        object.__setattr__(self, "problems", tuple(self.problems))
        object.__setattr__(self, "ok", not self.problems)

    @property
    def detail(self) -> str:
        """The outcome, or the problems joined by ``"; "``."""
        return self.outcome if self.ok else "; ".join(self.problems)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def recorded_signal_table(record) -> tuple[str | None, str | None]:
    """Name the signal table a run record was decoded with.

    Parameters
    ----------
    record : dict
        A run record; its :data:`SIGNAL_TABLE_KEY` is read.

    Returns
    -------
    (str or None, str or None)
        The table's name and None; :data:`LEGACY_SIGNAL_TABLE` when the record has no
        such key (it predates the key); or None and the problem when it names no known
        table.
    """
    name = record.get(SIGNAL_TABLE_KEY, LEGACY_SIGNAL_TABLE)
    if isinstance(name, str) and name in SIGNAL_TABLES:
        return name, None
    return None, (f"unknown signal table {name!r} (known: "
                  f"{', '.join(sorted(SIGNAL_TABLES))})")


def termination(record) -> tuple[str, list[str]]:
    """Re-derive how a recorded run ended from its return code.

    The return code is decoded with the signal table the record names (the OS the child
    ran on, :func:`recorded_signal_table`), not with this host's: a Mac's ``-10`` is
    SIGBUS wherever it is verified.

    Parameters
    ----------
    record : dict
        A run record (as written by ``verifylib.runtime.runner.run_record``); its
        ``timed_out``, ``returncode``, ``signal`` and ``signal_table`` fields are read.

    Returns
    -------
    (str, list of str)
        ``"timeout"``, a signal name (from a negative code or 128+N), ``"exit N"``, or
        ``"no exit status"`` / ``"no signal table"`` when the record cannot say; and
        problems with the record itself (a recorded signal that disagrees with the return
        code, a missing code, a malformed timeout flag, an unknown signal table).
    """
    problems: list[str] = []
    timed_out = record.get("timed_out")
    rc = record.get("returncode")
    if timed_out is not True and timed_out is not False:
        problems.append(f"malformed timed_out flag {timed_out!r}")
    if timed_out is True:
        if rc is not None:
            problems.append(f"a timed-out run cannot have return code {rc!r}")
        return "timeout", problems
    if not _is_int(rc):
        return "no exit status", problems + [f"no return code recorded ({rc!r})"]
    table, bad_table = recorded_signal_table(record)
    if table is None:
        return "no signal table", problems + [str(bad_table)]
    sig = decode_signal(rc, table)
    if record.get("signal") != sig:
        implied = f"{sig} in the {table} signal table" if sig else "a normal exit"
        problems.append(f"recorded signal {record.get('signal')!r} disagrees with return code "
                        f"{rc} ({implied})")
    return (sig or f"exit {rc}"), problems


def _ending_problem(label: str, rc, want: int) -> str | None:
    if label == f"exit {want}":
        return None
    if label == "timeout":
        return "timed out (killed, no exit status)"
    if label.startswith("SIG"):
        return f"killed by {label} (return code {rc})"
    return f"{label}, expected exactly {want}"


def _integrity(record, stderr: bytes, stdout: bytes | None) -> list[str]:
    import hashlib
    problems = []
    if not isinstance(record, dict):
        return ["run record is not a mapping"]
    if not isinstance(stderr, (bytes, bytearray)):
        return ["stderr stream missing"]
    if hashlib.sha256(stderr).hexdigest() != record.get("stderr_sha256"):
        problems.append("stderr is not this run's stream (SHA-256 differs from the record)")
    if stdout is not None and hashlib.sha256(stdout).hexdigest() != record.get("stdout_sha256"):
        problems.append("stdout is not this run's stream (SHA-256 differs from the record)")
    argv = record.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        problems.append(f"malformed argv {argv!r}")
    else:
        try:
            check_cli_argv(argv)
        except ContractBroken as exc:
            problems.append(f"argv breaks the runtime contract: {exc}")
    return problems


def record_problems(record, stderr: bytes, stdout: bytes | None = None) -> list[str]:
    """List the problems with a run record as evidence, whatever the run's outcome.

    The streams must be the run's own (digests), the argv contract-clean, and the recorded
    signal the one the return code implies. A record with any of these problems cannot
    be classified honestly (a crash relabeled as exit 3 lands here or in the markers).

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None skips its digest check.

    Returns
    -------
    list of str
        Every problem found; empty when the record is sound.
    """
    problems = _integrity(record, stderr, stdout)
    if isinstance(record, dict):
        problems += termination(record)[1]
    return problems


def _lines(text: str, prefix: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if prefix in ln]


def _quoted_path(line: str, prefix: str) -> str | None:
    rest = line.split(prefix, 1)[1]
    return rest[:-1] if rest.endswith("'") else None


def _path_problem(text: str, prefix: str, argv, what: str) -> str | None:
    """Check that the Core ML path a line names is the one derived from this run's -m."""
    model = model_arg_of(argv) if isinstance(argv, list) else None
    if model is None:
        return "argv has no -m model argument"
    want = coreml_encoder_path(model)
    for line in _lines(text, prefix):
        got = _quoted_path(line, prefix)
        if got != want:
            return f"{what} names {got!r}, not coreml_encoder_path(-m) {want!r}"
    return None


def _missing(marker: str) -> str:
    return f"missing on stderr: {marker!r}"


def _present(marker: str) -> str:
    return f"present on stderr: {marker!r}"


def system_info_coreml(text: str) -> int | None:
    """Read the ``COREML = <n>`` value of the first ``system_info:`` line.

    Parameters
    ----------
    text : str
        whisper-cli's standard error, decoded.

    Returns
    -------
    int or None
        The value, or None when there is no ``system_info:`` line or its first one has
        no ``COREML = <n>`` field.
    """
    for line in text.splitlines():
        if SYSTEM_INFO_PREFIX in line:
            m = re.search(re.escape(COREML_FLAG) + r"(\d+)", line)
            return int(m.group(1)) if m else None
    return None


def classify_negative(record, stderr: bytes, stdout: bytes | None = None) -> Classification:
    """Classify one run as the fail-closed negative control (docs/runtime-contract.md §2.4).

    Passes iff the run exited exactly 3 (no signal, no timeout, also not as 128+N), its
    stderr holds the Core ML load-failure line naming ``coreml_encoder_path(-m)`` and the
    init-failure line, no ``Core ML model loaded`` line, and the record is this run's
    (stream digests, contract-clean argv).

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None skips its digest check.

    Returns
    -------
    Classification
        :data:`CLEAN_NEGATIVE` when it passes; otherwise ``"malformed"`` (no mapping or
        no stderr), the ending label, or ``"exit 3, marker missing"``, with the problems.
    """
    problems, label, text = _run_preamble(record, stderr, stdout, EXIT_INIT_FAILURE)
    if label is None:
        return Classification("malformed", problems)
    if COREML_LOAD_FAILURE_MARKER not in text:
        problems.append(_missing(COREML_LOAD_FAILURE_MARKER))
    else:
        p = _path_problem(text, COREML_LOAD_FAILURE_PREFIX, record.get("argv"),
                          "the load-failure line")
        if p:
            problems.append(p)
    if INIT_FAILURE_MARKER not in text:
        problems.append(_missing(INIT_FAILURE_MARKER))
    if COREML_LOAD_MARKER in text:
        problems.append(_present(COREML_LOAD_MARKER))
    if not problems:
        return Classification(CLEAN_NEGATIVE, ())
    return Classification(label if label != f"exit {EXIT_INIT_FAILURE}"
                          else "exit 3, marker missing",
                          problems)


def _run_preamble(record, stderr: bytes, stdout: bytes | None, want: int):
    """Run the checks every classifier starts with.

    The record's integrity and whether the run ended with exit status ``want``. Returns
    (problems, ending label or None if the record is malformed, stderr text).
    """
    problems = _integrity(record, stderr, stdout)
    if problems and problems[0] in ("run record is not a mapping", "stderr stream missing"):
        return problems, None, ""
    label, rec_problems = termination(record)
    problems += rec_problems
    end = _ending_problem(label, record.get("returncode"), want)
    if end:
        problems.append(end)
    return problems, label, bytes(stderr).decode("utf-8", "replace")


def warmup_problems(record, stderr: bytes, stdout: bytes | None = None) -> list[str]:
    """List what disqualifies the positive gate's warm-up run.

    docs/runtime-contract.md §6.3, §10: never accept or retry a SIGABRT.

    The warm-up is not classified by the four conditions (its first-run compilation may
    print differently), but it must be this run's record (stream digests, clean argv) and
    end with exit 0: a signal, a timeout, any other exit status, or a ``failed to load
    Core ML model`` line (a fallback to the GGML encoder) fails the gate.

    Parameters
    ----------
    record : dict
        The warm-up's run record.
    stderr : bytes
        The warm-up's stored standard error.
    stdout : bytes or None
        The warm-up's stored standard output; None skips its digest check.

    Returns
    -------
    list of str
        Empty when the warm-up is acceptable.
    """
    problems, label, text = _run_preamble(record, stderr, stdout, EXIT_OK)
    if label is None:
        return problems
    if COREML_LOAD_FAILURE_MARKER in text:
        problems.append(_present(COREML_LOAD_FAILURE_MARKER) + " (a fallback)")
    return problems


def classify_positive(record, stderr: bytes, stdout: bytes | None = None) -> Classification:
    """Classify ONE run by the four-condition positive gate (docs/runtime-contract.md §2.3).

    1. exit status 0 (no signal, no timeout); 2. ``COREML = 1`` in the ``system_info:``
    line; 3. exactly one ``whisper_init_state: Core ML model loaded`` line (more means
    ``-p N``); 4. no ``failed to load Core ML model`` line. Also: the ``loading Core ML
    model from`` line names ``coreml_encoder_path(-m)`` of this run (a log from another
    run or model fails), and the record is this run's (stream digests, contract-clean argv).

    The transcript is not looked at: a nil prediction (load marker, empty or garbage text)
    passes here and is caught only by transcript comparison (``wer.hybrid``,
    docs/runtime-contract.md §4.2).

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None skips its digest check.

    Returns
    -------
    Classification
        :data:`CLEAN_POSITIVE` when it passes; otherwise ``"malformed"`` (no mapping or
        no stderr), the ending label, or ``"exit 0, condition failed"``, with the problems.
    """
    problems, label, text = _run_preamble(record, stderr, stdout, EXIT_OK)
    if label is None:
        return Classification("malformed", problems)
    coreml = system_info_coreml(text)
    if coreml is None:
        problems.append(f"no {SYSTEM_INFO_PREFIX!r} line with {COREML_ON!r} on stderr")
    elif coreml != 1:
        problems.append(f"system_info shows {COREML_FLAG}{coreml}: a build without Core ML")
    n_loaded = text.count(COREML_LOAD_MARKER)
    if n_loaded == 0:
        problems.append(_missing(COREML_LOAD_MARKER))
    elif n_loaded > 1:
        problems.append(f"{n_loaded} lines {COREML_LOAD_MARKER!r} in one run, expected exactly "
                        "1 (one processor)")
    if COREML_LOAD_FAILURE_MARKER in text:
        problems.append(_present(COREML_LOAD_FAILURE_MARKER))
    if n_loaded:
        if COREML_LOADING_PREFIX not in text:
            problems.append(_missing(COREML_LOADING_PREFIX))
        else:
            p = _path_problem(text, COREML_LOADING_PREFIX, record.get("argv"), "the loading line")
            if p:
                problems.append(p)
    if not problems:
        return Classification(CLEAN_POSITIVE, ())
    return Classification(label if label != f"exit {EXIT_OK}" else "exit 0, condition failed",
                          problems)


def classify_lifecycle(record, stderr: bytes, stdout: bytes | None = None) -> Classification:
    """Classify one batch-lifecycle canary run (docs/runtime-contract.md §6.2).

    Passes iff the argv carries the trigger (``-nfa -dtw <preset>``), the run exited
    exactly 3 with no signal or timeout, and stderr holds the ``aheads_masks_init()``
    failure line and the init-failure line (and not the "DTW disabled" warning).

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None skips its digest check.

    Returns
    -------
    Classification
        :data:`CLEAN_LIFECYCLE` when it passes; otherwise ``"malformed"`` (no mapping or
        no stderr), the ending label, or ``"exit 3, marker missing"``, with the problems.
    """
    problems = _integrity(record, stderr, stdout)
    if problems and problems[0] in ("run record is not a mapping", "stderr stream missing"):
        return Classification("malformed", problems)
    if not has_lifecycle_trigger(record.get("argv")):
        problems.append("argv lacks the lifecycle trigger "
                        f"({' '.join(lifecycle_trigger_args('<preset>'))})")
    label, rec_problems = termination(record)
    problems += rec_problems
    end = _ending_problem(label, record.get("returncode"), EXIT_INIT_FAILURE)
    if end:
        problems.append(end)
    text = bytes(stderr).decode("utf-8", "replace")
    if DTW_DISABLED_BY_FLASH_ATTN in text:
        problems.append(_present(DTW_DISABLED_BY_FLASH_ATTN))
    if AHEADS_FAILURE_MARKER not in text:
        problems.append(_missing(AHEADS_FAILURE_MARKER))
    if INIT_FAILURE_MARKER not in text:
        problems.append(_missing(INIT_FAILURE_MARKER))
    if not problems:
        return Classification(CLEAN_LIFECYCLE, ())
    return Classification(label if label != f"exit {EXIT_INIT_FAILURE}"
                          else "exit 3, marker missing",
                          problems)


def classify_ggml_positive(record, stderr: bytes, stdout: bytes | None = None) -> Classification:
    """Classify an ordinary GGML transcription run (used by ``verifylib pin-check``).

    Passes iff the run exited 0, its ``system_info:`` line shows ``COREML = 0``, stderr
    has no Core ML line, and stdout holds a non-empty transcript.

    Parameters
    ----------
    record : dict
        The run record.
    stderr : bytes
        The run's stored standard error.
    stdout : bytes or None
        The run's stored standard output; None counts as an empty transcript.

    Returns
    -------
    Classification
        ``"exit 0 + transcript"`` when it passes; otherwise ``"malformed"`` (no mapping or
        no stderr), the ending label, or ``"exit 0, condition failed"``, with the problems.
    """
    problems, label, text = _run_preamble(record, stderr, stdout, EXIT_OK)
    if label is None:
        return Classification("malformed", problems)
    coreml = system_info_coreml(text)
    if coreml != 0:
        problems.append(f"no {SYSTEM_INFO_PREFIX!r} line with {COREML_OFF!r} on stderr")
    if COREML_LOADING_PREFIX in text or COREML_LOAD_MARKER in text:
        problems.append("Core ML lines in a GGML run")
    if stdout is None or not bytes(stdout).strip():
        problems.append("empty transcript on stdout")
    if not problems:
        return Classification("exit 0 + transcript", ())
    return Classification(label if label != f"exit {EXIT_OK}" else "exit 0, condition failed",
                          problems)
