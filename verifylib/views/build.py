"""Display of stage 01_build."""

from __future__ import annotations

from verifylib.views import html_object


def show(report):
    """Display the build facts of a stage report as an escaped HTML table.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.build.run`.

    Returns
    -------
    IPython.display.HTML
        The facts table, or a note that the build gates did not run.
    """
    return html_object("build.html.j2", style=True, facts=report.facts)
