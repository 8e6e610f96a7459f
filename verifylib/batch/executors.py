"""The executor registry: how ``verifylib run`` chooses where a batch of audits runs.

Each executor is one :class:`Executor` entry, named by its ``--executor`` value and
pointing at the function that runs a batch (``"module:function"``, imported only when that
executor is chosen, so the driver never loads Ray unless asked). The entry also says which
batch options the executor takes; :func:`check_options` refuses the others before any work,
and :func:`run_batch` validates the batch and hands it to the chosen entry. The two built-in
entries are ``local`` (:mod:`verifylib.batch.local`: one model after another, or ``--jobs N``
worker processes) and ``ray`` (:mod:`verifylib.batch.ray`); :func:`register` adds another,
as papermill registers its engines.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from verifylib.errors import ParametersInvalid
from verifylib.evidence import gates
from verifylib.params import Params, check_distinct_names

if TYPE_CHECKING:
    # Only named in annotations: importing it loads the whole audit (kernels, notebook
    # formats, the report), which ``check_options`` must not wait for.
    from verifylib.batch.failures import Outcome

# Options every executor receives; the others only where its entry lists them.
_COMMON_OPTIONS = ("stages", "log", "on_outcome")


@dataclass(frozen=True)
class Executor:
    """One entry of the registry.

    Attributes
    ----------
    name : str
        The ``--executor`` value.
    target : str
        ``"module:function"`` of the batch function, called as
        ``function(all_params, reports_root, **options)``.
    options : tuple of str
        The batch options it takes beyond ``stages``, ``log`` and ``on_outcome``
        (``jobs``, ``progress``, ``address``, ``require_admissible``, ``node_root``).
    many_jobs : bool
        Whether ``--jobs`` above 1 means something to it.
    """

    name: str
    target: str
    options: tuple[str, ...] = ()
    many_jobs: bool = False

    def load(self) -> Callable[..., list[Outcome]]:
        """Import the batch function.

        Returns
        -------
        callable
            The function named by :attr:`target`.
        """
        module, _, function = self.target.partition(":")
        return getattr(importlib.import_module(module), function)


EXECUTORS: dict[str, Executor] = {}


def register(entry: Executor) -> Executor:
    """Add an executor to the registry (a later entry of the same name replaces it).

    Parameters
    ----------
    entry : Executor
        The entry.

    Returns
    -------
    Executor
        The entry, registered.
    """
    EXECUTORS[entry.name] = entry
    return entry


register(Executor("local", "verifylib.batch.local:run_local", ("jobs", "progress"),
                  many_jobs=True))
register(Executor("ray", "verifylib.batch.ray:run_batch_ray",
                  ("address", "require_admissible", "node_root")))


# What a batch runs when no subset is given; the command line always runs all stages
# (the test suite narrows this default to keep its batches short).
DEFAULT_STAGES: tuple[str, ...] = gates.STAGES


class BatchOptionInvalid(ParametersInvalid):
    """A batch option is unusable (``--jobs 0``, ``--address`` without Ray, unknown stage)."""


def check_stages(stages: Sequence[str]) -> tuple[str, ...]:
    """Validate a stage subset: known names, each once, in the table's order.

    Parameters
    ----------
    stages : sequence of str
        Stage names.

    Returns
    -------
    tuple of str

    Raises
    ------
    BatchOptionInvalid
        For an unknown, repeated or out-of-order stage, or an empty subset.
    """
    stages = tuple(stages)
    if not stages:
        raise BatchOptionInvalid("no stage to run")
    unknown = [s for s in stages if s not in gates.STAGES]
    if unknown:
        raise BatchOptionInvalid(f"unknown stage(s) {unknown}; stages are {list(gates.STAGES)}")
    order = [gates.STAGES.index(s) for s in stages]
    if order != sorted(set(order)):
        raise BatchOptionInvalid(f"stages must be distinct and in the order {list(gates.STAGES)}")
    return stages


def check_options(executor: str, jobs: int, address: str | None) -> None:
    """Refuse an unusable combination of ``--executor``, ``--jobs`` and ``--address``.

    Parameters
    ----------
    executor : str
        ``local`` or ``ray``.
    jobs : int
        Models at once on this host.
    address : str or None
        The Ray cluster.

    Raises
    ------
    BatchOptionInvalid
        Naming the option.
    """
    if executor not in EXECUTORS:
        raise BatchOptionInvalid(f"unknown executor {executor!r}; choose from {list(EXECUTORS)}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise BatchOptionInvalid(f"--jobs must be a positive integer, got {jobs!r}")
    entry = EXECUTORS[executor]
    if "address" not in entry.options and address is not None:
        raise BatchOptionInvalid("--address needs --executor ray")
    if not entry.many_jobs and jobs != 1:
        raise BatchOptionInvalid("--jobs is for the local executor; a Ray cluster runs as "
                                 "many audits at once as its nodes have CPUs")


def run_batch(all_params: Sequence[Params], reports_root: Path, *, executor: str = "local",
              jobs: int = 1, address: str | None = None, require_admissible: bool = False,
              stages: Sequence[str] | None = None, progress: bool = True,
              log: Callable[[str], None] = print,
              on_outcome: Callable[[Outcome], None] | None = None,
              node_root: str | Path | None = None) -> list[Outcome]:
    """Audit several models and return their outcomes in the order given.

    Parameters
    ----------
    all_params : sequence of Params
        Validated parameters, one per model (distinct names).
    reports_root : Path
        The reports folder; each run is published to ``<root>/<name>/<run-id>``.
    executor : {"local", "ray"}
        This host, or a Ray cluster.
    jobs : int
        Local executor: how many models are audited at once.
    address : str, optional
        Ray executor: the cluster (``auto``, ``HOST:6379`` or ``ray://HOST:10001``);
        without it, ``RAY_ADDRESS`` or else a one-machine Ray started for this batch.
    require_admissible : bool
        Ray executor: each model's task asks for the capabilities its required gates
        need (:func:`verifylib.batch.ray.task_resources`).
    stages : sequence of str, optional
        The stages to run, in order (:data:`DEFAULT_STAGES`, all, by default). A subset
        leaves the other stages' gates without a record (ERROR in the receipt): for
        tests and trials.
    progress : bool
        Show papermill's progress bar (one model at a time only: bars of several
        models would overwrite each other).
    log : callable
        Receives progress lines (prefixed with ``[<model>]`` when several run at once).
    on_outcome : callable, optional
        Called with each outcome as soon as it is known (to print it, to sign the run);
        a :class:`FailedRun` after its failure record is written and the index
        rebuilt (:func:`failure_recorder`), whichever executor ran it.
    node_root : path-like, optional
        Ray executor: where nodes stage their runs (a per-user temporary folder by
        default).

    Returns
    -------
    list of RunOutcome or FailedRun

    Raises
    ------
    BatchOptionInvalid
        For an unusable option (nothing has run).
    verifylib.errors.ParametersInvalid
        For models whose names collide (also in case only), or, for the local executor,
        no usable folder for the kernels' sockets
        (:class:`~verifylib.batch.kernel.SocketFolderUnusable`); nothing has run.
    verifylib.batch.ray.RayUnavailable
        When Ray is not installed or the cluster cannot be reached.
    KeyboardInterrupt
        :class:`verifylib.batch.signals.Interrupted` under ``interrupts_raise``; every
        worker has been stopped and nothing more is published.
    """
    stages = check_stages(DEFAULT_STAGES if stages is None else stages)
    check_options(executor, jobs, address)
    check_distinct_names(all_params, Path(reports_root))
    on_outcome = on_outcome or (lambda outcome: None)
    entry = EXECUTORS[executor]
    if executor == "local":
        # The stage kernels start on this host: a socket folder the OS refuses is found
        # now, not when the first kernel fails to bind.
        from verifylib.batch.kernel import socket_folder
        socket_folder()
    given = {"stages": stages, "log": log, "on_outcome": on_outcome, "jobs": jobs,
             "progress": progress, "address": address,
             "require_admissible": require_admissible, "node_root": node_root}
    options = {k: given[k] for k in _COMMON_OPTIONS + entry.options}
    return entry.load()(all_params, Path(reports_root), **options)
