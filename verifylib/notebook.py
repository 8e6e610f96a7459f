"""Glue for the stage notebooks: one call turns the parameters cell into a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from . import resources
from .params import Params, from_notebook
from .stage import init_run_dir, new_run_id


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


def setup(namespace: Mapping[str, Any], stage: str) -> tuple[Params, Path]:
    """Validate a notebook's parameters and open its run directory.

    Parameters
    ----------
    namespace : mapping
        The notebook's ``globals()`` after the parameters cell (and papermill's injection).
    stage : str
        The notebook's stage, shown in the first output line.

    Returns
    -------
    (Params, Path)
        Validated parameters and the run directory. Without a ``run_dir`` parameter a new
        folder ``./reports/<name>/<run-id>`` of the current directory is created, so a
        notebook also runs alone.
    """
    _quiet_library_chatter()
    params = from_notebook(namespace)
    run_dir = namespace.get("run_dir")
    if not run_dir:
        run_dir = resources.reports_dir() / params.name / new_run_id()
    run_dir = Path(run_dir).resolve()
    init_run_dir(run_dir, params)
    print(f"stage {stage} · model {params.name} · run directory {run_dir}")
    return params, run_dir
