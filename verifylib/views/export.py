"""Display of stage 02_export."""

from __future__ import annotations

from verifylib.evidence.reading import fact_rows
from verifylib.views import render, show_html


def html(report) -> str:
    """Render the export facts of a stage report as an escaped HTML table.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.export.run`.

    Returns
    -------
    str
        The facts table, or a note that the export gates did not run, opening with the
        shared stylesheet.
    """
    # The typed facts give their own rows, in the order the table has always shown them.
    return render("export.html.j2", style=True, facts=dict(fact_rows(report.facts)))


def show(report) -> None:
    """Display the export facts of a stage report (:func:`html`) in the running notebook.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.export.run`.
    """
    show_html(html(report))
