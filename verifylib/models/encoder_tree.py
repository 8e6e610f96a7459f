"""A given encoder's folder checked whole before any work: its files, and the weights it names.

An ``encoder.path`` folder (``.mlpackage`` or ``.mlmodelc``) is hostile input that stage 02
copies into the run and the executors map. So before any work every entry is looked at
without following anything (``lstat``): no symbolic link anywhere, the folder itself
included (a copy would hold the target's bytes, a link to ``/etc/shadow`` among them); only
folders and regular files; at most :data:`MAX_ENTRIES` files and :data:`MAX_UNPACKED_BYTES`
in all, the limits an upstream zip is held to; no sparse file (a ``weight.bin`` extended
with ``truncate`` to gigabytes would be copied dense into the run); no empty file under
``weights/``. Then every weight reference the program makes (``@model_path/…`` and an
offset, from the package's protobuf or from ``model.mil``) must name a regular, non-empty
file inside the folder whose blob metadata record lies inside it: a path that leaves the
folder is refused, not followed.

Hard links are not refused: they cannot reach a file the user could not read, and the
suite itself hard-links packages it places.
"""

from __future__ import annotations

import os
import posixpath
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

from verifylib.models.encoder_card import EncoderInvalid

MAX_ENTRIES = 256
"""Most files a given encoder may hold, as a folder or as the entries of its zip
(:mod:`verifylib.models.encoder_zip`). A compiled encoder holds five files in three folders
(``coremldata.bin``, ``metadata.json``, ``model.mil``, ``weights/weight.bin``,
``analytics/coremldata.bin``); Archive Utility's ``__MACOSX/`` companions double that, and
a model of several functions holds a few dozen. Ten thousand entries is not an encoder."""

MAX_UNPACKED_BYTES = 3 << 30
"""Largest total declared size of the entries (bytes). The largest Whisper encoder,
large-v3's (about 635 M parameters), is about 1.3 GB in float16 as upstream ships it and
about 2.5 GB in float32, as upstream's converter writes it since ``ba573929c``; 3 GiB holds
either with its MIL text and metadata, and is below ZIP's 4 GiB non-ZIP64 limit."""

MODEL_PATH = "@model_path/"
"""How a program names its own folder in a weight reference."""

SPARSE_MIN_BYTES = 1 << 20
"""Files smaller than this are not judged sparse (file systems allocate small files
unevenly)."""

SPARSE_RATIO = 8
"""A file is sparse when its allocated blocks hold less than ``1/SPARSE_RATIO`` of its
length: real weights are incompressible, so a genuine file is allocated whole."""

_BLOB_SENTINEL = 0xDEADBEEF
_BLOB_RECORD = struct.Struct("<IIQQ")
"""A blob's metadata record in a weight file: sentinel, dtype code, data size, data offset."""


@dataclass(frozen=True)
class TreeFacts:
    """What the walk found.

    Attributes
    ----------
    files : int
        Regular files.
    bytes : int
        Their total length.
    """

    files: int
    bytes: int


def _walk(root: Path) -> Iterable[tuple[str, os.stat_result]]:
    """Every entry below ``root`` as (relative posix path, lstat), links not followed."""
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as it:
            for entry in it:
                sub = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                yield sub, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(sub)


