"""A downloaded ``….mlmodelc.zip`` checked from its central directory, then unpacked safely.

Upstream publishes each Core ML encoder as ``ggml-<model>-encoder.mlmodelc.zip`` and its
``models/download-coreml-model.sh`` fetches it with no checksum, so the archive is hostile
input. :func:`check_archive` reads the end record and the central directory only (never a
member's data), so an unsafe archive is refused in milliseconds, at validation:

- names: an absolute path, a drive letter, a backslash, a ``..``, ``.`` or empty component,
  a NUL or control character;
- entries: a symbolic link or any other non-regular entry (the file-type bits of
  ``external_attr``), a folder entry holding data, an encrypted entry, a compression method
  the standard library cannot inflate, the same name twice (also when only the case
  differs: one file on macOS's default volumes), a name that is both a file and a folder;
- shape: every entry inside one top-level ``<name>.mlmodelc/`` folder, which holds
  ``metadata.json`` and ``coremldata.bin``; no file macOS writes on its own inside it
  (``.DS_Store``, ``._*``), as for a folder (it would change the tree digest). A top-level
  ``__MACOSX/`` is the AppleDouble folder Archive Utility adds (upstream's
  ``ggml-large-v3-turbo-encoder.mlmodelc.zip`` holds one): its entries are checked like any
  other, counted, and never unpacked;
- limits: :data:`MAX_ENTRIES`, :data:`MAX_DIRECTORY_BYTES`, :data:`MAX_UNPACKED_BYTES` and
  :data:`MAX_RATIO`.

The declared sizes are not trusted: :func:`unpack` writes regular files only, each created
new inside a fresh folder, and stops a member that inflates past its declared size (or ends
short of it); zipfile's own CRC check refuses altered data. zipfile's ``extract`` is not
used because it rewrites a hostile name (drops ``..`` and leading slashes) instead of
refusing it, and follows no size limit.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterable

from verifylib.canonical import is_os_litter
from verifylib.models.encoder_card import EncoderInvalid
from verifylib.models.encoder_tree import MAX_ENTRIES, MAX_UNPACKED_BYTES, weight_path

if TYPE_CHECKING:
    from verifylib.models.encoder_card import EncoderCard

ARCHIVE_SUFFIX = ".mlmodelc.zip"
"""What an archived compiled encoder's name ends in (upstream's downloads do)."""

MACOS_RESOURCES = "__MACOSX"
"""The top-level folder of AppleDouble companions that Archive Utility adds to a zip."""


MAX_DIRECTORY_BYTES = 1 << 20
"""Largest central directory read (bytes): :data:`MAX_ENTRIES` entries of 46 fixed bytes
with names and extra fields of a few hundred bytes each take well under 1 MiB, so the
directory is parsed in milliseconds whatever the archive claims."""


MAX_RATIO = 100
"""Largest declared inflation of one entry above :data:`RATIO_FLOOR` bytes. Float16 and
float32 weights deflate by less than 1.2 to 1, MIL text by about 10 to 1; an entry that
claims to inflate a hundredfold is a decompression bomb."""

RATIO_FLOOR = 1 << 20
"""Entries declared smaller than this (bytes) are not held to :data:`MAX_RATIO`: an empty
folder's marker or a short JSON file may legitimately compress a hundredfold."""

REQUIRED = ("metadata.json", "coremldata.bin")
"""Files every compiled model holds at its top (as the folder check requires)."""

_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                      zipfile.ZIP_LZMA})
_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
_FLAG_ENCRYPTED = 0x01
_FLAG_STRONG_ENCRYPTION = 0x40
_DOS_DIRECTORY = 0x10
_CHUNK = 1 << 20
_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")


@dataclass(frozen=True)
class ArchiveMember:
    """One regular file of the archive's top-level folder, as its central directory lists it.

    Attributes
    ----------
    path : str
        Its path inside the top-level folder (POSIX form).
    size : int
        Its declared uncompressed size in bytes.
    crc32 : int
        Its declared CRC-32.
    """

    path: str
    size: int
    crc32: int


