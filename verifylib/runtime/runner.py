"""Headless subprocess runner: list argv, no shell, credential-free env, both streams kept.

Every external program (git, cmake, whisper-cli) goes through :func:`run`, so the rules
of the headless contract (docs/runtime-contract.md §6) hold everywhere: no shell, a
stripped environment, both streams captured and hashed, a timeout, no retry, and a decoded
signal when the child was killed (by the fixed signal table of the OS the child ran on,
whose name the record carries: :mod:`verifylib.runtime.contracts`). whisper-cli gate runs
go through :func:`run_whisper_cli`, which refuses a command line that breaks the runtime
contract before anything is launched, and :func:`run_record` turns a result into the
record the classifiers of :mod:`verifylib.runtime.contracts` judge (and ``verifylib
verify`` judges again). Every launch of a whisper.cpp binary (:func:`run_whisper_cli`,
:func:`run_whisper_binary`) is appended to the bound run directory's launch ledger
(:mod:`verifylib.runtime.ledger`) and its result carries the entry's citation, which
:func:`run_record` passes on to the evidence.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from verifylib.canonical import sha256_bytes, sha256_file
from verifylib.errors import ParametersInvalid, RunFailure
from verifylib.runtime import contracts, ledger, progress
from verifylib.runtime.contracts import (
    BACKEND_PATH_VARIABLE,
    decode_signal,  # noqa: F401  (re-exported: the contract owns it)
)

# Names that may carry credentials: never handed to a child process.
_SECRET_PATTERNS = (
    re.compile(r"^HF_"), re.compile(r"^HUGGING_FACE"), re.compile(r"^AWS_"),
    re.compile(r"^AZURE_"), re.compile(r"^GOOGLE_"), re.compile(r"^GCP_"),
    re.compile(r"^GITHUB_"), re.compile(r"^GH_"), re.compile(r"^GITLAB_"),
    re.compile(r"^OPENAI_"), re.compile(r"^ANTHROPIC_"),
    re.compile(r"TOKEN"), re.compile(r"_KEY$"), re.compile(r"SECRET"),
    re.compile(r"PASSWORD"), re.compile(r"PASSWD"), re.compile(r"CREDENTIAL"),
    re.compile(r"^SSH_AUTH_SOCK$"), re.compile(r"^NETRC$"),
)


def sanitized_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return a copy of the environment without credential-like variables.

    Parameters
    ----------
    extra : mapping, optional
        Variables to set after stripping (they are not filtered: the caller owns them).

    Returns
    -------
    dict
        The child environment.
    """
    env = {k: v for k, v in os.environ.items()
           if not any(p.search(k.upper()) for p in _SECRET_PATTERNS)}
    # A backend library named here would be loaded by whisper-cli at run time and could
    # move a pinned cpu build onto a GPU (docs/runtime-contract.md, ggml backends).
    env.pop(BACKEND_PATH_VARIABLE, None)
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class RunResult:
    """Outcome of one child process.

    Attributes
    ----------
    argv : list of str
        The exact argument vector.
    returncode : int or None
        Raw return code (negative N when killed by signal N); None on timeout.
    signal : str or None
        Signal name when the child died by a signal (directly or as shell-style 128+N),
        decoded with the ``signal_table``.
    timed_out : bool
        True if the child was killed for exceeding its timeout.
    stdout, stderr : bytes
        Both streams, complete.
    wall_s : float
        Wall time in seconds.
    cwd : str or None
        Working directory of the child, if one was given.
    launch : dict or None
        The launch-ledger citation ``{"seq", "binary_sha256"}`` of a whisper.cpp launch
        recorded in the bound run directory's ledger (:mod:`verifylib.runtime.ledger`); None
        when the run was not recorded.
    signal_table : str or None
        The signal table ``signal`` was decoded with: the OS the child ran on
        (:func:`verifylib.runtime.contracts.host_signal_table`), set by :func:`run`; None
        for a result made elsewhere, whose record then carries no ``signal_table``.
    """

    argv: list[str]
    returncode: int | None
    signal: str | None
    timed_out: bool
    stdout: bytes
    stderr: bytes
    wall_s: float
    cwd: str | None = None
    launch: dict | None = None
    signal_table: str | None = None

    @property
    def ok(self) -> bool:
        """True when the child exited normally with status 0."""
        return self.returncode == 0 and not self.timed_out and self.signal is None

    @property
    def stdout_text(self) -> str:
        """Standard output decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """Standard error decoded as UTF-8 (undecodable bytes replaced)."""
        return self.stderr.decode("utf-8", "replace")

    @property
    def stdout_sha256(self) -> str:
        """Hex SHA-256 of the complete standard output."""
        return sha256_bytes(self.stdout)

    @property
    def stderr_sha256(self) -> str:
        """Hex SHA-256 of the complete standard error."""
        return sha256_bytes(self.stderr)

    def describe(self) -> str:
        """Name how the child ended in one line, for error messages.

        Returns
        -------
        str
            ``"timed out after <s>s"``, ``"killed by <SIG> (return code <n>)"`` or
            ``"exit <n>"``.
        """
        if self.timed_out:
            return f"timed out after {self.wall_s:.1f}s"
        if self.signal:
            return f"killed by {self.signal} (return code {self.returncode})"
        return f"exit {self.returncode}"


class CommandError(RunFailure):
    """A required helper command (git, cmake, ...) did not succeed.

    Parameters
    ----------
    result : RunResult
        The failed run; its ending, argv and the last 15 lines of stderr make the message.
    what : str
        Human name of the step, used in the message.

    Attributes
    ----------
    result : RunResult
        The failed run.
    """

    def __init__(self, result: RunResult, what: str):
        tail = result.stderr_text.strip().splitlines()[-15:]
        super().__init__(f"{what} failed ({result.describe()}): {' '.join(result.argv)}\n"
                         + "\n".join(tail))
        self.result = result


def run(argv: Sequence[str | os.PathLike], *, cwd: str | os.PathLike | None = None,
        timeout: float | None = 600.0, env_extra: Mapping[str, str] | None = None,
        stdin: bytes | None = None, check: bool = False, what: str | None = None,
        ticker: "progress.Ticker | None" = None) -> RunResult:
    """Run one child process headlessly.

    Parameters
    ----------
    argv : sequence
        Program and arguments; never interpreted by a shell.
    cwd : path-like, optional
        Working directory.
    timeout : float, optional
        Seconds before the child (and its process group) is killed. No retry follows.
    env_extra : mapping, optional
        Variables added to the sanitized environment.
    stdin : bytes, optional
        Data for the child's standard input (otherwise it reads from /dev/null).
    check : bool
        Raise :class:`CommandError` unless the child exited 0.
    what : str, optional
        Human name of the step, used in error messages.
    ticker : verifylib.runtime.progress.Ticker, optional
        Started by this call and stopped when the child ends: prints a progress line
        every few seconds, with the last ``[NN%]`` of the child's standard output (read
        as it arrives). The captured streams are the same with or without it.

    Returns
    -------
    RunResult
        The complete outcome.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``argv`` is empty.
    CommandError
        With ``check``, if the child did not exit normally with status 0.
    verifylib.runtime.contracts.UnknownSignalTable
        On an OS without a signal table (before anything is launched).
    """
    argv = [os.fspath(a) for a in argv]
    if not argv:
        raise ParametersInvalid("empty argv")
    # The child shares this process's kernel, so its signal numbers are this OS's (Linux
    # under the simulated Mac too): decoded and recorded by that table, whoever verifies.
    table = contracts.host_signal_table()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=sanitized_env(env_extra), shell=False,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    out, err, timed_out = _wait(proc, stdin, timeout, ticker)
    wall = time.monotonic() - t0
    rc = None if timed_out else proc.returncode
    result = RunResult(argv=argv, returncode=rc,
                       signal=None if timed_out else decode_signal(rc, table),
                       timed_out=timed_out, stdout=out or b"", stderr=err or b"", wall_s=wall,
                       cwd=None if cwd is None else str(Path(cwd)), signal_table=table)
    if check and not result.ok:
        raise CommandError(result, what or Path(argv[0]).name)
    return result


# Children :func:`run` is waiting for, in any thread: what :func:`kill_running` stops.
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def _wait(proc: subprocess.Popen, stdin: bytes | None, timeout: float | None,
          ticker: "progress.Ticker | None") -> tuple[bytes | None, bytes | None, bool]:
    """Wait for a child of :func:`run`: its two streams, and whether it timed out.

    The child is listed in :data:`_LIVE` meanwhile; on a timeout, or when the wait is
    interrupted, it is killed with its process group.
    """
    timed_out = False
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        if ticker is None:
            out, err = proc.communicate(input=stdin, timeout=timeout)
        else:
            out, err, timed_out = _communicate_with_ticker(proc, stdin, timeout, ticker)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    except BaseException:
        # Interrupted (or the waiting thread failed): the child runs in its own session,
        # so no terminal signal reaches it; it must not outlive the step that wanted it.
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    return out, err, timed_out


def kill_running() -> int:
    """Kill the process group of every child :func:`run` is still waiting for.

    For a step that runs children from worker threads (stage 01's concurrent builds): an
    interrupt reaches the main thread only, and the workers' children run in their own
    sessions, so the interrupted step kills them here before it re-raises. Each waiting
    :func:`run` then returns as for a killed child.

    Returns
    -------
    int
        How many children were signalled.
    """
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        _kill_group(proc)
    return len(procs)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill a timed-out child's whole process group (it was started in its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _communicate_with_ticker(proc: subprocess.Popen, stdin: bytes | None,
                            timeout: float | None, ticker: "progress.Ticker") -> tuple:
    """``proc.communicate`` that also shows the child's standard output to ``ticker``.

    Each stream is drained by its own thread (a full pipe would stall the child), the
    chunks are kept whole, and the ticker prints while the child runs. On timeout the
    child's process group is killed, as :func:`run` does. Returns ``(out, err, timed_out)``.
    """
    chunks: dict[str, list[bytes]] = {"out": [], "err": []}

    def drain(stream, name: str) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            chunks[name].append(chunk)
            if name == "out":
                ticker.output(chunk)

    readers = [threading.Thread(target=drain, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=drain, args=(proc.stderr, "err"), daemon=True)]
    for t in readers:
        t.start()
    ticker.start()
    try:
        if stdin is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin)
            except BrokenPipeError:
                pass
            proc.stdin.close()
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    finally:
        ticker.stop()
    for t in readers:
        t.join()
    return b"".join(chunks["out"]), b"".join(chunks["err"]), timed_out


def run_whisper_cli(argv: Sequence[str | os.PathLike], *, timeout: float,
                    cwd: str | os.PathLike | None = None,
                    env_extra: Mapping[str, str] | None = None) -> RunResult:
    """Run whisper-cli once for a gate, under the runtime contract.

    The argv is checked by :func:`verifylib.runtime.contracts.check_cli_argv` first: ``-np``,
    ``-ac`` and any processor count but 1 are refused before launch. Then the child runs
    through :func:`run_whisper_binary` (no shell, credential-free environment, both
    streams kept, the process group killed at the timeout, the launch recorded in the
    bound ledger). There is no retry: a crash or a timeout is the result.

    Parameters
    ----------
    argv : sequence
        The binary and its arguments.
    timeout : float
        Seconds before the run is killed. Required: a first Core ML run needs a generous
        value (on-device compilation), later runs a short one.
    cwd : path-like, optional
        Working directory.
    env_extra : mapping, optional
        Variables added to the sanitized environment.

    Returns
    -------
    RunResult
        With ``launch`` set when a ledger is bound.

    Raises
    ------
    verifylib.errors.ContractBroken
        If the argv breaks the contract (nothing is launched).
    verifylib.errors.ParametersInvalid
        If ``timeout`` is not a positive number.
    """
    _check_timeout(timeout, "whisper-cli")
    args = [os.fspath(a) for a in argv]
    contracts.check_cli_argv(args)
    return run_whisper_binary(args, timeout=timeout, cwd=cwd, env_extra=env_extra)


def _check_timeout(timeout, what: str) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ParametersInvalid(f"a {what} run needs a positive timeout, got {timeout!r}")


def _binary_path(program: str, cwd: str | os.PathLike | None) -> str:
    """Resolve the file ``program`` names the way the child's launch resolves it."""
    if os.sep not in program:
        found = shutil.which(program)
        if found is None:
            raise FileNotFoundError(f"no executable {program!r} on PATH")
        return found
    if cwd is not None and not os.path.isabs(program):
        return os.path.join(os.fspath(cwd), program)
    return program


def run_whisper_binary(argv: Sequence[str | os.PathLike], *, timeout: float,
                       cwd: str | os.PathLike | None = None,
                       env_extra: Mapping[str, str] | None = None) -> RunResult:
    """Launch any whisper.cpp binary once (whisper-bench, a probe) and record the launch.

    ``argv[0]`` is hashed right before the launch; the child runs through :func:`run`;
    when a ledger is bound (:func:`verifylib.runtime.ledger.bind`) the launch is appended to it
    before this function returns, and the result's ``launch`` holds the entry's citation.
    No whisper-cli argv contract is applied here: :func:`run_whisper_cli` adds it for
    whisper-cli gate runs. There is no retry.

    Parameters
    ----------
    argv : sequence
        The binary and its arguments.
    timeout : float
        Seconds before the run is killed (required, positive).
    cwd : path-like, optional
        Working directory.
    env_extra : mapping, optional
        Variables added to the sanitized environment.

    Returns
    -------
    RunResult
        With ``launch`` set when a ledger is bound.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``timeout`` is not a positive number.
    OSError
        If the binary cannot be read or launched (nothing is recorded then).
    """
    _check_timeout(timeout, "whisper.cpp")
    args = [os.fspath(a) for a in argv]
    if not args:
        raise ParametersInvalid("empty argv")
    binary_sha = sha256_file(_binary_path(args[0], cwd))
    started = ledger.utc_now()
    result = run(args, cwd=cwd, timeout=float(timeout), env_extra=env_extra)
    if ledger.active() is None:
        return result
    entry = ledger.append(args, binary_sha256=binary_sha, started_utc=started,
                          returncode=result.returncode, signal=result.signal,
                          timed_out=result.timed_out, stdout_sha256=result.stdout_sha256,
                          stderr_sha256=result.stderr_sha256)
    return dataclasses.replace(result, launch=ledger.citation(entry))


def run_record(result: RunResult) -> dict:
    """Build the JSON-able record of one run that the classifiers judge.

    Parameters
    ----------
    result : RunResult
        The run's outcome.

    Returns
    -------
    dict
        ``argv``, ``returncode`` (None on timeout), ``signal``, ``signal_table`` (the OS
        whose numbers ``signal`` was decoded by; absent when the result names none),
        ``timed_out``, ``wall_s``, the SHA-256 and length of both streams, and ``launch``
        (the ledger citation) when the run was recorded in a launch ledger. The streams
        themselves are stored beside it as evidence files.
    """
    return {"argv": list(result.argv), "returncode": result.returncode, "signal": result.signal,
            **({contracts.SIGNAL_TABLE_KEY: result.signal_table}
               if result.signal_table is not None else {}),
            "timed_out": result.timed_out, "wall_s": round(result.wall_s, 3),
            "stdout_sha256": result.stdout_sha256, "stderr_sha256": result.stderr_sha256,
            "stdout_bytes": len(result.stdout), "stderr_bytes": len(result.stderr),
            **({"launch": dict(result.launch)} if result.launch is not None else {})}
