"""Canonical JSON, digests and atomic publishing writes.

Written by hand because the evidence format has two rules no serializer offers
together: strict JSON (no ``NaN``/``Infinity`` tokens, non-finite floats become the
strings ``"nan"``, ``"inf"``, ``"-inf"``) and byte-stable output (sorted keys, UTF-8,
fixed separators) so that a SHA-256 of a sidecar identifies its content.

The digests count every file, so the files macOS writes into a folder on its own
(``.DS_Store``, ``._*``) change them: :func:`os_litter` finds those for a refusal to name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def _normalize(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _normalize(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return _normalize(value.value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"canonical JSON keys must be strings, got {k!r}")
            out[k] = _normalize(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    # numpy scalars and similar expose item(); keep this import-free.
    item = getattr(value, "item", None)
    if callable(item):
        return _normalize(item())
    raise TypeError(f"cannot write {type(value).__name__} as canonical JSON")


def dumps(value: Any) -> bytes:
    """Serialize ``value`` to canonical JSON bytes.

    Parameters
    ----------
    value : Any
        Dicts, lists, strings, numbers, booleans, ``None``, dataclasses, enums and paths.

    Returns
    -------
    bytes
        UTF-8 JSON with sorted keys and no insignificant whitespace, ending in a newline.
        Non-finite floats are written as ``"nan"``, ``"inf"`` or ``"-inf"``.
    """
    text = json.dumps(_normalize(value), sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"), allow_nan=False)
    return (text + "\n").encode("utf-8")


def loads(data: bytes | str) -> Any:
    """Parse strict JSON, refusing ``NaN``/``Infinity`` tokens.

    Parameters
    ----------
    data : bytes or str
        The JSON document.

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    ValueError
        If the document is not strict JSON.
    """
    def _refuse(token: str) -> Any:
        raise ValueError(f"non-strict JSON token {token!r}")

    if isinstance(data, bytes):
        data = data.decode("utf-8")
    return json.loads(data, parse_constant=_refuse)


def sha256_bytes(data: bytes) -> str:
    """Return the hex SHA-256 of ``data``.

    Parameters
    ----------
    data : bytes
        The bytes to hash.

    Returns
    -------
    str
        64 lower-case hex digits.
    """
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """Return the hex SHA-256 of a file's bytes, read in chunks.

    Parameters
    ----------
    path : path-like
        The file to hash.

    Returns
    -------
    str
        64 lower-case hex digits.
    """
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_digest(root: str | os.PathLike) -> str:
    """Digest a directory: SHA-256 over sorted ``relative-path NUL file-sha256`` lines.

    Parameters
    ----------
    root : path-like
        Directory to digest (symlinks are digested as their target text).

    Returns
    -------
    str
        Hex SHA-256 identifying the tree's paths and file contents.
    """
    root = Path(root)
    lines = []
    for p in sorted(root.rglob("*"), key=lambda q: q.relative_to(root).as_posix()):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            lines.append(f"{rel}\0link:{os.readlink(p)}\n")
        elif p.is_file():
            lines.append(f"{rel}\0{sha256_file(p)}\n")
    return sha256_bytes("".join(lines).encode("utf-8"))


# What macOS writes into folders on its own: Finder's view settings, AppleDouble
# companions (``._name``, on volumes and in archives without extended attributes), the
# resource folder of Archive Utility's zips, a folder's custom icon, and a volume root's
# indexes and trash. A digest or a git tree id counts each of them like any other file.
_LITTER_FILES = frozenset({".DS_Store", "Icon\r"})
_LITTER_FOLDERS = frozenset({"__MACOSX", ".Spotlight-V100", ".Trashes", ".fseventsd",
                             ".TemporaryItems", ".DocumentRevisions-V100"})
_APPLEDOUBLE_PREFIX = "._"


def os_litter(root: str | os.PathLike) -> tuple[str, ...]:
    """List the files and folders under ``root`` that macOS writes on its own.

    They are counted by :func:`tree_digest` and by a git tree id like any other file, so
    a folder that Finder opened no longer has its published identity. Nothing is removed
    or skipped here: the caller names them in its refusal. ``.git`` folders are not
    searched (no identity here covers them).

    Parameters
    ----------
    root : path-like
        The folder to search.

    Returns
    -------
    tuple of str
        Their paths relative to ``root`` (POSIX form, sorted); a litter folder is listed,
        not what it holds. Empty when there are none or ``root`` is not a folder.
    """
    root = Path(root)
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        for d in sorted(dirs):
            if is_os_litter(d, folder=True):
                found.append((here / d).relative_to(root).as_posix())
        dirs[:] = [d for d in dirs if d != ".git" and not is_os_litter(d, folder=True)]
        for f in files:
            if is_os_litter(f, folder=False):
                found.append((here / f).relative_to(root).as_posix())
    return tuple(sorted(found))


def is_os_litter(name: str, *, folder: bool) -> bool:
    r"""Tell whether one file or folder name is one macOS writes on its own.

    Parameters
    ----------
    name : str
        A single path component.
    folder : bool
        Whether it names a folder.

    Returns
    -------
    bool
        True for ``.DS_Store``, ``Icon\r``, an AppleDouble ``._*`` companion, and (as a
        folder) ``__MACOSX``, ``.Spotlight-V100`` and the other volume folders.
    """
    if name.startswith(_APPLEDOUBLE_PREFIX):
        return True
    return name in (_LITTER_FOLDERS if folder else _LITTER_FILES)


def describe_litter(root: str | os.PathLike, found: tuple[str, ...], *, shown: int = 5) -> str:
    """Name the litter :func:`os_litter` found and the commands that remove it.

    Parameters
    ----------
    root : path-like
        The folder searched.
    found : tuple of str
        What :func:`os_litter` returned (not empty).
    shown : int
        How many paths to name before counting the rest.

    Returns
    -------
    str
        ``found .DS_Store, sub/._x (…) in ROOT; remove them with `…```.
    """
    import shlex
    q = shlex.quote(str(root))
    names = ", ".join(repr(f) if "\r" in f else f for f in found[:shown])
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    leaves = {Path(f).name for f in found}
    fixes = []
    if ".DS_Store" in leaves:
        fixes.append(f"find {q} -name .DS_Store -delete")
    if any(n.startswith(_APPLEDOUBLE_PREFIX) for n in leaves):
        fixes.append(f"find {q} -name '._*' -delete")
    if "Icon\r" in leaves:
        fixes.append(f"find {q} -name $'Icon\\r' -delete")
    fixes += [f"rm -rf {shlex.quote(str(Path(root) / f))}" for f in found
              if Path(f).name in _LITTER_FOLDERS]
    return (f"found {names}{more} in {root} (files macOS writes on its own); remove them "
            f"with `{' && '.join(fixes)}`")


def is_sha256(value: Any) -> bool:
    """Return True if ``value`` is a well-formed lower-case hex SHA-256 string.

    Parameters
    ----------
    value : Any
        The value to check (anything but a ``str`` is not one).

    Returns
    -------
    bool
        True iff ``value`` is exactly 64 lower-case hex digits.
    """
    return isinstance(value, str) and bool(SHA256_RE.match(value))


def set_published_mode(fd: int) -> None:
    """Give a staging file made by ``mkstemp`` (mode 0600) the usual umask-based mode.

    Parameters
    ----------
    fd : int
        The open file's descriptor; its mode becomes ``0o666 & ~umask``.
    """
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, replace: bool = True) -> str:
    """Write ``data`` to a staging file beside ``path`` and rename it into place.

    Parameters
    ----------
    path : path-like
        Final location; its parent folder is created if needed.
    data : bytes
        Content to publish.
    replace : bool
        ``False`` links the staging file into place instead, which fails rather than
        replace a file already there (for records written once).

    Returns
    -------
    str
        SHA-256 of the published bytes.

    Raises
    ------
    FileExistsError
        With ``replace=False``, when ``path`` exists (nothing is written).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".staging", dir=path.parent)
    try:
        set_published_mode(fd)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return sha256_bytes(data)