@dataclass(frozen=True)
class ArchiveListing:
    """What an archive's central directory says, once every check passed.

    Attributes
    ----------
    top : str
        The top-level folder, ``<name>.mlmodelc``.
    files : tuple of ArchiveMember
        Its regular files, sorted by path.
    folders : tuple of str
        Its folder entries (paths inside the top-level folder), sorted.
    skipped : int
        Entries under ``__MACOSX/``, checked and never unpacked.
    declared_bytes : int
        The declared uncompressed size of every entry, summed.
    """

    top: str
    files: tuple[ArchiveMember, ...]
    folders: tuple[str, ...]
    skipped: int
    declared_bytes: int


@dataclass(frozen=True)
class UnpackedEncoder:
    """An archive unpacked: where, and the identity of the bytes it came from.

    Attributes
    ----------
    folder : Path
        The unpacked ``<name>.mlmodelc`` folder.
    sha256 : str
        SHA-256 of the archive file, hashed from the open file the members were read from.
    size : int
        The archive's size in bytes.
    listing : ArchiveListing
        Its checked central directory.
    """

    folder: Path
    sha256: str
    size: int
    listing: ArchiveListing


def is_encoder_archive(path: str | os.PathLike[str]) -> bool:
    """Tell whether a path names an archived compiled encoder (``….mlmodelc.zip``).

    Parameters
    ----------
    path : path-like
        The path.

    Returns
    -------
    bool
    """
    return Path(path).name.endswith(ARCHIVE_SUFFIX)


def check_archive(source: str | os.PathLike[str] | IO[bytes]) -> ArchiveListing:
    """Check an archived encoder from its end record and central directory alone.

    Parameters
    ----------
    source : path-like or binary file
        A ``….mlmodelc.zip`` file, or an open seekable binary file holding one (treated as
        hostile input).

    Returns
    -------
    ArchiveListing

    Raises
    ------
    EncoderInvalid
        Naming the archive, the entry and what makes it unsafe or not an encoder.
    """
    if not isinstance(source, (str, os.PathLike)):
        size = source.seek(0, os.SEEK_END)
        return _listing(source, size, getattr(source, "name", "the archive"))
    p = Path(source)
    try:
        with open(p, "rb") as fh:
            return _listing(fh, os.fstat(fh.fileno()).st_size, str(p))
    except OSError as exc:
        raise EncoderInvalid(f"{p}: cannot be read: {exc}") from None


def _directory_extent(fh: IO[bytes], size: int, where: str) -> tuple[int, int]:
    """Return the entry count and central-directory size the end records declare.

    Read before zipfile parses the directory, so that a directory of a million entries is
    refused without being read. As zipfile does, a ZIP64 end record is followed wherever
    its locator sits just before the classic end record.
    """
    tail = min(size, _EOCD.size + 0xFFFF)
    fh.seek(size - tail)
    data = fh.read(tail)
    at = data.rfind(b"PK\x05\x06")
    if at < 0 or len(data) - at < _EOCD.size:
        raise EncoderInvalid(f"{where}: not a zip archive (no end of central directory "
                             "record)")
    _, disk, _, _, entries, dir_size, _, _ = _EOCD.unpack_from(data, at)
    if disk != 0:
        raise EncoderInvalid(f"{where}: a multi-part (spanned) zip archive")
    locator = size - tail + at - _ZIP64_LOCATOR.size
    if locator < 0:
        return entries, dir_size
    fh.seek(locator)
    sig, _, record, _ = _ZIP64_LOCATOR.unpack(fh.read(_ZIP64_LOCATOR.size))
    if sig != b"PK\x06\x07":
        return entries, dir_size
    if record + _ZIP64_EOCD.size > size:
        raise EncoderInvalid(f"{where}: a ZIP64 end record said to lie past the archive's end")
    fh.seek(record)
    fields = _ZIP64_EOCD.unpack(fh.read(_ZIP64_EOCD.size))
    if fields[0] != b"PK\x06\x06":
        raise EncoderInvalid(f"{where}: a broken ZIP64 end record")
    return max(entries, fields[7]), max(dir_size, fields[8])


