"""``verifylib run --executor ray``: each model's audit is a task on a Ray cluster.

Ray is an optional extra (``pip install 'verifylib[ray]'``), imported only by the
functions that talk to a cluster; :func:`node_resources` and :func:`task_resources`
work without it.

What a node can physically run is what verifylib's capability check
(:mod:`verifylib.capabilities`) says about it, advertised as Ray custom resources named
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
folder of its own (:func:`default_node_root`); the published run directory goes back to
the driver as a tar (:func:`verifylib.orchestrate.pack_run`) and is deleted on the node.
The driver verifies it with :func:`verifylib.receipt.verify` and publishes it into the
reports folder (:func:`verifylib.orchestrate.import_run`); a run that does not verify is
not published. ``run.json`` says ``executor: {kind: ray, node, ray_node_id}``.

A task is never retried (``max_retries=0``): a worker or node that dies turns its
model's outcome into a :class:`verifylib.executors.FailedRun` with the reason, and the
other models go on. On SIGINT or SIGTERM the driver cancels every task (a running audit
gets a KeyboardInterrupt: it stops its kernel and removes its staging folder), waits for
them, and re-raises.

Parameter paths: a parameter file's paths are resolved on the driver. Paths inside
verifylib's own data folder (the shipped fixtures and parameter files) are rewritten to
the node's copy of it; any other path must exist on the node too (a shared filesystem,
or the same layout), else the node refuses the parameters and the model ends in ERROR
naming the path.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import gates, resources
from .capabilities import HostCapabilities, detect
from .errors import ParametersInvalid
from .gates import Capability
from .orchestrate import (Interrupted, RunImportRefused, _interrupt_pending, executor_record,
                          import_run, interrupts_raise, pack_run, remove_stale_staging,
                          run_one)
from .params import Params, validate

# The share of a capability resource one audit asks for: the resources are labels (a
# node advertises 1 of each capability it has), CPUs bound the audits per node.
TASK_SHARE = 0.01
NODE_AMOUNT = 1.0
# CPUs reserved by one audit task.
TASK_CPUS = 1
# After an interrupt, how long cancelled tasks get to stop their kernels and remove
# their staging folders before they are killed.
CANCEL_GRACE_SECONDS = 60.0


class RayUnavailable(ParametersInvalid):
    """Ray is not installed here, or the cluster cannot be reached (exit 2: the command
    cannot do what it was asked, and nothing has run)."""


def capability_resource(cap: Capability | str) -> str:
    """The Ray resource name of a capability: ``macos+xcode`` -> ``macos_xcode``.

    Ray resource names are identifiers by convention; the capability values are
    mapped mechanically so no name is listed twice.

    Parameters
    ----------
    cap : Capability or str
        A capability of the gate table.

    Returns
    -------
    str
    """
    return re.sub(r"[^0-9a-z]+", "_", Capability(cap).value.lower()).strip("_")


def node_resources(host: HostCapabilities | None = None) -> dict[str, float]:
    """The custom resources a Ray node on this host advertises: its capabilities.

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


def needed_capabilities(params: Params, stages: Sequence[str] = gates.STAGES) -> list[Capability]:
    """The capabilities a model's required gates need to run physically.

    From the gate table: every required, implemented gate of ``stages`` that the
    model's parameters do not switch off, less those any host offers.

    Returns
    -------
    list of Capability
        In the table's order of capabilities.
    """
    needed = {g.capability for g in gates.GATES
              if g.required and g.implemented and g.stage in stages
              and g.capability is not Capability.ANY
              and gates.disabling_key(g, params.data) is None}
    return [c for c in Capability if c in needed]


