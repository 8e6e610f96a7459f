"""Glue for the stage notebooks: parameters to a run directory, and one audit call.

The parameters cell becomes a run directory, and one call audits the stage, or reads it
back when the run directory is a published run.

A stage notebook does two things with verifylib: :func:`setup` (validate the parameters,
open the run directory) and :func:`audit` (the stage's one audit call). Pointed at a
published run (a ``run_dir`` holding ``receipt.json``), neither writes anything: the
parameters are the run's own and the stage report is rebuilt read-only through
:func:`verifylib.open_run`, so the notebook can be re-executed to explore a run without
touching it. The stage module is handed in by the notebook (this module never imports a
stage), and nothing heavy is imported here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from verifylib import canonical, resources
from verifylib.errors import EvidenceInvalid, ParametersInvalid
from verifylib.evidence.layout import new_run_id
from verifylib.evidence.runs import is_published, open_run
from verifylib.evidence.stage_report import StageReport
from verifylib.params import Params, from_notebook
from verifylib.stages.context import init_run_dir


def _quiet_library_chatter() -> None:
    # Weight-loading progress bars, the missing-ipywidgets notice and transformers'
    # deprecation chatter say nothing about the model under audit; in the report they
    # only bury the evidence. Warnings that do matter (e.g. coremltools' untested torch
    # version) are recorded as build facts by the stage that meets them.
    import os
    import warnings

    # transformers reads both variables when it is first imported (its log level, and its
    # progress bars follow huggingface_hub's switch), so setting them here is enough and
    # spares the stages that never load a model the half second that importing it costs.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    warnings.filterwarnings("ignore", message="IProgress not found")


def _show_stage_reports_as_tables() -> None:
    # A stage's report, the last value of its cell, displays as its gate table. Registered
    # with IPython here, by the driver, so the record type knows nothing of the views.
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from verifylib.evidence.stage_report import StageReport
    from verifylib.views.gates import stage_table
    shell.display_formatter.formatters["text/html"].for_type(StageReport, stage_table)


def setup(namespace: Mapping[str, Any], stage: str) -> tuple[Params, Path]:
    """Validate a notebook's parameters and open its run directory.

    Pointed at a published run, nothing is created or written: the parameters are the
    run's own (parameters injected by papermill must be the same ones), and :func:`audit`
    reads the stage back instead of running it.

    Parameters
    ----------
    namespace : mapping
        The notebook's ``globals()`` after the parameters cell (and papermill's injection).
    stage : str
        The notebook's stage, shown in the first output line.

    Returns
    -------
    params : Params
        Validated parameters.
    run_dir : Path
        The run directory. Without a ``run_dir`` parameter a new folder
        ``./reports/<name>/<run-id>`` of the current directory is created, so a notebook
        also runs alone.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If the parameters are invalid, or differ from those a published ``run_dir`` was
        made with.
    """
    _quiet_library_chatter()
    _show_stage_reports_as_tables()
    run_dir = namespace.get("run_dir")
    published = namespace.get(PUBLISHED_RUN)
    if published:
        # A notebook a run published: it reads that run wherever the folder was copied,
        # and never starts one.
        return _published(namespace, stage, _published_run_dir(run_dir, str(published)))
    if run_dir and is_published(run_dir):
        return _published(namespace, stage, Path(run_dir).resolve())
    params = from_notebook(namespace)
    if not run_dir:
        run_dir = resources.reports_dir() / params.name / new_run_id()
    run_dir = Path(run_dir).resolve()
    init_run_dir(run_dir, params)
    print(f"stage {stage} · model {params.name} · run directory {run_dir}")
    return params, run_dir


PUBLISHED_RUN = "published_run"
"""The variable a published notebook's parameters cell sets to its run's id (see
:func:`make_reopenable`); ``run_dir`` is then relative to the notebook's folder."""

PUBLISHED_RUN_DIR = ".."
"""A published notebook's ``run_dir``: the run folder holding its ``notebooks/`` folder."""


def _published_run_dir(run_dir: Any, run_id: str) -> Path:
    """Find the run a published notebook belongs to, from the kernel's working folder.

    JupyterLab starts the kernel in the notebook's folder, where ``..`` is the run; a
    papermill run started in the run folder itself finds it there.
    """
    here = Path.cwd()
    candidates = [(here / str(run_dir or PUBLISHED_RUN_DIR)).resolve(), here]
    renamed = None
    for folder in (c for c in candidates if is_published(c)):
        if folder.name == run_id:
            return folder
        if renamed is None and _run_id_of(folder) == run_id:
            renamed = folder
    if renamed is not None:
        # The run itself, copied or moved under another name: its receipt names it, and it
        # is accepted when it verifies as it is (a copy's folder name carries no evidence).
        try:
            open_run(renamed, verify=True, allow_simulated=True)
        except EvidenceInvalid as exc:
            raise ParametersInvalid(
                f"this notebook belongs to the published run {run_id}, found in {renamed} "
                f"under another name, which does not verify: {exc}") from None
        return renamed
    raise ParametersInvalid(
        f"this notebook belongs to the published run {run_id}, which is not at "
        f"{candidates[0]} or {here}: open it inside its run's notebooks/ folder (or run "
        f"papermill with --cwd <run>/notebooks); it never starts an audit of its own")


