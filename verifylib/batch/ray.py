"""``verifylib run --executor ray``: each model's audit is a task on a Ray cluster.

Ray is an optional extra (``pip install 'verifylib[ray]'``), imported only by the
functions that talk to a cluster; :func:`node_resources` and :func:`task_resources`
work without it.

What a node can physically run is what verifylib's capability check
(:mod:`verifylib.runtime.capabilities`) says about it, advertised as Ray custom resources named
after the capabilities (``macos``, ``macos_xcode``, ``macos_14_4``): start or join a
node with ``ray start ... --resources "$(verifylib ray-node-resources)"``. A Linux node
advertises none of them. With ``--require admissible`` a model's task asks for the
resources of every capability its required gates need (from the gate table, less the
gates its parameters switch off), so a Core ML audit lands only on a Mac that can run
all of it; without it, a task runs anywhere and a Linux node's run is honestly
INCOMPLETE. The resources act as labels: a task asks for a small share
(:data:`TASK_SHARE`), and how many audits a node runs at once is set by its CPUs (each
task reserves one).

Each node keeps its own caches (``$VERIFYLIB_CACHE`` there) and stages its run under a
folder of its own (:func:`default_node_root`). The published run directory goes back to
the driver as a stream (:mod:`verifylib.batch.run_stream`), never whole in memory: the task
is a Ray generator (``num_returns="streaming"``) that yields a header (model, run id, the
archive's size, the node), then the run's uncompressed tar
(:class:`verifylib.batch.archive.RunArchive`, read from the files as it is sent) in
chunks of :data:`CHUNK_BYTES`, then a trailer (chunk count, size, SHA-256); at most
:data:`STREAM_WINDOW` chunks per task wait unconsumed in the object store (Ray's generator
backpressure). The node deletes its copy before the trailer. The driver writes the chunks
to a staging file in the reports folder (``<reports>/<name>/.staging/<id>/run.tar``, with
an owner record, so a killed driver's file is removed like any staging folder), checks
them against the header and the trailer, verifies the unpacked run with
:func:`verifylib.evidence.receipt.verify` and publishes it
(:func:`verifylib.batch.archive.import_run`: never replacing a run); a run that does not
verify is not published. ``run.json`` says ``executor: {kind: ray, node, ray_node_id}``.

A task is never retried (``max_retries=0``): a worker or node that dies, before or
while its run streams back, turns its model's outcome into a
:class:`verifylib.batch.local.FailedRun` with the reason (recorded in the reports folder
and listed on its index, see :func:`verifylib.batch.local.failure_recorder`), and the
other models go on. On SIGINT or SIGTERM the driver cancels every task (a running audit
gets a KeyboardInterrupt: it stops its kernel and removes its staging folder), waits for
them, removes what it had received, and re-raises.

Parameter paths: a parameter file's paths are resolved on the driver. Paths inside
verifylib's own data folder (the shipped fixtures and parameter files) are rewritten to
the node's copy of it; any other path must exist on the node too (a shared filesystem,
or the same layout), else the node refuses the parameters and the model ends in ERROR
naming the path.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from verifylib import resources
from verifylib.batch.archive import RunImportRefused, plan_run_archive
from verifylib.batch.audit import executor_record, run_one
from verifylib.batch.run_stream import RunReceiver, StreamHeader, StreamTrailer
from verifylib.batch.signals import Interrupted, interrupt_pending, interrupts_raise
from verifylib.batch.staging import remove_stale_staging
from verifylib.errors import ParametersInvalid
from verifylib.evidence import gates
from verifylib.evidence.gates import Capability
from verifylib.params import Params, validate
from verifylib.runtime.capabilities import HostCapabilities, detect

# The share of a capability resource one audit asks for: the resources are labels (a
# node advertises 1 of each capability it has), CPUs bound the audits per node.
TASK_SHARE = 0.01
NODE_AMOUNT = 1.0
# CPUs reserved by one audit task.
TASK_CPUS = 1
# After an interrupt, how long cancelled tasks get to stop their kernels and remove
# their staging folders before they are killed.
CANCEL_GRACE_SECONDS = 60.0
# Size of the chunks a finished run streams back in. Large enough that a multi-GB run is
# a few hundred objects, small enough that a window of them is a few tens of MB.
CHUNK_BYTES = 8 * 1024 * 1024
# Chunks one task may have waiting in the object store before it pauses: what bounds
# the memory a returning run takes, whatever its size.
STREAM_WINDOW = 4


class RayUnavailable(ParametersInvalid):
    """Ray is not installed here, or the cluster cannot be reached.

    Exit 2: the command cannot do what it was asked, and nothing has run.
    """


def capability_resource(cap: Capability | str) -> str:
    """Return the Ray resource name of a capability: ``macos+xcode`` -> ``macos_xcode``.

    Ray resource names are identifiers by convention; the capability values are
    mapped mechanically so no name is listed twice.

    Parameters
    ----------
    cap : Capability or str
        A capability of the gate table.

    Returns
    -------
    str
        The lower-cased value with every run of other characters than ``0-9a-z`` made
        one ``_`` (none at either end).
    """
    return re.sub(r"[^0-9a-z]+", "_", Capability(cap).value.lower()).strip("_")


def node_resources(host: HostCapabilities | None = None) -> dict[str, float]:
    """Return the custom resources a Ray node on this host advertises: its capabilities.

    Parameters
    ----------
    host : HostCapabilities, optional
        The host (this one, detected, by default).

    Returns
    -------
    dict
        Resource name to amount, one per capability the host offers (``{}`` on Linux);
        give it to ``ray start --resources`` (``verifylib ray-node-resources`` prints it).
    """
    host = detect() if host is None else host
    return {capability_resource(c): NODE_AMOUNT for c in Capability
            if c is not Capability.ANY and host.has(c)}


def needed_capabilities(params: Params,
                        stages: Sequence[str] = gates.STAGES) -> list[Capability]:
    """List the capabilities a model's required gates need to run physically.

    From the gate table: every required, implemented gate of ``stages`` that the
    model's parameters do not switch off, less those any host offers.

    Parameters
    ----------
    params : Params
        The model's parameters (they may switch gates off).
    stages : sequence of str
        The stages the audit runs.

    Returns
    -------
    list of Capability
        In the table's order of capabilities.
    """
    needed = {gates.capability_of(g, params.data) for g in gates.GATES
              if g.required and g.implemented and g.stage in stages
              and gates.capability_of(g, params.data) is not Capability.ANY
              and gates.disabling_key(g, params.data) is None}
    return [c for c in Capability if c in needed]


def task_resources(params: Params, *, require_admissible: bool,
                   stages: Sequence[str] = gates.STAGES) -> dict[str, float]:
    """Return the custom resources one model's audit task asks for.

    Parameters
    ----------
    params : Params
        The model's parameters.
    require_admissible : bool
        ``--require admissible``: the task must land on a node that can run every
        required gate. Otherwise it asks for none and runs anywhere.
    stages : sequence of str
        The stages the task runs.

    Returns
    -------
    dict
        Resource name to the share asked for (:data:`TASK_SHARE`).
    """
    if not require_admissible:
        return {}
    return {capability_resource(c): TASK_SHARE for c in needed_capabilities(params, stages)}


def import_ray():
    """Import ray, or explain how to get it.

    Returns
    -------
    module
        The ``ray`` package.

    Raises
    ------
    RayUnavailable
        When the package is not installed.
    """
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("--executor ray needs the ray package: pip install "
                             f"'verifylib[ray]' (import failed: {exc})") from None
    return ray


def default_node_root() -> Path:
    """Return where a node stages the runs it audits before they go back to the driver.

    One folder per user on the node, so the staging a killed task left is removed by
    the next task there once its owner is provably gone.

    Returns
    -------
    Path
        ``<tempdir>/verifylib-ray-runs-<uid>``.
    """
    return Path(tempfile.gettempdir()) / f"verifylib-ray-runs-{os.getuid()}"


def _remap(node: Any, old: Path, new: Path) -> Any:
    """Return ``node`` with every absolute path under ``old`` moved under ``new``."""
    if isinstance(node, dict):
        return {k: _remap(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_remap(v, old, new) for v in node]
    if isinstance(node, str) and old != new and os.path.isabs(node):
        try:
            return str(new / Path(node).relative_to(old))
        except ValueError:
            return node
    return node


def params_on_node(spec: Mapping) -> Params:
    """Rebuild the parameters of a task as this node sees them (re-validated here).

    Absolute paths under the driver's ``data_root`` are moved under this node's.

    Parameters
    ----------
    spec : mapping
        The task's spec (see :func:`audit_task`).

    Returns
    -------
    Params
        The validated parameters.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        When a path does not exist on this node, or the pin is unknown to its verifylib.
    """
    here = resources.data_root()
    data = _remap(copy.deepcopy(spec["params"]["data"]), Path(spec["data_root"]), here)
    return validate(data, spec["params"]["origin"], here)


def audit_task(spec: Mapping) -> Iterator:
    """Run the Ray task: audit one model on this node and stream the published run back.

    A generator: Ray runs it with ``num_returns="streaming"``, and the driver reads it
    with :class:`verifylib.batch.run_stream.RunReceiver`.

    Parameters
    ----------
    spec : mapping
        ``params`` (``name``, ``data``, ``origin``), the driver's ``data_root``,
        ``stages``, ``node_root`` (None for :func:`default_node_root`) and
        ``chunk_bytes`` (:data:`CHUNK_BYTES` when absent).

    Yields
    ------
    dict, then bytes, then dict
        ``StreamHeader.to_json``, the archive's chunks, ``StreamTrailer.to_json``
        (:mod:`verifylib.batch.run_stream`).
    """
    import ray
    node = executor_record("ray", ray_node_id=ray.get_runtime_context().get_node_id())
    params = params_on_node(spec)
    root = Path(spec.get("node_root") or default_node_root())
    chunk_bytes = int(spec.get("chunk_bytes") or CHUNK_BYTES)
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(root)

    def log(line: str) -> None:
        print(f"[{params.name}] {line}", flush=True)

    # Ray cancels a running task by raising KeyboardInterrupt through the SIGINT
    # handler of the worker's main thread: under interrupts_raise, run_one stops its
    # kernel and removes its staging folder exactly as for a Ctrl-C at a terminal.
    with interrupts_raise():
        out = run_one(params, root, log=log, progress=False, stages=tuple(spec["stages"]),
                      executor=node)
    digest = hashlib.sha256()
    sent = chunks = 0
    try:
        archive = plan_run_archive(out.run_dir)
        yield StreamHeader(params.name, out.run_dir.name, out.verdict.value, node,
                           archive.size, chunk_bytes).to_json()
        for chunk in archive.chunks(chunk_bytes):
            digest.update(chunk)
            sent += len(chunk)
            chunks += 1
            yield chunk
    finally:
        # Before the trailer: once the driver has it, it may rely on the node's copy
        # being gone (and a cancelled or failed stream removes it all the same).
        shutil.rmtree(out.run_dir, ignore_errors=True)
        try:
            out.run_dir.parent.rmdir()
        except OSError:
            pass
    yield StreamTrailer(chunks, sent, digest.hexdigest()).to_json()


def _connect(ray, address: str | None) -> bool:
    """Connect this process to a cluster; True when this call did (and must disconnect)."""
    if ray.is_initialized():
        return False
    import threading
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        if address is None and not os.environ.get("RAY_ADDRESS"):
            # No cluster named: a Ray of this host alone, with its cores and its
            # capabilities, for this batch.
            ray.init(address="local", resources=node_resources(), include_dashboard=False,
                     log_to_driver=True)
        else:
            ray.init(address=address, log_to_driver=True)
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the same refusal
        where = address or os.environ.get("RAY_ADDRESS") or "this host"
        raise RayUnavailable(f"cannot start or reach the Ray cluster at {where}: "
                             f"{type(exc).__name__}: {exc}") from None
    finally:
        # ray.init installs a SIGTERM handler that exits at once; the batch's own
        # handlers (interrupts_raise) must stay, so that SIGTERM cancels the tasks.
        for s, h in saved.items():
            signal.signal(s, h)
    return True


def _failure_reason(exc: BaseException) -> str:
    """One line saying why a task produced no run."""
    cause = getattr(exc, "cause", None)
    if cause is not None and not isinstance(cause, type(exc)):
        text = f"the audit raised {type(cause).__name__}: {cause}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _feasible(need: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> bool:
    return any(all(n.get(k, 0.0) >= v for k, v in need.items()) for n in nodes)


def run_batch_ray(all_params: Sequence[Params], reports_root: Path, *,
                  address: str | None = None, require_admissible: bool = False,
                  stages: Sequence[str] = gates.STAGES, log: Callable[[str], None] = print,
                  on_outcome: Callable[[Any], None] | None = None,
                  node_root: str | Path | None = None, task: Callable | None = None,
                  chunk_bytes: int | None = None) -> list:
    """Audit the models as Ray tasks; verify and publish each returned run here.

    Parameters
    ----------
    all_params : sequence of Params
        One per model.
    reports_root : Path
        The driver's reports folder.
    address : str, optional
        The cluster; see :func:`verifylib.batch.local.run_batch`. Ignored when this
        process is already connected (``ray.init`` was called).
    require_admissible : bool
        Ask for the resources of the required gates (:func:`task_resources`).
    stages : sequence of str
        Stages each task runs.
    log : callable
        Receives the driver's lines (the tasks' own lines arrive through Ray's log
        forwarding, prefixed with the model name).
    on_outcome : callable, optional
        Called with each outcome as it is known; a :class:`FailedRun` after its failure
        record is in the reports folder and on its index.
    node_root : path-like, optional
        Staging folder on the nodes (:func:`default_node_root` by default).
    task : callable, optional
        A Ray remote generator function to run instead of :func:`audit_task` (the tests
        use one that kills its worker); it takes the same spec and yields the same
        stream.
    chunk_bytes : int, optional
        Size of the chunks a run streams back in (:data:`CHUNK_BYTES` by default).

    Returns
    -------
    list of RunOutcome or FailedRun
        In the order of ``all_params``.

    Raises
    ------
    RayUnavailable
        Ray is missing or the cluster cannot be reached (nothing has run).
    KeyboardInterrupt
        :class:`verifylib.batch.signals.Interrupted`: every task was cancelled.
    """
    from verifylib.batch.failures import failure_recorder
    ray = import_ray()
    on_outcome = failure_recorder(all_params, Path(reports_root),
                                  on_outcome or (lambda outcome: None), log)
    chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
    started = _connect(ray, address)
    batch = _Batch(ray, Path(reports_root), on_outcome, log)
    try:
        remote = task if task is not None else ray.remote(audit_task)
        batch.submit(remote, all_params, require_admissible=require_admissible, stages=stages,
                     node_root=node_root, chunk_bytes=chunk_bytes)
        batch.receive()
    except KeyboardInterrupt as exc:
        _cancel_all(ray, list(batch.streams))
        sig = interrupt_pending()
        if sig is not None and not isinstance(exc, Interrupted):
            # Ray's wait re-raises the handler's Interrupted as a bare KeyboardInterrupt;
            # the caller must still learn which signal it was (130 or 143).
            raise Interrupted(sig) from None
        raise
    finally:
        for receiver in batch.streams.values():
            receiver.discard()
        if started:
            ray.shutdown()
    return [batch.results[p.name] for p in all_params]


@dataclass
class _Batch:
    """The driver's side of a batch: the streams still being read, the outcomes known.

    ``streams`` maps each task's ObjectRefGenerator to its :class:`RunReceiver`;
    ``results`` each model's outcome, passed on to ``on_outcome`` as it is known.
    """

    ray: Any
    reports_root: Path
    on_outcome: Callable[[Any], None]
    log: Callable[[str], None]
    streams: dict = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)

    def _record(self, name: str, outcome: Any) -> None:
        self.results[name] = outcome
        self.on_outcome(outcome)

    def submit(self, remote, all_params: Sequence[Params], *, require_admissible: bool,
               stages: Sequence[str], node_root: str | Path | None, chunk_bytes: int) -> None:
        """Start the task of every model some node can run; the others fail at once."""
        from verifylib.batch.failures import FailedRun
        nodes = [dict(n.get("Resources", {})) for n in self.ray.nodes() if n.get("Alive")]
        for p in all_params:
            need = task_resources(p, require_admissible=require_admissible, stages=stages)
            if not _feasible(dict(need, CPU=TASK_CPUS), nodes):
                missing = sorted(need) or ["CPU"]
                self._record(p.name, FailedRun(
                    p.name, f"no node of the Ray cluster offers {missing}; start a node that "
                            "can with ray start --resources \"$(verifylib ray-node-resources)\"",
                    executor={"kind": "ray", "node": None}))
                continue
            spec = {"params": {"name": p.name, "data": p.data, "origin": p.origin},
                    "data_root": str(resources.data_root()), "stages": list(stages),
                    "node_root": None if node_root is None else str(node_root),
                    "chunk_bytes": chunk_bytes}
            gen = remote.options(num_cpus=TASK_CPUS, resources=need, max_retries=0,
                                 num_returns="streaming",
                                 _generator_backpressure_num_objects=STREAM_WINDOW,
                                 name=f"verifylib-audit-{p.name}").remote(spec)
            self.streams[gen] = RunReceiver(p.name, self.reports_root)
            self.log(f"[{p.name}] submitted to Ray"
                     + (f" (needs {', '.join(sorted(need))})" if need else ""))

    def receive(self) -> None:
        """Read the streams until every task's outcome is known."""
        while self.streams:
            # A generator is ready when its next item is in the object store (or it
            # has ended); each ready one gives one item per round, so runs returning
            # at the same time share the driver.
            ready, _ = self.ray.wait(list(self.streams), num_returns=1, timeout=1.0)
            for gen in ready:
                receiver = self.streams[gen]
                outcome = self._advance(gen, receiver)
                if outcome is not None:
                    receiver.discard()
                    self._record(receiver.name, outcome)

    def _advance(self, gen, receiver: RunReceiver) -> Any:
        # One item of a ready stream. Once the model's outcome is known (a published run
        # or a FailedRun) the stream is dropped and the outcome returned; else None.
        try:
            ref = next(gen)
        except StopIteration:
            # Streams are dropped at their trailer: one that ends here is short.
            del self.streams[gen]
            return _failed(receiver, receiver.unfinished())
        try:
            item = self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a dead worker or task is this model's ERROR
            del self.streams[gen]
            return _failed(receiver, _failure_reason(exc))
        del ref  # the chunk's object is freed once the driver holds the bytes
        starting = receiver.header is None
        try:
            outcome = receiver.take(item)
        except (RunImportRefused, OSError) as exc:
            del self.streams[gen]
            # Not read further. Not forced either: the interrupt lets the task's
            # cleanup remove the node's copy of the run.
            self.ray.cancel(gen, force=False)
            return _failed(receiver, str(exc))
        if starting:
            self.log(f"[{receiver.name}] returning from {receiver.node}: "
                     f"{receiver.header.size} bytes in chunks of {receiver.header.chunk_bytes}")
        if outcome is not None:
            del self.streams[gen]
            self.log(f"[{receiver.name}] received {receiver.received} bytes in "
                     f"{receiver.chunks} chunk(s) from {receiver.node}; verified and published")
        return outcome


def _failed(receiver: RunReceiver, reason: str):
    """Return the :class:`FailedRun` of a task whose stream brought no run."""
    from verifylib.batch.failures import FailedRun
    return FailedRun(receiver.name, reason, receiver.node, executor=_node_record(receiver))


def _node_record(receiver: RunReceiver) -> dict:
    """Return the executor record of a failed task: the node's own when its header came."""
    if receiver.header is not None:
        return dict(receiver.header.node)
    return {"kind": "ray", "node": None}


def _cancel_all(ray, streams: list) -> None:
    """Cancel every task; give running audits time to clean up, then kill the rest."""
    if not streams:
        return
    try:
        for gen in streams:
            ray.cancel(gen, force=False)
        # A task's completion ref is ready once its cleanup (kernel, staging) is done;
        # the generator itself may be "ready" earlier, with chunks still unread.
        done = {gen.completed(): gen for gen in streams}
        _, left = ray.wait(list(done), num_returns=len(done), timeout=CANCEL_GRACE_SECONDS)
        for ref in left:
            ray.cancel(done[ref], force=True)
    except Exception:  # noqa: BLE001 - the interrupt goes on whatever the cluster says
        pass