def write_json(path: str | os.PathLike, value: Any) -> str:
    """Publish ``value`` as canonical JSON at ``path`` atomically and return its SHA-256.

    Parameters
    ----------
    path : path-like
        Final location (see :func:`atomic_write_bytes`; an existing file is replaced).
    value : Any
        Anything :func:`dumps` accepts.

    Returns
    -------
    str
        SHA-256 of the written bytes.
    """
    return atomic_write_bytes(path, dumps(value))


def read_json(path: str | os.PathLike) -> Any:
    """Read a strict JSON file.

    Parameters
    ----------
    path : path-like
        The file.

    Returns
    -------
    Any
        The parsed value (see :func:`loads`).

    Raises
    ------
    ValueError
        If the file is not strict JSON.
    """
    return loads(Path(path).read_bytes())


READ_ONLY_FILE = 0o444
READ_ONLY_DIR = 0o555


def seal_read_only(folder: str | os.PathLike) -> None:
    """Make a published folder read-only on disk: files 0444, folders 0555.

    Nothing then saves into a published run by accident (Jupyter refuses to write a
    file it may not write, and cannot create its ``.ipynb_checkpoints``). It is no lock:
    the owner can ``chmod`` it back, and root ignores modes; ``verify`` still decides.
    Links are left as they are (their target is not the run's to change).

    Parameters
    ----------
    folder : path-like
        A published run.
    """
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, READ_ONLY_FILE)
        for name in dirs:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, READ_ONLY_DIR)
    os.chmod(folder, READ_ONLY_DIR)


@contextlib.contextmanager
def writable_folder(folder: str | os.PathLike) -> Iterator[Path]:
    """Let the owner add a file to a sealed folder for the block's duration, then seal it.

    Parameters
    ----------
    folder : path-like
        A folder :func:`seal_read_only` sealed (or any folder: its mode is restored).

    Yields
    ------
    Path
        The folder.
    """
    path = Path(folder)
    mode = path.stat().st_mode & 0o7777
    os.chmod(path, mode | 0o200)
    try:
        yield path
    finally:
        os.chmod(path, mode)


def publish_dir(staging: str | os.PathLike, final: str | os.PathLike) -> Path:
    """Rename a fully written staging folder into its final place.

    An existing ``final`` folder is replaced only after the new one is complete, so a
    reader never sees a half-written folder.

    Parameters
    ----------
    staging : path-like
        Complete folder, on the same filesystem as ``final``.
    final : path-like
        Destination.

    Returns
    -------
    Path
        The final path.
    """
    staging, final = Path(staging), Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, final)
    return final