def _run_id_of(folder: Path) -> str | None:
    """Return the run id a published run's receipt records (None for a malformed one)."""
    try:
        return open_run(folder).run_id
    except EvidenceInvalid:
        return None


def make_reopenable(run_dir: str | os.PathLike, run_id: str) -> list[Path]:
    """Point a run's executed notebooks at the run itself, relative to their folder.

    papermill injected the staging folder's absolute path as ``run_dir``; once published
    that folder is gone, and "Run all" would start a new audit there. Each notebook's
    injected parameters instead say ``run_dir = ".."`` and name the run
    (:data:`PUBLISHED_RUN`), so :func:`setup` reads the run read-only wherever it was copied.
    Called before the receipt is written, so ``verify`` covers the rewritten files.

    Parameters
    ----------
    run_dir : path-like
        The run (its ``notebooks/*.ipynb``).
    run_id : str
        Its id (the folder name it is published under).

    Returns
    -------
    list of Path
        The notebooks rewritten.
    """
    import nbformat

    done = []
    for path in sorted(Path(run_dir, "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        changed = _add_published_note(nb, run_id)
        changed = point_at_run(nb, [
            f'run_dir = "{PUBLISHED_RUN_DIR}"  # this notebook\'s run: its folder\'s parent',
            f"{PUBLISHED_RUN} = {run_id!r}  # read back read-only, never re-run"]) or changed
        if changed:
            canonical.atomic_write_bytes(path, nbformat.writes(nb).encode("utf-8"))
            done.append(path)
    return done


def point_at_run(nb: Any, lines: list[str]) -> bool:
    """Give a notebook's injected parameters new ``run_dir`` and :data:`PUBLISHED_RUN` lines.

    Parameters
    ----------
    nb : nbformat.NotebookNode
        An executed stage notebook (papermill tags its parameters ``injected-parameters``).
    lines : list of str
        The new assignments, appended after the parameters kept.

    Returns
    -------
    bool
        True when the notebook had injected parameters (and was changed).
    """
    import re

    changed = False
    for cell in nb.cells:
        if "injected-parameters" not in cell.get("metadata", {}).get("tags", []):
            continue
        kept = [line for line in cell.source.split("\n")
                if not re.match(rf"^(run_dir|{PUBLISHED_RUN}) = ", line)]
        cell.source = "\n".join(kept + lines)
        changed = True
    return changed


PUBLISHED_NOTE_TAG = "verifylib-published-note"
"""The tag of the first cell of a published notebook: how to explore it without touching it."""


def published_note(run_id: str) -> str:
    """Return the first cell a published notebook opens with (Markdown).

    Parameters
    ----------
    run_id : str
        The run's id.

    Returns
    -------
    str
    """
    return (f"**This notebook is part of the published run `{run_id}`, and verified as it "
            "is.** Running or saving it here changes the run, and `verifylib verify` then "
            "rejects it (JupyterLab saves on its own within two minutes).\n\n"
            "To explore it, open a working copy instead, outside the run:\n\n"
            f"```bash\nverifylib lab path/to/{run_id}\n```\n\n"
            "Its notebooks read this run back read-only; their checkpoints and autosaves "
            "stay in the working folder.")


def _add_published_note(nb: Any, run_id: str) -> bool:
    """Put :func:`published_note` first in ``nb`` (once); True when it was added."""
    import nbformat
    first = nb.cells[0] if nb.cells else None
    if first is not None and PUBLISHED_NOTE_TAG in first.get("metadata", {}).get("tags", []):
        return False
    note = nbformat.v4.new_markdown_cell(published_note(run_id))
    note.metadata["tags"] = [PUBLISHED_NOTE_TAG]
    # No fixed id: nbformat gives each cell a fresh one; the run's receipt covers the bytes.
    nb.cells.insert(0, note)
    return True


def _published(namespace: Mapping[str, Any], stage: str, run_dir: Path) -> tuple[Params, Path]:
    run = open_run(run_dir)
    if namespace.get("name") is not None:
        # Parameters given with the run (papermill -f) must be the ones it was made with:
        # a notebook must never show one run's evidence under another's parameters.
        given = from_notebook(namespace)
        if canonical.sha256_bytes(canonical.dumps(given.data)) != run.params_sha256:
            raise ParametersInvalid(f"{run_dir} was made with other parameters "
                                    f"({run.name!r}); leave the parameters out to read it "
                                    f"with its own")
    print(f"stage {stage} · model {run.name} · published run {run_dir} "
          f"(read-only: the stage is read back, not run)")
    return run.params, run_dir


def audit(stage_module: Any, params: Params, run_dir: str | os.PathLike,
          **kwargs: Any) -> StageReport:
    """Make the stage notebook's one audit call: run the stage, or read a published run's.

    Parameters
    ----------
    stage_module : module
        The stage (``verifylib.stages.<stage>``, imported by the notebook), with its
        ``STAGE`` name and ``run(params, run_dir, **kwargs)``.
    params : Params
        From :func:`setup`.
    run_dir : path-like
        From :func:`setup`.
    **kwargs
        Passed to the stage's ``run`` (not used for a published run).

    Returns
    -------
    StageReport
        The stage's report; for a published run the one
        :meth:`verifylib.evidence.runs.Run.report` rebuilds from its evidence
        (digest-checked), writing nothing.
    """
    if is_published(run_dir):
        return open_run(run_dir).report(stage_module.STAGE)
    return stage_module.run(params, run_dir, **kwargs)