def _listing(fh: IO[bytes], size: int, where: str) -> ArchiveListing:
    entries, dir_size = _directory_extent(fh, size, where)
    if entries > MAX_ENTRIES:
        raise EncoderInvalid(f"{where}: {entries} entries, more than the {MAX_ENTRIES} an "
                             "encoder archive may hold")
    if dir_size > MAX_DIRECTORY_BYTES:
        raise EncoderInvalid(f"{where}: a central directory of {dir_size} bytes, more than "
                             f"the {MAX_DIRECTORY_BYTES} an encoder archive needs")
    fh.seek(0)
    try:
        with zipfile.ZipFile(fh) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError,
            UnicodeDecodeError) as exc:
        raise EncoderInvalid(f"{where}: not a readable zip archive: {exc}") from None
    if len(infos) > MAX_ENTRIES:
        raise EncoderInvalid(f"{where}: {len(infos)} entries, more than the {MAX_ENTRIES} "
                             "an encoder archive may hold")
    return _check_entries(infos, size, where)


def _name_problem(info: zipfile.ZipInfo) -> str | None:
    """Why an entry's name may not be unpacked anywhere, or None."""
    raw, name = info.orig_filename, info.filename
    if "\0" in raw:
        return "a NUL character in its name"
    if "\\" in name:
        return "a backslash in its name (a Windows path separator)"
    if name.startswith("/"):
        return "an absolute path"
    if re.match(r"[A-Za-z]:", name):
        return "a drive letter"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "a control character in its name"
    parts = name[:-1].split("/") if name.endswith("/") else name.split("/")
    if ".." in parts:
        return "a '..' component (it would land outside the folder)"
    if "" in parts or "." in parts:
        return "an empty or '.' component"
    return None


def _entry_problem(info: zipfile.ZipInfo, size: int) -> str | None:
    """Why an entry is not a plain file or folder that can be inflated as declared, or None."""
    kind = stat.S_IFMT(info.external_attr >> 16)
    folder = info.filename.endswith("/")
    if kind in _KINDS:
        return _KINDS[kind]
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return f"an entry of file type {kind:#o}"
    if kind == stat.S_IFDIR and not folder or kind == stat.S_IFREG and folder \
            or info.external_attr & _DOS_DIRECTORY and not folder:
        return "an entry whose type and name disagree (file or folder)"
    if info.flag_bits & (_FLAG_ENCRYPTED | _FLAG_STRONG_ENCRYPTION):
        return "an encrypted entry"
    if info.compress_type not in _METHODS:
        return f"compression method {info.compress_type}, which the standard library " \
               "cannot inflate"
    if folder and (info.file_size or info.compress_size):
        return "a folder entry holding data"
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        return "a stored entry whose declared sizes differ"
    if info.header_offset + info.compress_size > size:
        return "data said to lie past the end of the archive"
    if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        return (f"{info.compress_size} bytes said to inflate to {info.file_size} (more than "
                f"{MAX_RATIO} to 1: a decompression bomb)")
    return None


def _check_entries(infos: Iterable[zipfile.ZipInfo], size: int, where: str) -> ArchiveListing:
    """Apply every per-entry and whole-archive check; return the listing."""
    folded: dict[str, str] = {}
    tops: set[str] = set()
    files: list[ArchiveMember] = []
    folders: list[str] = []
    skipped = declared = 0
    for info in infos:
        declared += info.file_size
        why = _name_problem(info)
        if why is None and declared > MAX_UNPACKED_BYTES:
            why = (f"{info.file_size} bytes declared, {declared} with the entries before it: "
                   f"more than the {MAX_UNPACKED_BYTES} bytes (3 GiB) any Whisper encoder needs")
        why = why or _entry_problem(info, size)
        if why:
            raise EncoderInvalid(f"{where}: entry {info.filename!r}: {why}")
        key = info.filename.rstrip("/")
        first = folded.get(key.casefold())
        if first == key:
            raise EncoderInvalid(f"{where}: entry {key!r} appears twice")
        if first is not None:
            raise EncoderInvalid(f"{where}: entries {first!r} and {key!r} differ only in "
                                 "case (one file on macOS's case-insensitive volumes)")
        folded[key.casefold()] = key
        head, _, rest = key.partition("/")
        if head == MACOS_RESOURCES:
            skipped += 1
            continue
        tops.add(head)
        if not rest:
            if not info.is_dir():
                raise EncoderInvalid(f"{where}: entry {key!r} is a file outside a top-level "
                                     "<name>.mlmodelc folder")
            continue
        parts = rest.split("/")
        litter = [c for i, c in enumerate(parts)
                  if is_os_litter(c, folder=info.is_dir() or i < len(parts) - 1)]
        if litter:
            raise EncoderInvalid(
                f"{where}: entry {key!r} is a file macOS writes on its own ({litter[0]!r}); it "
                f"would change the encoder's tree digest: remove it with `zip -d {where} "
                f"'{key}{'/*' if info.is_dir() else ''}'`")
        if info.is_dir():
            folders.append(rest)
        else:
            files.append(ArchiveMember(rest, info.file_size, info.CRC))
    return _listing_of(tops, files, folders, skipped, declared, where)


