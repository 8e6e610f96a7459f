"""A published run streamed from a Ray node back to the driver.

An audit task (:func:`verifylib.batch.ray.audit_task`) yields a header
(:class:`StreamHeader`: model, run id, the archive's size, the node), then the run's
uncompressed tar in chunks, then a trailer (:class:`StreamTrailer`: chunk count, size,
SHA-256). On the driver, :class:`RunReceiver` writes the chunks to a staging file in the
reports folder, checks them against the header and the trailer, and imports the run
(:func:`verifylib.batch.archive.import_run`: verified first, never replacing a run).
Nothing here talks to Ray: the items are plain data, checked field by field.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifylib.batch.archive import RunImportRefused, import_run
from verifylib.batch.audit import RunOutcome
from verifylib.batch.signals import signals_deferred
from verifylib.batch.staging import remove_staging, reserve_staging
from verifylib.evidence.layout import RUN_ID_RE

# What the task's first and last items say they are (checked by the driver).
HEADER_KIND = "verifylib-run-stream/1"
TRAILER_KIND = "verifylib-run-stream-end/1"


@dataclass(frozen=True)
class StreamHeader:
    """The first item of an audit task's stream: which run follows, and how big.

    Attributes
    ----------
    name : str
        Model name.
    run_id : str
        The run's id.
    verdict : str
        As the node judged it (the driver re-verifies; never trusted).
    node : dict
        The node's executor record (``kind``, ``node``, ``ray_node_id``).
    size : int
        Bytes of the archive that follows.
    chunk_bytes : int
        Size of every chunk but the last.
    """

    name: str
    run_id: str
    verdict: str
    node: dict
    size: int
    chunk_bytes: int

    def to_json(self) -> dict:
        """Return the header as the task yields it (plain data: the driver checks every field).

        Returns
        -------
        dict
            ``kind`` (:data:`HEADER_KIND`) and every field of the header.
        """
        return {"kind": HEADER_KIND, "name": self.name, "run_id": self.run_id,
                "verdict": self.verdict, "node": dict(self.node), "size": self.size,
                "chunk_bytes": self.chunk_bytes}

    @classmethod
    def from_json(cls, item: Any) -> "StreamHeader":
        """Check a stream's first item.

        Parameters
        ----------
        item : any
            What the task yielded first.

        Returns
        -------
        StreamHeader
            The header the item describes.

        Raises
        ------
        RunImportRefused
            When it is not a header of this format.
        """
        if not isinstance(item, dict) or item.get("kind") != HEADER_KIND:
            raise RunImportRefused("the task's stream does not start with a run header")
        ok = (isinstance(item.get("name"), str) and isinstance(item.get("run_id"), str)
              and bool(RUN_ID_RE.match(item["run_id"])) and isinstance(item.get("verdict"), str)
              and isinstance(item.get("node"), dict) and _count(item.get("size"))
              and _count(item.get("chunk_bytes")) and item["chunk_bytes"] > 0)
        if not ok:
            raise RunImportRefused(f"the task's run header is malformed: {item!r:.300}")
        return cls(item["name"], item["run_id"], item["verdict"], dict(item["node"]),
                   item["size"], item["chunk_bytes"])


@dataclass(frozen=True)
class StreamTrailer:
    """The last item of an audit task's stream: what the node sent.

    Attributes
    ----------
    chunks : int
        Chunks sent.
    size : int
        Bytes sent.
    sha256 : str
        SHA-256 of the archive.
    """

    chunks: int
    size: int
    sha256: str

    def to_json(self) -> dict:
        """Return the trailer as the task yields it.

        Returns
        -------
        dict
            ``kind`` (:data:`TRAILER_KIND`), ``chunks``, ``size`` and ``sha256``.
        """
        return {"kind": TRAILER_KIND, "chunks": self.chunks, "size": self.size,
                "sha256": self.sha256}

    @classmethod
    def from_json(cls, item: Any) -> "StreamTrailer":
        """Check a stream's last item (see :meth:`StreamHeader.from_json`).

        Parameters
        ----------
        item : any
            What the task yielded last.

        Returns
        -------
        StreamTrailer
            The trailer the item describes.

        Raises
        ------
        RunImportRefused
            When it is not a trailer of this format.
        """
        if not (isinstance(item, dict) and item.get("kind") == TRAILER_KIND
                and _count(item.get("chunks")) and _count(item.get("size"))
                and isinstance(item.get("sha256"), str)):
            raise RunImportRefused(f"the task's stream trailer is malformed: {item!r:.300}")
        return cls(item["chunks"], item["size"], item["sha256"])


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class RunReceiver:
    """The driver's end of one task's stream: chunks to a staging file, then import.

    Feed it every item the task yields (:meth:`take`); it returns the published
    :class:`verifylib.batch.audit.RunOutcome` after the trailer. Whatever happens, call
    :meth:`discard` at the end: it removes the staging file and its owner record.

    Parameters
    ----------
    name : str
        The model whose run is expected.
    reports_root : Path
        The driver's reports folder.
    allow_simulated : bool
        Passed to :func:`verifylib.batch.archive.import_run`.

    Attributes
    ----------
    header : StreamHeader or None
        The stream's header, once received.
    chunks : int
        Chunks received so far.
    received : int
        Bytes received so far.
    """

    def __init__(self, name: str, reports_root: Path, *, allow_simulated: bool = False):
        self.name = name
        self.reports_root = Path(reports_root)
        self.allow_simulated = allow_simulated
        self.header: StreamHeader | None = None
        self.chunks = 0
        self.received = 0
        self._digest = hashlib.sha256()
        self._staging: Path | None = None
        self._file = None

    @property
    def node(self) -> str | None:
        """The host the run came from, once the header said."""
        return None if self.header is None else self.header.node.get("node")

    def take(self, item: Any) -> RunOutcome | None:
        """Take the task's next item.

        Parameters
        ----------
        item : dict or bytes
            The header, a chunk or the trailer, in that order.

        Returns
        -------
        RunOutcome or None
            The published run after the trailer; None before.

        Raises
        ------
        RunImportRefused
            For an item out of order, more bytes than announced, a stream that does not
            match its trailer, or a run that does not verify (nothing is published).
        """
        if self.header is None:
            header = StreamHeader.from_json(item)
            if header.name != self.name:
                raise RunImportRefused(f"{self.name}: the task returned {header.name!r}'s run")
            self.header = header
            # In the reports folder, not the temporary folder: the run is unpacked
            # beside it anyway, and /tmp is often memory.
            _, self._staging = reserve_staging(self.reports_root / self.name)
            self._file = open(self._staging / "run.tar", "wb")
            return None
        if isinstance(item, (bytes, bytearray, memoryview)):
            if self._file is None:
                raise RunImportRefused(f"{self.name}: a chunk arrived after the trailer")
            self.received += len(item)
            self.chunks += 1
            if self.received > self.header.size or len(item) > self.header.chunk_bytes:
                raise RunImportRefused(f"{self.name}: the task sent more than the "
                                       f"{self.header.size} bytes it announced")
            self._digest.update(item)
            self._file.write(item)
            return None
        if self._file is None:
            raise RunImportRefused(f"{self.name}: an item arrived after the trailer")
        trailer = StreamTrailer.from_json(item)
        self._file.close()
        self._file = None
        got = (self.chunks, self.received, self._digest.hexdigest())
        if got != (trailer.chunks, trailer.size, trailer.sha256) \
                or self.received != self.header.size:
            raise RunImportRefused(
                f"{self.name}: the returned run arrived damaged: {self.chunks} chunks, "
                f"{self.received} bytes, SHA-256 {got[2][:16]}… received; the node sent "
                f"{trailer.chunks} chunks, {trailer.size} of {self.header.size} bytes, "
                f"SHA-256 {trailer.sha256[:16]}…")
        return import_run(self._staging / "run.tar", self.name, self.reports_root,
                          allow_simulated=self.allow_simulated)

    def unfinished(self) -> str:
        """Why a stream that ended before its trailer published nothing.

        Returns
        -------
        str
        """
        if self.header is None:
            return f"{self.name}: the task ended without returning a run"
        return (f"{self.name}: the task's stream ended before the whole run arrived "
                f"({self.chunks} chunks, {self.received} of {self.header.size} bytes)")

    def discard(self) -> None:
        """Close and remove the staging file (and its folder and owner record)."""
        with signals_deferred():
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._staging is not None:
                remove_staging(self._staging)
                self._staging = None
