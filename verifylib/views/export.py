"""Display of stage 02_export."""

from __future__ import annotations

from verifylib.views import html_object


def show(report):
    """Display the export facts of a stage report as an escaped HTML table.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.export.run`.

    Returns
    -------
    IPython.display.HTML
        The facts table, or a note that the export gates did not run.
    """
    return html_object("export.html.j2", style=True, facts=report.facts)
