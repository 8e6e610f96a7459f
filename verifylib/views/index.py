"""The batch index page written by ``verifylib run`` beside the per-model reports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from . import render


def page(rows: Iterable[Mapping], worst: str, report_name: str) -> str:
    """HTML of the batch index: one row per model, the worst verdict, the shared stylesheet.

    Parameters
    ----------
    rows : iterable of mapping
        Per model: ``name``, ``verdict`` (str), ``counts`` (status to number of gates),
        ``rel`` (run folder relative to the reports folder) and ``sha256`` of its receipt.
    worst : str
        The worst verdict of the batch.
    report_name : str
        File name of each run's report inside its run folder.

    Returns
    -------
    str
        A complete, script-free HTML document.
    """
    return render("batch_index.html.j2", rows=list(rows), worst=worst, report=report_name)