def _listing_of(tops: set[str], files: list[ArchiveMember], folders: list[str], skipped: int,
                declared: int, where: str) -> ArchiveListing:
    """Check the archive's shape (one ``.mlmodelc`` folder, its required files)."""
    if len(tops) != 1:
        shown = ", ".join(sorted(tops)[:3]) or "nothing"
        raise EncoderInvalid(f"{where}: entries outside a single top-level <name>.mlmodelc "
                             f"folder (it holds {shown}); upstream's archives hold one")
    (top,) = tops
    if not top.endswith(".mlmodelc"):
        raise EncoderInvalid(f"{where}: its top-level folder {top!r} does not end in "
                             ".mlmodelc (a compiled Core ML encoder is expected)")
    names = {f.path for f in files}
    clash = sorted(n for n in names | set(folders)
                   if any(p in names for p in _parents(n)))
    if clash:
        raise EncoderInvalid(f"{where}: entry {top}/{clash[0]!r} lies under a name that is a "
                             "file")
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise EncoderInvalid(f"{where}: {top} is not a compiled Core ML model (no "
                             f"{', '.join(missing)})")
    return ArchiveListing(top, tuple(sorted(files, key=lambda f: f.path)),
                          tuple(sorted(folders)), skipped, declared)


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


# ----------------------------------------------------------------------------- unpacking

_INFLATE_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError,
                   RuntimeError, NotImplementedError)
"""What inflating a hostile member may raise besides OSError (lzma's and bz2's errors are
ValueError and OSError subclasses, zipfile's CRC mismatch BadZipFile)."""


def unpack(path: str | os.PathLike[str], dest: str | os.PathLike[str]) -> UnpackedEncoder:
    """Check an archived encoder again and unpack it into a fresh folder, as regular files.

    The archive is opened once: its SHA-256 is computed from that open file, and the same
    file is checked and read, so the digest names the bytes that were unpacked even if the
    path is replaced meanwhile.

    Parameters
    ----------
    path : path-like
        The ``….mlmodelc.zip``.
    dest : path-like
        An empty folder (created when absent); the encoder is unpacked as
        ``dest/<name>.mlmodelc``.

    Returns
    -------
    UnpackedEncoder

    Raises
    ------
    EncoderInvalid
        For an unsafe archive, a member that inflates past (or short of) its declared size
        or fails its CRC, or a folder that is not empty.
    """
    p, out = Path(path), Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise EncoderInvalid(f"{out}: not an empty folder to unpack {p.name} into")
    try:
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            digest = hashlib.sha256()
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(chunk)
            listing = _listing(fh, size, str(p))
            folder = out / listing.top
            _extract(fh, listing, folder, None, str(p))
    except OSError as exc:
        raise EncoderInvalid(f"{p}: cannot be unpacked: {exc}") from None
    return UnpackedEncoder(folder, digest.hexdigest(), size, listing)


