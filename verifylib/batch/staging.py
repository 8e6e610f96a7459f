"""Staging folders of runs being written: reserved exclusively and owned by a process.

A staging folder is removed once its owner is provably gone (the owner records and that
rule are :mod:`verifylib.locks`'; here they are laid out as a reports folder's).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from verifylib import canonical
from verifylib.evidence.layout import RUN_ID_RE, new_run_id
from verifylib.locks import (
    OWNER_SUFFIX,
    UNOWNED_STALE_SECONDS,
    newest_mtime,
    owner_is_gone,
    owner_record,
)

STAGING = ".staging"


def remove_stale_staging(reports_root: Path, *, now: float | None = None) -> list[Path]:
    """Remove staging folders (and owner records) left by processes that are gone.

    Several ``verifylib run`` processes may share one reports folder, so a staging
    folder is removed only when (a) its owner record names this host and a process that
    no longer runs (its pid is free, a zombie, or now belongs to a process started at
    another time), or (b) it has no readable owner record and nothing in it changed for
    :data:`UNOWNED_STALE_SECONDS`. A record on another host keeps its folder: whether
    that owner lives cannot be told from here. Only ``<root>/<name>/.staging/<run-id>``
    entries are considered.

    Parameters
    ----------
    reports_root : Path
        The reports folder (``reports/`` by default).
    now : float, optional
        Current time, for the age rule (tests).

    Returns
    -------
    list of Path
        Staging folders removed (owner records without a folder are removed silently).
    """
    now = time.time() if now is None else now
    removed: list[Path] = []
    for area in sorted(Path(reports_root).glob(f"*/{STAGING}")):
        try:
            entries = sorted(area.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(OWNER_SUFFIX):
                run_id, folder = entry.name[:-len(OWNER_SUFFIX)], None
            elif RUN_ID_RE.match(entry.name) and entry.is_dir() and not entry.is_symlink():
                run_id, folder = entry.name, entry
            else:
                continue
            if not RUN_ID_RE.match(run_id):
                continue
            owner = area / f"{run_id}{OWNER_SUFFIX}"
            if folder is None and (area / run_id).exists():
                continue  # judged with its folder
            try:
                record = json.loads(owner.read_text())
                gone = owner_is_gone(record)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                record, gone = None, False
            if record is None:
                try:
                    age = now - (newest_mtime(folder) if folder is not None
                                 else owner.lstat().st_mtime)
                except OSError:
                    continue
                gone = age > UNOWNED_STALE_SECONDS
            if not gone:
                continue
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
                if folder.exists():
                    continue
                removed.append(folder)
            owner.unlink(missing_ok=True)
        for empty in (area, area.parent):
            try:
                empty.rmdir()  # a live run's files keep them
            except OSError:
                break
    return removed


def _link_exclusive(path: Path, data: bytes) -> None:
    """Publish ``data`` at ``path`` complete and only if ``path`` does not exist yet.

    Written to a private file first and hard-linked into place: the link is atomic (no
    reader sees a partial record) and fails with FileExistsError when the name is taken.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def create_staging(staging: Path) -> None:
    """Reserve ``staging``'s run id: write the owner record, then create the folder it owns.

    The record comes first so that no staging folder ever exists without one (a folder
    without a record is treated as foreign until it is an hour old). It is created
    exclusively, so of two processes that drew the same run id exactly one gets it; the
    other gets FileExistsError and touches nothing of the winner's. Another process may
    remove the empty ``.staging`` area between our mkdir and our write; retry then.

    Parameters
    ----------
    staging : Path
        The staging folder ``<model_root>/.staging/<run-id>`` to create.

    Raises
    ------
    FileExistsError
        When the run id is already taken in this staging area.
    FileNotFoundError
        When the area kept disappearing under the owner record (five attempts).
    """
    area = staging.parent
    owner = area / f"{staging.name}{OWNER_SUFFIX}"
    for attempt in range(5):
        area.mkdir(parents=True, exist_ok=True)
        try:
            _link_exclusive(owner, canonical.dumps(owner_record()))
        except FileNotFoundError:
            if attempt == 4:
                raise
            continue
        try:
            staging.mkdir()
        except BaseException:
            owner.unlink(missing_ok=True)
            raise
        return
    raise AssertionError("unreachable")


def reserve_staging(model_root: Path) -> tuple[str, Path]:
    """Draw a run id no other run of this model holds and create its staging folder.

    Several ``verifylib run`` processes may audit the same model into one reports folder
    in the same second. An id is taken when its owner record exists (a run in progress)
    or its run directory does (a finished run: the record goes only after publication).

    Parameters
    ----------
    model_root : Path
        The model's folder in the reports folder (``<reports>/<name>``).

    Returns
    -------
    run_id : str
        The drawn run id.
    staging : Path
        Its staging folder ``<model_root>/.staging/<run-id>``.

    Raises
    ------
    FileExistsError
        When 100 draws found no free run id.
    """
    for _ in range(100):
        run_id = new_run_id()
        staging = model_root / STAGING / run_id
        try:
            create_staging(staging)
        except FileExistsError:
            continue
        if (model_root / run_id).exists():
            remove_staging(staging)
            continue
        return run_id, staging
    raise FileExistsError(f"no free run id in {model_root} after 100 draws")


def remove_staging(staging: Path) -> None:
    """Remove a staging folder (if still there), its owner record and emptied parents.

    Parameters
    ----------
    staging : Path
        The staging folder; the ``.staging`` area and the model folder are removed too
        when that leaves them empty.
    """
    shutil.rmtree(staging, ignore_errors=True)
    (staging.parent / f"{staging.name}{OWNER_SUFFIX}").unlink(missing_ok=True)
    for empty in (staging.parent, staging.parent.parent):
        try:
            empty.rmdir()  # other runs' folders keep it alive
        except OSError:
            break
