"""Before any work: can the reports and cache folders take this audit.

``verifylib run`` checks, for the reports folder and for the cache, that it can be written
(a read-only mount or a wrong owner is found by creating and removing a file, as the audit
would) and that its file system has the room the audit needs; either problem refuses the
audit with exit 2 and one line, before any model is imported or built. ``verifylib doctor``
shows the same figures.

The room is an estimate, from the model's size: a ggml file, each exported encoder
package (and on macOS its compiled copy), the evidence (the per-layer parity arrays grow
with the encoder), the reports; and in the cache the imported model and, when this pin
has never been built here, its sources and builds. The model's size is read from a
local model's files, else from the size its name says (``tiny`` … ``large``, Whisper's
published parameter counts); a name that says none is sized as ``large``, so the check
errs towards refusing a disk that is too small rather than failing in the middle.

Why hand-written: no package estimates what an audit will write.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from verifylib.params import Params

__all__ = ["SpaceEstimate", "FolderCheck", "estimate_space", "check_folders", "check_audit",
           "free_bytes", "problems"]

MIB = 1 << 20

# Whisper's published sizes in millions of parameters: (whole model, encoder).
_SIZES = {"tiny": (39, 8), "base": (74, 21), "small": (244, 88), "medium": (769, 307),
          "turbo": (809, 635), "large": (1550, 635)}
_SIZE_RE = re.compile(r"(?<![a-z])(tiny|base|small|medium|turbo|large)(?![a-z])")
_FIXED_RUN = 24 * MIB     # reports, notebooks, evidence that does not grow with the model
_BUILDS = 400 * MIB       # a pin's sources, its builds and their compiler cache, measured
_MARGIN = 1.25


@dataclass(frozen=True)
class SpaceEstimate:
    """What one audit is expected to write.

    Attributes
    ----------
    name : str
        The model's name.
    size : str
        The size the estimate assumed (``tiny`` … ``large``), or ``files`` when read from
        a local model's files.
    params_m, encoder_m : int
        The model's and its encoder's parameters, in millions.
    run_bytes : int
        In the reports folder (staged, then renamed in place).
    cache_bytes : int
        In the cache: the imported model, and the sources and builds when the cache holds
        no build yet.
    """

    name: str
    size: str
    params_m: int
    encoder_m: int
    run_bytes: int
    cache_bytes: int


@dataclass(frozen=True)
class FolderCheck:
    """One folder the audit writes: can it, and is there room.

    Attributes
    ----------
    role : str
        ``reports`` or ``cache``.
    path : Path
        The folder.
    free_bytes : int or None
        Free space on its file system (its nearest existing folder's), None if unreadable.
    need_bytes : int
        What the audits need there (both roles' needs when they share a file system).
    problem : str or None
        Why the audit cannot start (one line), None when it can.
    """

    role: str
    path: Path
    free_bytes: int | None
    need_bytes: int
    problem: str | None


def _size_of_files(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def _model_size(params: Params) -> tuple[str, int, int]:
    model = params.data["model"]
    local = model.get("path")
    if local and model.get("kind") in ("ggml", "ct2-dir", "hf-dir"):
        path = Path(local)
        path = path if path.is_absolute() else params.base_dir / path
        n_bytes = _size_of_files(path)
        if n_bytes:
            # float16 weights: 2 bytes a parameter; the encoder's share as large's (the
            # largest share of any Whisper size, so the estimate errs high).
            total = max(1, n_bytes // (2 * 10**6))
            return "files", total, max(1, total * _SIZES["large"][1] // _SIZES["large"][0])
    words = " ".join(str(v) for v in (params.name, model.get("package"), model.get("id"),
                                      model.get("subdir"), params.data.get("description"))
                     if v).lower()
    found = _SIZE_RE.findall(words)
    size = max(found, key=lambda s: _SIZES[s][0]) if found else "large"
    total, encoder = _SIZES[size]
    return size, total, encoder


def estimate_space(params: Params, *, macos: bool = False,
                   cache_dir: Path | None = None) -> SpaceEstimate:
    """Estimate what auditing ``params`` writes to the reports folder and the cache.

    Parameters
    ----------
    params : Params
        A validated parameter file.
    macos : bool
        The compiled copies of the encoders count too (only macOS compiles them).
    cache_dir : Path, optional
        The cache: a pin's sources and builds are counted only when it holds no build yet.

    Returns
    -------
    SpaceEstimate
    """
    size, total, encoder = _model_size(params)
    fp16 = bool((params.data.get("export") or {}).get("fp16", True))
    packages = 4 * encoder + (2 * encoder if fp16 else 0)
    run = 2 * total + packages * (2 if macos else 1) + 2 * encoder
    cache = 4 * total
    builds = _BUILDS if cache_dir is None or not _has_entries(cache_dir / "builds") else 0
    return SpaceEstimate(params.name, size, total, encoder,
                         int((run * 10**6 + _FIXED_RUN) * _MARGIN),
                         int((cache * 10**6 + builds) * _MARGIN))


def _has_entries(folder: Path) -> bool:
    try:
        return any(True for _ in folder.iterdir())
    except OSError:
        return False


def _existing(folder: Path) -> Path | None:
    for candidate in (folder, *folder.parents):
        if candidate.is_dir():
            return candidate
    return None


def _write_problem(folder: Path) -> str | None:
    """Why ``folder`` (or, before it exists, its nearest existing parent) cannot be written."""
    base = _existing(folder)
    if base is None:
        return "no existing folder above it"
    try:
        with tempfile.TemporaryFile(dir=base, prefix=".verifylib-write-check-"):
            pass
    except OSError as exc:
        return f"cannot be written ({exc.strerror or exc})"
    return None


def free_bytes(folder: Path) -> int | None:
    """Return the free space on ``folder``'s file system, or None when it cannot be read.

    A folder that does not exist yet (the cache before the first audit) is on its nearest
    existing parent's file system.

    Parameters
    ----------
    folder : Path
        A folder an audit writes (it may not exist yet).

    Returns
    -------
    int or None
    """
    return _free(folder)[0]


def _free(folder: Path) -> tuple[int | None, int | None]:
    base = _existing(folder)
    if base is None:
        return None, None
    try:
        return shutil.disk_usage(base).free, os.stat(base).st_dev
    except OSError:
        return None, None


def check_folders(estimates: Sequence[SpaceEstimate], reports: Path,
                  cache: Path) -> tuple[FolderCheck, FolderCheck]:
    """Check the reports folder and the cache against the audits' estimates.

    Parameters
    ----------
    estimates : sequence of SpaceEstimate
        One per model of the batch (their needs add up).
    reports, cache : Path
        Where the runs and the cache go.

    Returns
    -------
    (FolderCheck, FolderCheck)
        The reports folder's, then the cache's.
    """
    need = {"reports": sum(e.run_bytes for e in estimates),
            "cache": sum(e.cache_bytes for e in estimates)}
    folders = {"reports": Path(reports), "cache": Path(cache)}
    free = {role: _free(path) for role, path in folders.items()}
    shared = free["reports"][1] is not None and free["reports"][1] == free["cache"][1]
    out = []
    for role, path in folders.items():
        want = need["reports"] + need["cache"] if shared else need[role]
        avail = free[role][0]
        problem = _write_problem(path)
        if problem is None and avail is not None and avail < want:
            problem = (f"{_mib(avail)} free, the audit needs about {_mib(want)}"
                       + (" (reports and cache share this file system)" if shared else ""))
        out.append(FolderCheck(role, path, avail, want,
                               None if problem is None else f"the {role} folder {path}: "
                                                            f"{problem}"))
    return out[0], out[1]


def check_audit(all_params: Sequence[Params], reports: Path
                ) -> tuple[FolderCheck, FolderCheck]:
    """Check the reports folder and the cache against a batch's estimated size on this host.

    Parameters
    ----------
    all_params : sequence of Params
        The batch's models.
    reports : Path
        Where the runs go (the cache is :func:`verifylib.resources.cache_dir`).

    Returns
    -------
    (FolderCheck, FolderCheck)
        As :func:`check_folders`: the reports folder's, then the cache's.
    """
    from verifylib.resources import cache_dir
    from verifylib.runtime.capabilities import detect

    cache = cache_dir()
    macos = detect().system == "Darwin"  # only macOS writes the compiled copies
    return check_folders([estimate_space(p, macos=macos, cache_dir=cache) for p in all_params],
                         reports, cache)


def problems(checks: Iterable[FolderCheck]) -> list[str]:
    """Return the one-line problems of ``checks`` (empty: the audit can start).

    Parameters
    ----------
    checks : iterable of FolderCheck
        From :func:`check_folders`.

    Returns
    -------
    list of str
    """
    return [c.problem for c in checks if c.problem is not None]


def _mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB" if n < 10 * 1024 * MIB else f"{n / (1024 * MIB):,.1f} GiB"