def _extract(fh: IO[bytes], listing: ArchiveListing, folder: Path, only: set[str] | None,
             where: str) -> None:
    """Write the listed folders and files under ``folder``, each file created new."""
    folder.mkdir()
    for rel in listing.folders:
        folder.joinpath(*rel.split("/")).mkdir(parents=True, exist_ok=True)
    fh.seek(0)
    with zipfile.ZipFile(fh) as zf:
        for member in listing.files:
            if only is not None and member.path not in only:
                continue
            name = f"{listing.top}/{member.path}"
            target = folder.joinpath(*member.path.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with zf.open(name) as src, open(target, "xb") as dst:
                    left = member.size
                    for chunk in iter(lambda: src.read(_CHUNK), b""):
                        left -= len(chunk)
                        if left < 0:
                            raise EncoderInvalid(f"{where}: entry {name!r} inflates past its "
                                                 f"declared {member.size} bytes")
                        dst.write(chunk)
            except _INFLATE_ERRORS as exc:
                raise EncoderInvalid(f"{where}: entry {name!r} cannot be inflated: "
                                     f"{exc}") from None
            if left:
                raise EncoderInvalid(f"{where}: entry {name!r} inflates to {member.size - left} "
                                     f"bytes, not its declared {member.size}")
    strays = [q for q in folder.rglob("*") if q.is_symlink() or not (q.is_file() or q.is_dir())]
    if strays:  # nothing above makes one; a folder shared with another writer could
        raise EncoderInvalid(f"{where}: unpacking left {strays[0]}, not a regular file")


def describe_archive(path: str | os.PathLike[str]) -> "EncoderCard":
    """Read an archived encoder's card, unpacking only what the card reader reads.

    Used at validation: the archive is checked, then ``metadata.json``, ``coremldata.bin``
    and ``model.mil`` (megabytes, not the weights, and not hashed) go to a private
    temporary folder, never beside the archive. ``model.mil`` must parse, and each weight
    it names must be a file the archive lists.

    Parameters
    ----------
    path : path-like
        The ``….mlmodelc.zip``.

    Returns
    -------
    EncoderCard
        As :func:`~verifylib.models.encoder_reader.describe_encoder` reads the folder.

    Raises
    ------
    EncoderInvalid
        For an unsafe archive or an unreadable encoder.
    """
    from verifylib.models.encoder_reader import (
        MLMODELC_REQUIRED,
        describe_encoder,
        model_mil_refs,
    )

    p = Path(path)
    with tempfile.TemporaryDirectory(prefix="verifylib-encoder-") as tmp:
        try:
            with open(p, "rb") as fh:
                listing = _listing(fh, os.fstat(fh.fileno()).st_size, str(p))
                folder = Path(tmp) / listing.top
                _extract(fh, listing, folder, {*MLMODELC_REQUIRED, "model.mil"}, str(p))
        except OSError as exc:
            raise EncoderInvalid(f"{p}: cannot be unpacked: {exc}") from None
        # The weights stay packed: each reference must name a file the archive lists.
        try:
            refs = model_mil_refs(folder)
        except EncoderInvalid as exc:  # named by the archive, not the private folder
            raise EncoderInvalid(str(exc).replace(str(folder), f"{p}: {listing.top}")) from None
        listed = {m.path for m in listing.files}
        for name, _offset in refs:
            rel = weight_path(p, "", name, f"{listing.top}/model.mil")
            if rel not in listed:
                raise EncoderInvalid(f"{p}: {listing.top}/model.mil names weight file {rel}, "
                                     "which the archive does not hold")
        return describe_encoder(folder)


def tree_problems(folder: str | os.PathLike[str],
                  files: Iterable[ArchiveMember]) -> list[str]:
    """Hold a folder against the regular files an archive listed: paths, sizes, CRC-32s.

    Parameters
    ----------
    folder : path-like
        An unpacked (or published) ``.mlmodelc`` folder.
    files : iterable of ArchiveMember
        What the archive's central directory declared.

    Returns
    -------
    list of str
        Each difference; empty when the folder holds exactly those files with those bytes.
    """
    root = Path(folder)
    want = {m.path: m for m in files}
    have = {q.relative_to(root).as_posix(): q for q in root.rglob("*")
            if q.is_symlink() or not q.is_dir()}
    problems = [f"{root.name}/{rel}: not in the archive" for rel in sorted(set(have) - set(want))]
    problems += [f"{root.name}/{rel}: listed by the archive, absent"
                 for rel in sorted(set(want) - set(have))]
    for rel in sorted(set(want) & set(have)):
        q, m = have[rel], want[rel]
        if q.is_symlink() or not q.is_file():
            problems.append(f"{root.name}/{rel}: not a regular file")
            continue
        crc, size = 0, 0
        with open(q, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                crc, size = zlib.crc32(chunk, crc), size + len(chunk)
        if (size, crc) != (m.size, m.crc32):
            problems.append(f"{root.name}/{rel}: {size} bytes, CRC-32 {crc:08x}; the archive "
                            f"declared {m.size} bytes, CRC-32 {m.crc32:08x}")
    return problems
