"""The index page of a reports folder, written by ``verifylib run`` beside the reports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from verifylib.views import render


def page(rows: Iterable[Mapping], worst: str | None, report_name: str, *, failed: int = 0,
         unresolved: int = 0) -> str:
    """HTML of the index: one row per published run or failed audit, the worst verdict.

    Parameters
    ----------
    rows : iterable of mapping
        Each model's entries, oldest first. A published run (``kind`` ``run``):
        ``name``, ``verdict`` (str), ``counts`` (status to number of gates), ``rel``
        (run folder relative to the reports folder) and ``sha256`` of its receipt. A
        failed audit (``kind`` ``failed``): ``name``, ``verdict`` (``ERROR``),
        ``reason``, ``time``, ``parameters``, ``executor``, ``node`` (each None when
        the record is unreadable), ``rel`` (the failure record), ``sha256`` of the
        record and ``later`` (the folder of a later published run of the model, or None).
    worst : str or None
        The worst verdict of the published runs (None when there is none).
    report_name : str
        File name of each run's report inside its run folder.
    failed : int
        Failed audits listed.
    unresolved : int
        Failed audits of which no later run of the model is published.

    Returns
    -------
    str
        A complete, script-free HTML document.
    """
    rows = list(rows)
    return render("batch_index.html.j2", rows=rows, worst=worst, report=report_name,
                  report_full=report_name.replace(".html", "-full.html"),
                  runs=sum(r["kind"] == "run" for r in rows),
                  models=len({r["name"] for r in rows}), failed=failed,
                  unresolved=unresolved)