def _entry_problem(rel: str, st: os.stat_result) -> str | None:
    """Why one entry may not be in an encoder's folder, or None."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return f"{rel} is a symbolic link (an encoder's folder holds regular files only)"
    if stat.S_ISDIR(mode):
        return None
    if not stat.S_ISREG(mode):
        return f"{rel} is not a regular file (a FIFO, socket or device)"
    if rel.split("/")[-2:-1] == ["weights"] and st.st_size == 0:
        return f"{rel} is empty (0 bytes): a weight file holds the program's weights"
    allocated = getattr(st, "st_blocks", None)
    if allocated is not None and st.st_size >= SPARSE_MIN_BYTES \
            and allocated * 512 * SPARSE_RATIO < st.st_size:
        return (f"{rel} is sparse ({st.st_size} bytes long, {allocated * 512} allocated): "
                "its length is not data; it would be copied dense into the run")
    return None


def check_tree(root: str | os.PathLike[str]) -> TreeFacts:
    """Refuse a folder holding anything but bounded, allocated regular files and folders.

    Parameters
    ----------
    root : path-like
        The ``.mlpackage`` or ``.mlmodelc`` folder.

    Returns
    -------
    TreeFacts

    Raises
    ------
    EncoderInvalid
        One line naming the folder and the first entry refused.
    """
    root = Path(root)
    if root.is_symlink():
        raise EncoderInvalid(f"{root}: a symbolic link (to {os.readlink(root)}); name the "
                             "folder itself")
    if not root.is_dir():
        raise EncoderInvalid(f"{root}: not a folder")
    files = total = 0
    try:
        for rel, st in _walk(root):
            why = _entry_problem(rel, st)
            if why is not None:
                raise EncoderInvalid(f"{root}: {why}")
            if stat.S_ISREG(st.st_mode):
                files, total = files + 1, total + st.st_size
            if files > MAX_ENTRIES or total > MAX_UNPACKED_BYTES:
                raise EncoderInvalid(f"{root}: more than {MAX_ENTRIES} files or "
                                     f"{MAX_UNPACKED_BYTES} bytes (at {rel}): larger than "
                                     "any Whisper encoder")
    except OSError as exc:
        raise EncoderInvalid(f"{root}: cannot be listed: {exc}") from None
    return TreeFacts(files, total)


def weight_path(root: Path, base: str, name: str, where: str) -> str:
    """Return the path, relative to ``root``, that a weight reference names; refuse one outside.

    Parameters
    ----------
    root : Path
        The encoder's folder (named in the message).
    base : str
        The folder ``@model_path`` stands for, relative to ``root`` (``""`` for a compiled
        model, ``Data/com.apple.CoreML`` for a package).
    name : str
        The reference's path, as the program writes it.
    where : str
        What holds the reference (for the message).

    Returns
    -------
    str
        A normalized POSIX path inside ``root``.

    Raises
    ------
    EncoderInvalid
        A path not under ``@model_path/``, or one that leaves the folder.
    """
    if not name.startswith(MODEL_PATH):
        raise EncoderInvalid(f"{root}: {where} names weight file {name[:120]!r}, not one "
                             f"under {MODEL_PATH}")
    rel = posixpath.normpath(posixpath.join(base, name[len(MODEL_PATH):]))
    if rel.startswith(("/", "../")) or rel in ("..", "."):
        raise EncoderInvalid(f"{root}: {where} names weight file {name[:120]!r}, which "
                             "leads outside the encoder's folder")
    return rel


def weight_file(root: Path, base: str, name: str, where: str) -> Path:
    """Return the regular, non-empty file a weight reference names inside ``root``.

    Parameters
    ----------
    root, base, name, where
        As :func:`weight_path`.

    Returns
    -------
    Path

    Raises
    ------
    EncoderInvalid
        As :func:`weight_path`, or when no non-empty regular file is there.
    """
    rel = weight_path(root, base, name, where)
    path = root / rel
    try:
        st = path.lstat()
    except OSError:
        raise EncoderInvalid(f"{root}: {where} names weight file {rel}, which does not "
                             "exist") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        raise EncoderInvalid(f"{root}: {where} names weight file {rel}, which is not a "
                             "non-empty regular file")
    return path


def check_blobs(root: str | os.PathLike[str], base: str,
                refs: Iterable[tuple[str, int]], where: str) -> int:
    """Hold every weight reference to a blob record inside a file of the folder.

    Parameters
    ----------
    root : path-like
        The encoder's folder (already through :func:`check_tree`).
    base : str
        What ``@model_path`` stands for, relative to ``root``.
    refs : iterable of (str, int)
        Each reference's path and the offset of its blob's metadata record.
    where : str
        The file holding the references (``model.mil``, the package's protobuf).

    Returns
    -------
    int
        How many distinct references were checked.

    Raises
    ------
    EncoderInvalid
        Naming the reference: outside the folder, no such file, no blob record at its
        offset, or a blob whose data runs past the file's end.
    """
    root = Path(root)
    handles: dict[str, tuple[BinaryIO, int]] = {}
    seen = set(refs)
    try:
        for name, offset in sorted(seen):
            if name not in handles:
                path = weight_file(root, base, name, where)
                fh = open(path, "rb")  # noqa: SIM115 - closed below, one per file
                handles[name] = (fh, os.fstat(fh.fileno()).st_size)
            fh, size = handles[name]
            fh.seek(offset)
            raw = fh.read(_BLOB_RECORD.size)
            if len(raw) < _BLOB_RECORD.size:
                raise EncoderInvalid(f"{root}: {where} names a weight at offset {offset} of "
                                     f"{name}, past its end ({size} bytes)")
            sentinel, _code, nbytes, data = _BLOB_RECORD.unpack(raw)
            if sentinel != _BLOB_SENTINEL or data + nbytes > size:
                raise EncoderInvalid(f"{root}: {where} names a weight at offset {offset} of "
                                     f"{name}, where there is no blob of this file "
                                     f"({size} bytes)")
    finally:
        for fh, _ in handles.values():
            fh.close()
    return len(seen)
