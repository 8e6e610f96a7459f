"""Published runs as tar archives: planned from a run directory, imported elsewhere.

An archive is imported into a reports folder only after verification, and never replaces
a run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from verifylib import canonical
from verifylib.batch.audit import RunOutcome
from verifylib.batch.signals import note_published, signals_deferred
from verifylib.batch.staging import STAGING, create_staging, remove_staging
from verifylib.errors import EvidenceInvalid
from verifylib.evidence import gates
from verifylib.evidence.layout import RUN_FILE, RUN_ID_RE
from verifylib.views import report

if TYPE_CHECKING:
    import tarfile


class RunImportRefused(EvidenceInvalid):
    """A run directory audited elsewhere was not published.

    The archive is not a run directory of the expected model, its id is taken, or it does
    not verify.
    """


# How much of a member file is read at once while streaming an archive (less for small
# chunks); a chunk is assembled from such reads, so a stream holds about two at most.
_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class ArchiveMember:
    """One member of a run archive: its tar header and how many data bytes follow.

    Attributes
    ----------
    path : Path
        The file or folder on disk.
    header : bytes
        Its tar header blocks (PAX format, as :mod:`tarfile` writes them).
    size : int
        Data bytes that follow the header (0 for a folder), before block padding.
    is_file : bool
        A regular file (its content follows the header), else a folder.
    """

    path: Path
    header: bytes
    size: int
    is_file: bool


@dataclass(frozen=True)
class RunArchive:
    """A published run directory planned as an uncompressed tar, streamed in chunks.

    Uncompressed because most of a run's bytes are model weights, which do not
    compress. The bytes are exactly those :mod:`tarfile` writes for the same members
    (``tar.add(path, arcname, recursive=False)`` in sorted order, PAX format), but they
    are produced piece by piece from the files, so a run of several GB never has to be
    held in memory or written twice on the machine that sends it.

    Attributes
    ----------
    run_dir : Path
        The run directory.
    members : tuple of ArchiveMember
        Regular files and folders, in sorted order, paths relative to the run.
    size : int
        Total bytes of the archive, end-of-archive blocks and record padding included.
    """

    run_dir: Path
    members: tuple[ArchiveMember, ...]
    size: int

    def chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        """Stream the archive as consecutive chunks of ``chunk_bytes`` (the last one shorter).

        Parameters
        ----------
        chunk_bytes : int
            Size of every chunk but the last; positive.

        Yields
        ------
        bytes
            The next chunk of the archive; together they are :attr:`size` bytes.

        Raises
        ------
        ValueError
            If ``chunk_bytes`` is not a positive integer.
        RunImportRefused
            When a file changed size since the archive was planned (the announced
            size would no longer hold).
        """
        import tarfile
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise ValueError(f"chunk size must be a positive integer, got {chunk_bytes!r}")
        buf = bytearray()
        sent = 0

        def full():
            nonlocal sent
            while len(buf) >= chunk_bytes:
                piece = bytes(buf[:chunk_bytes])
                del buf[:chunk_bytes]
                sent += len(piece)
                yield piece

        for m in self.members:
            buf += m.header
            yield from full()
            if not m.is_file:
                continue
            with open(m.path, "rb") as fh:
                left = m.size
                while left:
                    data = fh.read(min(left, _READ_BYTES, max(chunk_bytes, tarfile.BLOCKSIZE)))
                    if not data:
                        raise RunImportRefused(f"{m.path}: shorter than when it was packed")
                    buf += data
                    left -= len(data)
                    yield from full()
                if fh.read(1):
                    raise RunImportRefused(f"{m.path}: longer than when it was packed")
            pad = -m.size % tarfile.BLOCKSIZE
            buf += tarfile.NUL * pad
            yield from full()
        tail = self.size - sent - len(buf)
        buf += tarfile.NUL * tail
        yield from full()
        if buf:
            sent += len(buf)
            yield bytes(buf)


def plan_run_archive(run_dir: Path) -> RunArchive:
    """Plan a published run directory as a tar archive (see :class:`RunArchive`).

    Parameters
    ----------
    run_dir : Path
        A published run directory.

    Returns
    -------
    RunArchive
        The members in sorted order, their tar headers and the archive's total size.

    Raises
    ------
    RunImportRefused
        If the folder holds anything but regular files and folders (a link could point
        outside the run on the machine that unpacks it).
    """
    import io
    import tarfile
    run_dir = Path(run_dir)
    members = []
    offset = 0
    # A TarFile only to describe members exactly as tar.add would; nothing is kept.
    with tarfile.open(fileobj=io.BytesIO(), mode="w", format=tarfile.PAX_FORMAT) as describer:
        for path in sorted(run_dir.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise RunImportRefused(f"{path}: not a regular file or folder")
            info = describer.gettarinfo(str(path),
                                        arcname=path.relative_to(run_dir).as_posix())
            header = info.tobuf(describer.format, describer.encoding, describer.errors)
            size = info.size if info.isreg() else 0
            members.append(ArchiveMember(path, header, size, info.isreg()))
            offset += len(header) + size + (-size % tarfile.BLOCKSIZE)
    offset += 2 * tarfile.BLOCKSIZE
    offset += -offset % tarfile.RECORDSIZE
    return RunArchive(run_dir, tuple(members), offset)


def import_run(archive: bytes | str | os.PathLike, name: str, reports_root: Path, *,
               allow_simulated: bool = False) -> RunOutcome:
    """Verify a run directory audited elsewhere (:class:`RunArchive`) and publish it here.

    The archive is unpacked into a staging folder of ``reports_root`` (with an owner
    record, as :func:`run_one` stages), re-verified from its own files by
    :func:`verifylib.evidence.receipt.verify` (nothing the other machine says is trusted: the
    verdict is the one verification recomputes) and renamed into
    ``<reports_root>/<name>/<run-id>``. A published run is never replaced.

    Parameters
    ----------
    archive : bytes or path-like
        The tar of one published run directory, in memory or in a file (read as a
        stream, never loaded whole).
    name : str
        The model the run must belong to (``run.json``'s ``name``).
    reports_root : Path
        The reports folder.
    allow_simulated : bool
        Accept a run recorded on the test suite's simulated host.

    Returns
    -------
    RunOutcome
        Of the published run; its verdict is the verified one.

    Raises
    ------
    RunImportRefused
        When nothing was published, with the reason.
    KeyboardInterrupt
        :class:`Interrupted`; the staging folder is removed as in :func:`run_one`.
    """
    from verifylib.evidence.receipt import verify
    with _open_tar(archive, name) as tar:
        run_id = _run_id_of(tar, name)
        final = Path(reports_root) / name / run_id
        staging = Path(reports_root) / name / STAGING / run_id
        if final.exists() or staging.exists():
            raise RunImportRefused(f"{name}: run {run_id} is already here; not replaced")
        try:
            create_staging(staging)
        except FileExistsError:
            raise RunImportRefused(f"{name}: run {run_id} is already being published") \
                from None
        try:
            # Checked again under the reservation: another importer may have published
            # this id and released it between the check above and ours.
            if final.exists():
                raise RunImportRefused(f"{name}: run {run_id} is already here; not replaced")
            # "data": no absolute paths, no "..", no links leaving the folder, no devices.
            tar.extractall(staging, filter="data")
            res = verify(staging, allow_simulated=allow_simulated)
            if not res.ok:
                raise RunImportRefused(f"{name}: the returned run {run_id} does not verify: "
                                       + "; ".join(res.problems[:5]))
            canonical.publish_dir(staging, final)
            canonical.seal_read_only(final)
        finally:
            with signals_deferred():
                if final.is_dir():
                    note_published(final)
                remove_staging(staging)
    try:
        seconds = canonical.read_json(final / "timings.json")
    except (OSError, ValueError):
        seconds = {}
    return RunOutcome(name, final, gates.Verdict(res.verdict), final / report.REPORT,
                      seconds if isinstance(seconds, dict) else {})


def _open_tar(archive: bytes | str | os.PathLike, name: str) -> tarfile.TarFile:
    """Open the archive of ``name``'s run, in memory or from its file."""
    import io
    import tarfile
    try:
        if isinstance(archive, (bytes, bytearray, memoryview)):
            return tarfile.open(fileobj=io.BytesIO(bytes(archive)), mode="r:")
        return tarfile.open(name=os.fspath(archive), mode="r:")
    except (tarfile.TarError, OSError) as exc:
        raise RunImportRefused(f"{name}: the returned run is not a tar archive: {exc}") from None


def _run_id_of(tar: tarfile.TarFile, name: str) -> str:
    """Read the run id from the archive's ``run.json``, refusing a run not of ``name``."""
    import tarfile
    try:
        run = canonical.loads(tar.extractfile(tar.getmember(RUN_FILE)).read())
    except (KeyError, AttributeError, ValueError, tarfile.TarError) as exc:
        raise RunImportRefused(f"{name}: the returned run has no readable {RUN_FILE}: "
                               f"{exc}") from None
    run_id = run.get("run_id") if isinstance(run, dict) else None
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise RunImportRefused(f"{name}: the returned run has a malformed run id "
                               f"{run_id!r}")
    if run.get("name") != name:
        raise RunImportRefused(f"{name}: the returned run belongs to {run.get('name')!r}")
    return run_id
