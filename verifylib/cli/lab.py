"""``verifylib lab RUN``: explore a published run in JupyterLab without touching it.

A published run is verified as it is, byte for byte, and JupyterLab saves an open notebook
on its own within two minutes, writing ``.ipynb_checkpoints`` beside it. So the run's
notebooks are opened as copies in a working folder outside the run
(``<cache>/lab/<run-id>/`` unless ``--work`` names another). Each copy's parameters name
the run by its absolute path, so its cells read the run back read-only
(:func:`verifylib.notebook.setup`); checkpoints and autosaves land in the working folder.
A copy already there is kept (it holds the explorer's own cells) unless it belongs to
another run.

JupyterLab itself is started on that folder as a child process whose output goes to this
terminal (its address and token are for the user to read), with the same credential-free
environment as every child process (:func:`verifylib.runtime.runner.sanitized_env`).

Why hand-written: JupyterLab opens folders, not "a run read-only"; the copying and the
rewriting of the parameters cell are this suite's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from verifylib import canonical, resources
from verifylib.errors import EvidenceInvalid, ParametersInvalid

__all__ = ["LabFolder", "prepare", "lab_argv", "cli_main"]

LAB_NOTE_TAG = "verifylib-lab-note"
"""The tag of the first cell of a working copy (it replaces the published notebook's note)."""


@dataclass(frozen=True)
class LabFolder:
    """A working folder for exploring one published run.

    Attributes
    ----------
    run_dir : Path
        The published run (absolute).
    run_id : str
        Its id, from its receipt.
    work : Path
        The working folder JupyterLab opens.
    copied : tuple of str
        Notebooks copied from the run now.
    kept : tuple of str
        Notebooks already in the working folder, kept as the explorer left them.
    """

    run_dir: Path
    run_id: str
    work: Path
    copied: tuple[str, ...]
    kept: tuple[str, ...]


def _note(run_id: str, run_dir: Path) -> str:
    return (f"**A working copy of a notebook of the published run `{run_id}`.** It reads "
            f"the run at `{run_dir}` read-only: run, edit and save here freely; the run "
            "itself is never written. Its checkpoints and autosaves stay in this folder.")


def _working_copy(source: Path, run_id: str, run_dir: Path) -> bytes:
    """Return ``source``'s notebook as a working copy that reopens ``run_dir`` by path."""
    import nbformat

    from verifylib.notebook import PUBLISHED_NOTE_TAG, PUBLISHED_RUN, point_at_run

    nb = nbformat.read(source, as_version=4)
    nb.cells = [c for c in nb.cells
                if PUBLISHED_NOTE_TAG not in c.get("metadata", {}).get("tags", [])]
    point_at_run(nb, [f"run_dir = {str(run_dir)!r}  # the published run, read back read-only",
                      f"{PUBLISHED_RUN} = {run_id!r}"])
    note = nbformat.v4.new_markdown_cell(_note(run_id, run_dir))
    note.metadata["tags"] = [LAB_NOTE_TAG]
    nb.cells.insert(0, note)
    return nbformat.writes(nb).encode("utf-8")


def _belongs_to(path: Path, run_id: str) -> bool:
    """Tell whether a working copy already there is one of ``run_id``'s."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return repr(run_id) in text


def prepare(run_dir: str | os.PathLike[str], work: str | os.PathLike[str] | None = None
            ) -> LabFolder:
    """Make (or reuse) the working folder for exploring a published run.

    Parameters
    ----------
    run_dir : path-like
        A published run.
    work : path-like, optional
        The working folder (default ``<cache>/lab/<run-id>``); it must not be inside the run.

    Returns
    -------
    LabFolder

    Raises
    ------
    verifylib.evidence.runs.RunNotFound
        If ``run_dir`` is not a published run.
    verifylib.errors.EvidenceInvalid
        If its receipt is malformed, or ``work`` lies inside the run.
    """
    from verifylib.evidence.runs import open_run

    run = open_run(run_dir)
    root = Path(run_dir).expanduser().resolve()
    folder = Path(work).expanduser().resolve() if work is not None \
        else resources.cache_dir() / "lab" / run.run_id
    if folder == root or root in folder.parents:
        raise EvidenceInvalid(f"the working folder {folder} is inside the run {root}: it must "
                              "be outside, or the run would be written")
    folder.mkdir(parents=True, exist_ok=True)
    copied, kept = [], []
    for source in sorted((root / "notebooks").glob("*.ipynb")):
        dest = folder / source.name
        if dest.is_file() and _belongs_to(dest, run.run_id):
            kept.append(source.name)
            continue
        canonical.atomic_write_bytes(dest, _working_copy(source, run.run_id, root))
        os.chmod(dest, 0o644)
        copied.append(source.name)
    return LabFolder(root, run.run_id, folder, tuple(copied), tuple(kept))


def lab_argv(work: Path, *, port: int | None = None, browser: bool = True) -> list[str]:
    """Return the command line that starts JupyterLab on ``work``.

    Parameters
    ----------
    work : Path
        The working folder.
    port : int, optional
        The port (JupyterLab picks a free one by default).
    browser : bool
        Open a browser tab.

    Returns
    -------
    list of str
    """
    argv = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={work}"]
    if port is not None:
        argv.append(f"--port={port}")
    if not browser:
        argv.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Jupyter refuses root without it; a container's or CI's user often is root.
        argv.append("--allow-root")
    return argv


def cli_main(args) -> int:
    """Run ``verifylib lab`` (argparse namespace in, exit code out).

    Parameters
    ----------
    args : argparse.Namespace
        ``run_dir``, ``port``, ``no_browser``, ``work``.

    Returns
    -------
    int
        JupyterLab's exit status; 2 when the run is not a published run or the working
        folder is inside it; 130 on Ctrl-C.
    """
    from verifylib.evidence.receipt import verify
    from verifylib.runtime.runner import sanitized_env

    try:
        lab = prepare(args.run_dir, args.work)
    except (EvidenceInvalid, ParametersInvalid) as exc:  # not a published run, or bad --work
        print(f"verifylib lab: {exc}", file=sys.stderr)
        return 2
    res = verify(lab.run_dir, allow_simulated=True)
    state = (f"verifies, verdict {res.verdict}" if res.ok else
             f"DOES NOT VERIFY ({len(res.problems)} problem(s); see `verifylib verify`)")
    print(f"run:            {lab.run_dir} ({lab.run_id}): {state}; read-only here")
    print(f"working folder: {lab.work} (checkpoints and autosaves go here)")
    if lab.copied:
        print(f"  copied:       {', '.join(lab.copied)}")
    if lab.kept:
        print(f"  kept:         {', '.join(lab.kept)} (yours from before)")
    sys.stdout.flush()
    # The user's locale, not the C locale the audit's children get: file names in a browser.
    keep = {k: os.environ[k] for k in ("LANG", "LC_ALL") if k in os.environ}
    try:
        return subprocess.run(lab_argv(lab.work, port=args.port, browser=not args.no_browser),
                              env=sanitized_env(keep), cwd=lab.work, check=False).returncode
    except KeyboardInterrupt:
        return 130
