"""Display of verifylib results: every piece of HTML comes from a Jinja2 template.

The templates live in ``verifylib/views/templates/`` and are rendered with autoescaping,
so a value from a run (a transcript, a log line, a reason) can only ever appear as text.
One stylesheet, ``verifylib.css``, serves the notebooks (as a ``<style>`` block emitted
once by each displayed output), the audit report (included by the nbconvert template) and
the batch index page.

Each stage has its own view module (``build``, ``export``, ``canary``, ``parity``, ``wer``,
``placement``), and the cross-run comparison has ``compare``::

    from verifylib.views import parity as view
    view.show(report)

The view contract, the same in every module:

- ``show(result, ...)`` displays the result in the running notebook, its HTML through
  ``IPython.display`` and its charts through matplotlib, and returns None, whatever the
  result holds (a stage whose gates did not run is displayed as a note saying why). A
  notebook cell ends with ``view.show(report)``, and nothing is echoed a second time as the
  cell's value. The other functions that display (``parity.attribution``,
  ``compare.show_figure``) display and return None as well.
- A caller that needs the HTML itself, as text (the audit report, ``verifylib compare``, a
  test), calls the module function that returns it as a ``str``: ``build.html`` and
  ``export.html`` (what their ``show`` displays), ``gates.stage_table`` and
  ``gates.receipt_summary``, ``compare.fragment`` and ``compare.page``, ``index.page``.
- ``*_plot(...)`` functions return the matplotlib figure they drew (None when there is
  nothing to draw): ``compare``'s draw off-screen for its page (``compare.show_figure``
  displays one), ``parity``'s draw with pyplot and are shown as they are drawn.

Numbers shared by the comparison's sentences and its page are formatted by
:mod:`verifylib.views.formats`. ``tests/unit/test_views.py`` checks the contract on every
view module.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

TEMPLATES = Path(__file__).resolve().parent / "templates"
"""Folder of the view templates and of the shared stylesheet."""

STYLESHEET = "verifylib.css"
"""File name of the shared stylesheet inside :data:`TEMPLATES`."""


def number(value: Any) -> str:
    """Format a measured value for a table: floats to six significant digits.

    Parameters
    ----------
    value : any
        A number or any other value.

    Returns
    -------
    str
        ``inf``/``nan`` spelled as Python does, other floats as ``%.6g``, None (nothing
        measured) as a dash, the rest as ``str``.
    """
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return str(value)
        return f"{value:.6g}"
    return str(value)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        # Strings rendered from_string are HTML too; the stylesheet (.css) is included raw
        # because escaping would break selectors and quotes while adding no safety.
        autoescape=select_autoescape(enabled_extensions=("html", "htm", "j2"),
                                     default_for_string=True, default=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["number"] = number
    return env


ENV = _environment()
"""The shared Jinja2 environment (autoescaping, strict about undefined names)."""


def render(name: str, **context: Any) -> str:
    """Render one view template.

    Parameters
    ----------
    name : str
        Template file name inside :data:`TEMPLATES`, e.g. ``"gates.html.j2"``.
    **context
        Template variables. ``style`` (default False) asks a fragment to open with the
        shared ``<style>`` block; pass it for the first HTML of a notebook output.

    Returns
    -------
    str
        The rendered HTML, every interpolated value escaped.
    """
    context.setdefault("style", False)
    return ENV.get_template(name).render(**context)


def stylesheet() -> str:
    """Return the text of the shared stylesheet ``verifylib.css``.

    Returns
    -------
    str
        The stylesheet.
    """
    return (TEMPLATES / STYLESHEET).read_text(encoding="utf-8")


def style_block() -> str:
    """Return the ``<style>`` block a notebook output opens with (as the views emit it).

    Returns
    -------
    str
        The rendered ``style.html.j2``.
    """
    return render("style.html.j2")


def strip_style(fragment: str) -> str:
    """Remove the views' ``<style>`` blocks from an HTML output.

    The report carries the stylesheet once in its page head, and its sanitizer would show a
    ``<style>`` block inside an output as text. Removed: the exact block the views emit
    now, and the block an output opens with when it is the views' (its class and the
    stylesheet's first line), so a run rendered again after the stylesheet changed loses
    its older copy too; no other markup of an output is touched.

    Parameters
    ----------
    fragment : str
        A ``text/html`` output of a notebook.

    Returns
    -------
    str
    """
    block = style_block()
    fragment = fragment.replace(block, "")
    head, closing = block.split("\n", 2)[:2], block.rstrip().rsplit("\n", 1)[-1]
    if len(head) == 2 and fragment.startswith(head[0] + "\n" + head[1]):
        end = fragment.find(closing)
        if end != -1:
            fragment = fragment[end + len(closing):].lstrip("\n")
    return fragment


RUN_FROM_NOTEBOOK = "../"
"""A run's root as a link from a stage notebook's output (notebooks sit in ``notebooks/``)."""


def run_link(path: str) -> str:
    """Return a link, from a stage notebook's output, to a file of its run.

    The executed notebooks live one folder below the run, so a view links up; the report,
    which sits at the run's root, rebases such links
    (:func:`verifylib.views.transcript.rebase_links`).

    Parameters
    ----------
    path : str
        The file's path relative to the run directory (as an evidence reference records it).

    Returns
    -------
    str
        The relative link.
    """
    return RUN_FROM_NOTEBOOK + path


def show_html(fragment: str) -> None:
    """Display an HTML string in the running notebook.

    Parameters
    ----------
    fragment : str
        HTML rendered by :func:`render` (escaped).
    """
    from IPython.display import HTML, display
    display(HTML(fragment))


def display_html(name: str, **context: Any) -> None:
    """Render a template and display it as HTML in the running notebook.

    Parameters
    ----------
    name : str
        Template file name inside :data:`TEMPLATES`.
    **context
        Template variables, as for :func:`render`.
    """
    show_html(render(name, **context))