def task_resources(params: Params, *, require_admissible: bool,
                   stages: Sequence[str] = gates.STAGES) -> dict[str, float]:
    """The custom resources one model's audit task asks for.

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
    """Where a node stages the runs it audits before they go back to the driver.

    One folder per user on the node, so the staging a killed task left is removed by
    the next task there once its owner is provably gone.
    """
    return Path(tempfile.gettempdir()) / f"verifylib-ray-runs-{os.getuid()}"


def _remap(node: Any, old: Path, new: Path) -> Any:
    """``node`` with every absolute path under ``old`` moved under ``new``."""
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
    """The parameters of a task, as this node sees them (re-validated here).

    Parameters
    ----------
    spec : mapping
        The task's spec (see :func:`audit_task`).

    Returns
    -------
    Params

    Raises
    ------
    verifylib.params.ParameterError
        When a path does not exist on this node, or the pin is unknown to its verifylib.
    """
    here = resources.data_root()
    data = _remap(copy.deepcopy(spec["params"]["data"]), Path(spec["data_root"]), here)
    return validate(data, spec["params"]["origin"], here)


def audit_task(spec: Mapping) -> dict:
    """The Ray task: audit one model on this node and return the published run.

    Parameters
    ----------
    spec : mapping
        ``params`` (``name``, ``data``, ``origin``), the driver's ``data_root``,
        ``stages`` and ``node_root`` (None for :func:`default_node_root`).

    Returns
    -------
    dict
        ``name``, ``run_id``, ``verdict`` (as this node judged it; the driver
        re-verifies), ``node`` (the executor record) and ``archive`` (the tar).
    """
    import ray
    node = executor_record("ray", ray_node_id=ray.get_runtime_context().get_node_id())
    params = params_on_node(spec)
    root = Path(spec.get("node_root") or default_node_root())
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
    try:
        archive = pack_run(out.run_dir)
    finally:
        shutil.rmtree(out.run_dir, ignore_errors=True)
        try:
            out.run_dir.parent.rmdir()
        except OSError:
            pass
    return {"name": params.name, "run_id": out.run_dir.name, "verdict": out.verdict.value,
            "node": node, "archive": archive}


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
    lines = [l.strip() for l in str(text).splitlines() if l.strip()]
    return lines[0] if lines else type(exc).__name__


def _feasible(need: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> bool:
    return any(all(n.get(k, 0.0) >= v for k, v in need.items()) for n in nodes)


def run_batch_ray(all_params: Sequence[Params], reports_root: Path, *,
                  address: str | None = None, require_admissible: bool = False,
                  stages: Sequence[str] = gates.STAGES, log: Callable[[str], None] = print,
                  on_outcome: Callable[[Any], None] | None = None,
                  node_root: str | Path | None = None, task: Callable | None = None) -> list:
    """Audit the models as Ray tasks; verify and publish each returned run here.

    Parameters
    ----------
    all_params : sequence of Params
        One per model.
    reports_root : Path
        The driver's reports folder.
    address : str, optional
        The cluster; see :func:`verifylib.executors.run_batch`. Ignored when this
        process is already connected (``ray.init`` was called).
    require_admissible : bool
        Ask for the resources of the required gates (:func:`task_resources`).
    stages : sequence of str
        Stages each task runs.
    log : callable
        Receives the driver's lines (the tasks' own lines arrive through Ray's log
        forwarding, prefixed with the model name).
    on_outcome : callable, optional
        Called with each outcome as it is known.
    node_root : path-like, optional
        Staging folder on the nodes (:func:`default_node_root` by default).
    task : callable, optional
        A Ray remote function to run instead of :func:`audit_task` (the tests use one
        that kills its worker); it takes the same spec and returns the same dict.

    Returns
    -------
    list of RunOutcome or FailedRun
        In the order of ``all_params``.

    Raises
    ------
    RayUnavailable
        Ray is missing or the cluster cannot be reached (nothing has run).
    KeyboardInterrupt
        :class:`verifylib.orchestrate.Interrupted`: every task was cancelled.
    """
    from .executors import FailedRun
    ray = import_ray()
    on_outcome = on_outcome or (lambda outcome: None)
    started = _connect(ray, address)
    refs: dict = {}
    results: dict[str, Any] = {}
    try:
        remote = task if task is not None else ray.remote(audit_task)
        nodes = [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]
        for p in all_params:
            need = task_resources(p, require_admissible=require_admissible, stages=stages)
            if not _feasible(dict(need, CPU=TASK_CPUS), nodes):
                missing = sorted(need) or ["CPU"]
                fail = FailedRun(p.name, f"no node of the Ray cluster offers {missing}; start "
                                         "a node that can with ray start --resources "
                                         "\"$(verifylib ray-node-resources)\"")
                results[p.name] = fail
                on_outcome(fail)
                continue
            spec = {"params": {"name": p.name, "data": p.data, "origin": p.origin},
                    "data_root": str(resources.data_root()), "stages": list(stages),
                    "node_root": None if node_root is None else str(node_root)}
            ref = remote.options(num_cpus=TASK_CPUS, resources=need, max_retries=0,
                                 name=f"verifylib-audit-{p.name}").remote(spec)
            refs[ref] = p.name
            log(f"[{p.name}] submitted to Ray"
                + (f" (needs {', '.join(sorted(need))})" if need else ""))
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=1.0)
            for ref in ready:
                name = refs.pop(ref)
                try:
                    res = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a dead worker or task is this model's ERROR
                    outcome = FailedRun(name, _failure_reason(exc))
                else:
                    node = (res.get("node") or {}).get("node") if isinstance(res, dict) else None
                    try:
                        if not isinstance(res, dict) or res.get("name") != name:
                            raise RunImportRefused(f"{name}: the task returned another "
                                                   "model's result")
                        outcome = import_run(res["archive"], name, reports_root)
                    except RunImportRefused as exc:
                        outcome = FailedRun(name, str(exc), node)
                results[name] = outcome
                on_outcome(outcome)
    except KeyboardInterrupt as exc:
        _cancel_all(ray, list(refs))
        sig = _interrupt_pending()
        if sig is not None and not isinstance(exc, Interrupted):
            # Ray's wait re-raises the handler's Interrupted as a bare KeyboardInterrupt;
            # the caller must still learn which signal it was (130 or 143).
            raise Interrupted(sig) from None
        raise
    finally:
        if started:
            ray.shutdown()
    return [results[p.name] for p in all_params]


def _cancel_all(ray, refs: list) -> None:
    """Cancel every task; give running audits time to clean up, then kill the rest."""
    if not refs:
        return
    try:
        for ref in refs:
            ray.cancel(ref, force=False)
        # A cancelled task's result is ready once its cleanup (kernel, staging) is done.
        _, left = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_SECONDS)
        for ref in left:
            ray.cancel(ref, force=True)
    except Exception:  # noqa: BLE001 - the interrupt goes on whatever the cluster says
        pass
