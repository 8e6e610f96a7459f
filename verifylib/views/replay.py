"""Display of a replay (:class:`verifylib.replay.claims.ReplayResult`).

The claim table comes first (claim, REPRODUCED / DIFFERS / NOT_REPLAYABLE, what was
re-derived, the difference or the reason, the recorded and the replayed values side by
side), then what ``verify`` found and the replay's facts. The page is one self-contained
file with the report's stylesheet; all HTML comes from ``replay*.html.j2``.
"""

from __future__ import annotations

import os
from pathlib import Path

from verifylib.views import render, show_html

PAGE = "replay.html"
"""File name of the page a replay writes."""


def _context(result) -> dict:
    counts = result.counts()
    facts = [("run", result.run_dir), ("verdict (re-verified)", result.verdict),
             ("claims", ", ".join(f"{k} {v}" for k, v in counts.items())),
             ("replay wall time", f"{result.seconds:.1f} s"),
             ("scratch run", result.work_dir or "none"),
             *((f"host {k}", v) for k, v in sorted(result.host.items()))]
    return {"r": result, "result": "PASSED" if result.passed else "FAILED", "facts": facts}


def fragment(result) -> str:
    """Return the replay's HTML for a notebook (stylesheet first).

    Parameters
    ----------
    result : ReplayResult
        The replay.

    Returns
    -------
    str
    """
    return render("fragment.html.j2", style=True) + render("replay_body.html.j2",
                                                           **_context(result))


def page(result) -> str:
    """Return the whole self-contained page.

    Parameters
    ----------
    result : ReplayResult
        The replay.

    Returns
    -------
    str
    """
    return render("replay.html.j2", **_context(result))


def write(result, out_dir: str | os.PathLike) -> Path:
    """Write ``replay.html`` into ``out_dir`` through a staging file renamed into place.

    Parameters
    ----------
    result : ReplayResult
        The replay.
    out_dir : path-like
        The output folder.

    Returns
    -------
    Path
        The page.
    """
    from verifylib.canonical import atomic_write_bytes

    path = Path(out_dir) / PAGE
    atomic_write_bytes(path, page(result).encode("utf-8"))
    return path


def show(result) -> None:
    """Display the replay in the running notebook and return None.

    Parameters
    ----------
    result : ReplayResult
        The replay.
    """
    show_html(fragment(result))
