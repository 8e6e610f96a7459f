"""Batches of audits: one model after another, ``--jobs N`` at once on this host, or on Ray.

:func:`run_batch` is what ``verifylib run`` calls with its parameter files. It runs each
model's audit with :func:`verifylib.batch.audit.run_one` and returns one outcome per
model, in the order given:

* ``jobs=1`` (the default): in this process, one model after another.
* ``jobs=N``: up to N worker processes on this host (``python -m verifylib.batch.local``),
  one per model. A process of its own per model rather than a thread: each audit starts
  notebook kernels and handles SIGINT/SIGTERM in its main thread, and a worker that dies
  takes only its own model with it. Every line a worker prints is passed on prefixed
  with ``[<model>]``. Models that share a build (the same ``runtime`` section) do not
  start it together: the first of them runs stage 01 alone and the others start when its
  stage 01 has ended, so the shared build happens once and the others find it cached
  (the build cache's own locks make the same thing safe across separate
  ``verifylib run`` processes).
* ``executor="ray"``: each audit is a task on a Ray cluster
  (:mod:`verifylib.batch.ray`, imported only then).

A model whose audit raised (in this process, one model after another), whose worker
died, or whose returned run was refused, becomes a :class:`FailedRun` (the ERROR
outcome, with the reason) while the others finish. It has no receipt to be listed by,
so the batch publishes a failure record for it, ``<reports>/<name>/.failed/<id>.json``
(:func:`verifylib.evidence.failures.publish_failure`: model, parameter file, ERROR, reason,
executor and node, time), and rebuilds the reports index at once, which lists the
record beside the published runs (:func:`failure_recorder`).

Interrupts: the driver runs under :func:`verifylib.batch.signals.interrupts_raise`. On
SIGINT or SIGTERM it forwards the same signal to every worker (each then stops its
kernel and removes its staging folder, as a single ``verifylib run`` does), waits for
them, and re-raises; models not yet started never start.

The workers are launched here with :class:`subprocess.Popen` rather than through
:func:`verifylib.runtime.runner.run`: a worker's output is streamed line by line while it runs
and it is sent signals, whereas ``runner.run`` collects a tool's output once it has
ended. The runner's conventions still hold: a list argv, no shell, the runner's
credential-free environment.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Sequence

from verifylib import canonical
from verifylib.batch.audit import RunOutcome, executor_record, record_published, run_one
from verifylib.batch.failures import FailedRun, Outcome, failed_run, failure_recorder
from verifylib.batch.signals import (
    Interrupted,
    interrupt_pending,
    interrupts_raise,
    signals_deferred,
)
from verifylib.batch.staging import remove_stale_staging
from verifylib.evidence import gates
from verifylib.params import Params
from verifylib.runtime.runner import sanitized_env

# The stage whose end lets the models sharing a build start (it builds whisper.cpp).
BUILD_STAGE = "01_build"
# After an interrupt, how long the workers get to stop their kernels and remove their
# staging folders before they are killed (a kernel shutdown takes a few seconds at most).
STOP_GRACE_SECONDS = 60.0


def run_local(all_params: Sequence[Params], reports_root: Path, *, stages: tuple[str, ...],
              log: Callable[[str], None], on_outcome: Callable[[Outcome], None], jobs: int = 1,
              progress: bool = True) -> list[Outcome]:
    """Run the ``local`` executor: audit the models on this host (see the module docstring).

    Parameters
    ----------
    all_params : sequence of Params
        Validated parameters, one per model.
    reports_root : Path
        The reports folder.
    stages : tuple of str
        The stages to run, in order.
    log : callable
        Receives progress lines.
    on_outcome : callable
        Called with each outcome as soon as it is known.
    jobs : int
        How many models at once (worker processes when above 1).
    progress : bool
        Show papermill's progress bar (one model at a time only).

    Returns
    -------
    list of RunOutcome or FailedRun
        In the order given.
    """
    if jobs == 1 or len(all_params) <= 1:
        return _run_here(all_params, reports_root, stages, progress, log, on_outcome)
    return _run_jobs(all_params, reports_root, jobs, stages, log, on_outcome)


def _run_here(all_params: Sequence[Params], reports_root: Path, stages: tuple[str, ...],
              progress: bool, log: Callable[[str], None],
              on_outcome: Callable[[Outcome], None]) -> list[Outcome]:
    """Audit the models in this process, one after another (see the module docstring)."""
    record = executor_record("local")
    on_outcome = failure_recorder(all_params, reports_root, on_outcome, log)
    outcomes: list[Outcome] = []
    for p in all_params:
        try:
            out = run_one(p, reports_root, log=log, progress=progress, stages=stages)
        except Exception as exc:  # noqa: BLE001 - reported as this model's ERROR outcome
            if interrupt_pending() is not None:
                # An error raised while cleaning up after an interrupt must not turn the
                # interrupt into one model's failure and start the next model.
                raise Interrupted(interrupt_pending()) from exc
            out = failed_run(p.name, exc, node=record["node"], executor=dict(record))
            if out.traceback is None:
                traceback.print_exc()  # the whole story on stderr, as a --jobs worker prints it
        outcomes.append(out)
        on_outcome(out)
    return outcomes


def build_share_key(params: Params) -> str:
    """Return the key that groups models sharing whisper.cpp builds.

    Models with equal keys use the same whisper.cpp builds (their ``runtime`` section).
    Paths in the section are stored resolved (:mod:`verifylib.params`), so equal keys
    mean the same source; a difference in ``jobs`` alone makes the key differ, which
    only costs the wait (the build cache's locks still keep the builds apart).

    Parameters
    ----------
    params : Params
        A model's parameters.

    Returns
    -------
    str
        The canonical JSON of the ``runtime`` section.
    """
    return canonical.dumps(params.data["runtime"]).decode("utf-8")


# ----------------------------------------------------------------------------- jobs driver

def worker_command() -> list[str]:
    """Return the program a ``--jobs`` worker runs: this Python, this verifylib.

    Returns
    -------
    list of str
        The argv before the worker's own arguments. The tests replace it with one that
        dies on purpose.
    """
    return [sys.executable, "-m", "verifylib.batch.local"]


class _Worker:
    """One worker process auditing one model, and the threads that read it."""

    def __init__(self, params: Params, spec: dict, events: "queue.Queue"):
        self.name = params.name
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [*worker_command(), "--worker", str(write_fd)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=sanitized_env({"PYTHONUNBUFFERED": "1"}), pass_fds=(write_fd,),
                # A session of its own: a Ctrl-C at the terminal reaches the driver only,
                # which forwards it; every worker gets exactly one signal, from one place.
                start_new_session=True, shell=False)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self.threads = [
            threading.Thread(target=self._lines, args=(self.proc.stdout, "out", events),
                             daemon=True),
            threading.Thread(target=self._lines, args=(self.proc.stderr, "err", events),
                             daemon=True),
            threading.Thread(target=self._events, args=(read_fd, events), daemon=True),
        ]
        for t in self.threads:
            t.start()
        threading.Thread(target=self._feed_and_wait, args=(spec, events), daemon=True).start()

    def _lines(self, stream, kind: str, events) -> None:
        for raw in iter(stream.readline, b""):
            events.put((kind, self.name, raw.decode("utf-8", "replace").rstrip("\r\n")))
        stream.close()

    def _events(self, fd: int, events) -> None:
        with os.fdopen(fd, "rb") as f:
            for raw in f:
                try:
                    events.put(("event", self.name, json.loads(raw)))
                except ValueError:
                    events.put(("err", self.name, f"(unreadable worker event {raw!r})"))

    def _feed_and_wait(self, spec: dict, events) -> None:
        # The spec goes through stdin (a thread of its own: a large one must not block the
        # driver); "exit" is queued only after everything the worker wrote was read.
        try:
            self.proc.stdin.write(json.dumps(spec).encode("utf-8"))
            self.proc.stdin.close()
        except OSError:
            pass
        code = self.proc.wait()
        # The event pipe is the worker's alone and ends with it. Its stdout and stderr are
        # inherited by the kernels it starts, so a kernel that outlived it (it was killed)
        # would hold them open: their last lines get a moment, not a wait without end.
        stdout_reader, stderr_reader, events_reader = self.threads
        events_reader.join()
        stdout_reader.join(timeout=5)
        stderr_reader.join(timeout=5)
        events.put(("exit", self.name, code))

    def signal(self, signum: int) -> None:
        try:
            os.kill(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker leads its own group
        except ProcessLookupError:
            pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def _waits_for(all_params: Sequence[Params], stages: tuple[str, ...]) -> dict[str, str]:
    """Map each model whose build another model makes to that model (the first sharing it)."""
    leaders: dict[str, str] = {}
    for p in all_params:
        leaders.setdefault(build_share_key(p), p.name)
    return {p.name: leaders[build_share_key(p)] for p in all_params
            if BUILD_STAGE in stages and leaders[build_share_key(p)] != p.name}


def _stop_workers(running: dict[str, _Worker], events: "queue.Queue",
                  handle: Callable[[str, str, object], None], signum: int,
                  reports_root: Path) -> None:
    """Pass an interrupt on to the workers; kill those still running after the grace time.

    Their lines are still relayed and their published runs still recorded while they stop.
    """
    for w in running.values():
        w.signal(signum)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while running and time.monotonic() < deadline:
        try:
            kind, name, payload = events.get(timeout=0.5)
        except queue.Empty:
            continue
        if kind == "exit":
            running.pop(name, None)
        elif kind in ("out", "err"):
            handle(kind, name, payload)
        elif kind == "event":
            for path in payload.get("published", []):
                record_published(Path(path))
            if "result" in payload:
                record_published(Path(payload["result"]["run_dir"]))
    for w in running.values():
        w.kill()
    if running:
        # What a killed worker staged is removed now that its owner is provably gone.
        for w in running.values():
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        remove_stale_staging(reports_root)


def _run_jobs(all_params: Sequence[Params], reports_root: Path, jobs: int,
              stages: tuple[str, ...], log: Callable[[str], None],
              on_outcome: Callable[[Outcome], None]) -> list[Outcome]:
    """Audit the models in up to ``jobs`` worker processes (see the module docstring)."""
    record = executor_record("local", jobs=jobs)
    on_outcome = failure_recorder(all_params, reports_root, on_outcome, log)
    waits_for = _waits_for(all_params, stages)
    built: set[str] = set()
    pending = list(all_params)
    running: dict[str, _Worker] = {}
    results: dict[str, Outcome] = {}
    failures: dict[str, str] = {}
    tails: dict[str, list[str]] = {}
    tracebacks: dict[str, str] = {}
    events: "queue.Queue" = queue.Queue()

    def handle(kind: str, name: str, payload) -> None:
        if kind == "out":
            log(f"[{name}] {payload}")
            sys.stdout.flush()  # progress of several models is read as it happens
        elif kind == "err":
            tails.setdefault(name, []).append(payload)
            del tails[name][:-20]
            print(f"[{name}] {payload}", file=sys.stderr, flush=True)
        elif kind == "event":
            if payload.get("stage_done") == BUILD_STAGE:
                built.add(name)
            if "result" in payload:
                r = payload["result"]
                out = RunOutcome(name, Path(r["run_dir"]), gates.Verdict(r["verdict"]),
                                 Path(r["report"]), r.get("stage_seconds", {}))
                results[name] = out
                record_published(out.run_dir)
                on_outcome(out)
            if "error" in payload:
                failures[name] = payload["error"]
                if payload.get("traceback"):
                    tracebacks[name] = payload["traceback"]
            for path in payload.get("published", []):
                record_published(Path(path))
        elif kind == "exit":
            running.pop(name, None)
            built.add(name)  # whatever happened, the models waiting for it may go
            if name not in results:
                why = failures.get(name) or "; ".join(t for t in tails.get(name, [])[-3:] if t)
                fail = FailedRun(name, f"worker {_describe_exit(payload)}"
                                       + (f": {why}" if why else ""), record["node"],
                                 executor=dict(record), traceback=tracebacks.get(name))
                results[name] = fail
                on_outcome(fail)

    try:
        while pending or running:
            for p in list(pending):
                if len(running) >= jobs:
                    break
                lead = waits_for.get(p.name)
                if lead is not None and lead not in built:
                    continue
                pending.remove(p)
                spec = {"params": {"name": p.name, "data": p.data, "origin": p.origin,
                                   "base_dir": str(p.base_dir)},
                        "reports": str(reports_root), "stages": list(stages),
                        "executor": record}
                # A signal held back until the worker is in `running`: one started but
                # not yet listed would never be told to stop.
                with signals_deferred():
                    running[p.name] = _Worker(p, spec, events)
            try:
                handle(*events.get(timeout=0.5))
            except queue.Empty:
                pass
    except KeyboardInterrupt as exc:
        _stop_workers(running, events, handle, getattr(exc, "signum", signal.SIGINT),
                      reports_root)
        raise
    return [results[p.name] for p in all_params]


# ----------------------------------------------------------------------------- worker side

def _worker_main(argv: Sequence[str]) -> int:
    """Run a ``--jobs`` worker: audit the one model described on stdin.

    Progress lines go to stdout; structured events (a stage ended, the result, an
    interrupt with what it had published) go as JSON lines to the file descriptor
    given after ``--worker``.
    """
    if len(argv) != 2 or argv[0] != "--worker":
        print("usage: python -m verifylib.batch.local --worker FD (started by verifylib run)",
              file=sys.stderr)
        return 2
    events = os.fdopen(int(argv[1]), "w", encoding="utf-8", buffering=1)

    def emit(obj: dict) -> None:
        events.write(json.dumps(obj) + "\n")
        events.flush()

    spec = json.loads(sys.stdin.buffer.read())
    sp = spec["params"]
    params = Params(name=sp["name"], data=sp["data"], origin=sp["origin"],
                    base_dir=Path(sp["base_dir"]))
    with interrupts_raise() as scope:
        try:
            # The driver starts a worker while it holds SIGINT and SIGTERM back (see
            # _run_jobs), and a child inherits that mask: left blocked, the signal the
            # driver forwards would never arrive, here or in the kernels started from
            # here. Unblocked once the handlers are in place, so one sent meanwhile
            # arrives now.
            if hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
            out = run_one(params, Path(spec["reports"]),
                          log=lambda line: print(line, flush=True), progress=False,
                          stages=tuple(spec["stages"]), executor=spec["executor"],
                          on_stage_done=lambda stage: emit({"stage_done": stage}))
        except KeyboardInterrupt as exc:
            sig = getattr(exc, "signum", None) or scope.signum or signal.SIGINT
            emit({"interrupted": int(sig), "published": [str(p) for p in scope.published]})
            return 128 + int(sig)
        except Exception as exc:  # noqa: BLE001 - reported as this model's ERROR outcome
            fail = failed_run(params.name, exc, node=None, executor=None)
            if fail.traceback is None:
                traceback.print_exc()
            emit({"error": fail.reason, "traceback": fail.traceback})
            return 1
    emit({"result": {"run_dir": str(out.run_dir), "verdict": out.verdict.value,
                     "report": str(out.report), "stage_seconds": out.stage_seconds}})
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
