"""How the report shows what the stage notebooks printed: as a document, not a transcript.

The executed notebooks keep their outputs as the kernels wrote them. The report rewrites a
copy of each output for reading:

- printed text (stdout and stderr alike: a build's warnings are not errors) is shown as
  output, one ``<pre>`` per cell, its carriage-return redraws (tqdm bars) collapsed to the
  last drawing, and folded into ``<details>`` beyond :data:`FOLD_LINES` lines;
- the line each stage prints first (stage, model, run directory) is dropped: the stage's
  heading says it;
- links a view made from its notebook to a file of the run (``../evidence/…``) are
  rebased to the report's place at the run's root (:func:`rebase_links`);
- absolute paths of the audit host are written relative to the run (``./``) or by the
  name the report's host facts define (:func:`host_paths`), so a copied run reads the same
  and the page does not carry the host's folders.

Written by hand because it is the report's own policy on its own outputs; nbconvert's
preprocessors (which run next) sanitize and render the result.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Iterable

FOLD_LINES = 12
"""Printed lines shown open; a longer log is folded (its first line is the summary)."""

STAGE_LINE_PREFIX = "stage "
"""Start of the line :func:`verifylib.notebook.setup` prints (``stage 01_build · model …``)."""


def host_paths(run_dir: str | os.PathLike,
               cache: str | os.PathLike | None) -> list[tuple[str, str]]:
    """Return the host's absolute paths a report replaces, and what replaces each.

    Parameters
    ----------
    run_dir : path-like
        The run directory as the kernels saw it (the staging folder while auditing).
    cache : path-like or None
        The cache folder the audit used.

    Returns
    -------
    list of (str, str)
        ``(absolute path, replacement)``, longest first so a nested path wins: the run
        directory becomes ``.``, the cache ``$CACHE``, the Python environment ``$PYTHON``
        and the home folder ``~``.
    """
    pairs = [(str(Path(run_dir).absolute()), "."), (sys.prefix, "$PYTHON"),
             (str(Path.home()), "~")]
    if cache is not None:
        pairs.append((str(Path(cache).absolute()), "$CACHE"))
    pairs = [(a, b) for a, b in pairs if a not in ("", "/")]
    return sorted(pairs, key=lambda ab: len(ab[0]), reverse=True)


def relative(text: str, paths: Iterable[tuple[str, str]]) -> str:
    """Replace each host path in ``text`` by its name (see :func:`host_paths`)."""
    for absolute, name in paths:
        text = text.replace(absolute, name)
    return text


def collapse_redraws(text: str) -> str:
    """Keep the last drawing of every carriage-return-redrawn line (tqdm's bars)."""
    from verifylib.runtime.progress import last_drawing

    return "\n".join(last_drawing(line) for line in text.split("\n"))


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def _log_html(text: str) -> str:
    from verifylib.views import render

    lines = text.rstrip("\n").split("\n")
    summary = lines[0].strip()[:120] if len(lines) > FOLD_LINES else None
    return render("log.html.j2", text="\n".join(lines), summary=summary, lines=len(lines))


_NOTEBOOK_LINK = re.compile(r'(\s(?:src|href)=")\.\./')


def rebase_links(html: str) -> str:
    """Rebase a view's links to run files from its notebook's folder to the run's root.

    Parameters
    ----------
    html : str
        A view's HTML output, its run links made by :func:`verifylib.views.run_link`.

    Returns
    -------
    str
        The same HTML with ``src="../x"`` and ``href="../x"`` written ``"x"``.
    """
    return _NOTEBOOK_LINK.sub(r"\1", html)


def rewrite_outputs(cell, paths: list[tuple[str, str]]) -> None:
    """Rewrite one cell's outputs for the report, in place (see the module docstring).

    Parameters
    ----------
    cell : nbformat.NotebookNode
        A code cell of a copy of an executed notebook.
    paths : list of (str, str)
        From :func:`host_paths`.
    """
    import nbformat

    printed: list[str] = []
    kept = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            # The kernel sends a bar's redraws as separate writes: joined first, collapsed
            # after.
            printed.append(_text(out.get("text", "")))
            continue
        data = out.get("data", {})
        for mime in ("text/plain", "text/html"):
            if mime in data:
                data[mime] = relative(_text(data[mime]), paths)
        if "text/html" in data:
            data["text/html"] = rebase_links(data["text/html"])
        if out.get("output_type") == "error":
            out["traceback"] = [relative(_text(t), paths) for t in out.get("traceback", [])]
            out["evalue"] = relative(_text(out.get("evalue", "")), paths)
        kept.append(out)
    lines = [line for line in collapse_redraws("".join(printed)).split("\n")
             if not (line.lstrip().startswith(STAGE_LINE_PREFIX) and " · " in line)]
    text = relative("\n".join(lines), paths).strip("\n")
    logs = []
    if text.strip():
        logs = [nbformat.v4.new_output("display_data",
                                       data={"text/html": _log_html(text), "text/plain": text})]
    # Printed text first: a stage prints while it works and displays its views at the end.
    cell["outputs"] = logs + kept
