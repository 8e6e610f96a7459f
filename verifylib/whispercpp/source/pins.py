"""The pin manifest: which upstream whisper.cpp trees are supported, and with which patch.

A pin names an upstream commit, the git tree id of its pristine source and the exact
compatibility patch (its file, the patch's SHA-256 and the paths it touches). This module
reads and validates ``patches/manifest.yaml`` and a manifest a parameter file brings of its
own (``runtime.manifest``, :func:`load_user_pins`), says what a build records of its pin, and
holds the check behind ``build.source_identity`` (a computed tree id against the pin's).
That check takes plain JSON-able dicts, so ``verifylib verify`` can re-judge the stored
evidence later without the source tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from verifylib.canonical import is_sha256, sha256_file
from verifylib.errors import ParametersInvalid
from verifylib.resources import manifest_path
from verifylib.user_yaml import check_tree, read, shorten

GIT_OID_RE = re.compile(r"^[0-9a-f]{40}$")
_PIN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PIN_KEYS = frozenset({"commit", "tree", "patch", "patch_sha256", "touches"})
# What ``verifylib pin-check --write-manifest`` could not run on its host (its Core ML row
# off a Mac): recorded with the entry, read back, never judged.
_OPTIONAL_KEYS = frozenset({"not_run_here"})


# ----------------------------------------------------------------------------- pins

@dataclass(frozen=True)
class Pin:
    """One supported upstream pin and its compatibility patch.

    Attributes
    ----------
    name : str
        Manifest key, e.g. ``"v1.8.5"``.
    commit : str
        Upstream commit id (40 hex).
    tree : str
        Git tree id of the pristine upstream source (40 hex).
    patch_path : Path
        The patch file.
    patch_sha256 : str
        The SHA-256 the manifest declares for the patch file's bytes.
    touches : tuple of str
        Repository-relative paths the patch modifies; ``git status`` must list exactly
        these, as `` M <path>``.
    not_run_here : tuple of str
        The patch-deletion conditions ``verifylib pin-check`` could not run where it wrote
        the entry (optional key ``not_run_here``; empty for the packaged pins).
    """

    name: str
    commit: str
    tree: str
    patch_path: Path
    patch_sha256: str
    touches: tuple[str, ...]
    not_run_here: tuple[str, ...] = ()

    def patch_bytes(self) -> bytes:
        """Return the patch file's bytes as they are on disk now."""
        return self.patch_path.read_bytes()


def _manifest_error(manifest: Path, where: str, msg: str) -> ParametersInvalid:
    return ParametersInvalid(f"{manifest}: {where}: {msg}")


def check_rel_path(value: Any) -> str | None:
    """Return an error message if ``value`` is not a plain relative POSIX path."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    p = PurePosixPath(value)
    if (p.is_absolute() or "\\" in value
            or any(part in ("", ".", "..") for part in value.split("/"))):
        return f"{shorten(repr(value))} must be a relative path without '.', '..' or empty parts"
    return None


def pin_name_problem(name: Any) -> str | None:
    """Return why ``name`` cannot name a pin, or None when it can.

    Parameters
    ----------
    name : object
        A proposed manifest key.

    Returns
    -------
    str or None
        The message (letters, digits, '.', '_' or '-', starting with a letter or digit).
    """
    if isinstance(name, str) and _PIN_NAME_RE.match(name):
        return None
    return ("name must be a string of letters, digits, '.', '_' or '-' "
            "(quote names YAML would read as numbers)")


def load_pins(manifest: Path | None = None, patches_dir: Path | None = None) -> dict[str, Pin]:
    """Read and validate the pin manifest.

    Parameters
    ----------
    manifest : Path, optional
        The YAML manifest; defaults to the repository's ``patches/manifest.yaml``.
    patches_dir : Path, optional
        Folder holding the patch files; defaults to the manifest's folder.

    Returns
    -------
    dict of str to Pin
        Pins by name, in manifest order.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        A ``ValueError``, naming the manifest and the pin or key in one line, if the
        manifest is malformed: not a mapping with a non-empty ``pins`` mapping,
        unknown or missing keys, a commit/tree that is not 40 lower-case hex digits, a
        ``patch_sha256`` that is not 64 lower-case hex digits, an unsafe path, or a patch
        file that does not exist. A patch file whose bytes no longer match its declared
        digest is *not* an error here:
        :func:`verifylib.whispercpp.source.patch.check_patch_exact` reports that drift
        (a manifest the user brings is held to its digests at once: :func:`load_user_pins`).
    """
    manifest = Path(manifest) if manifest is not None else manifest_path()
    patches_dir = Path(patches_dir) if patches_dir is not None else manifest.parent
    # A manifest the user brings (runtime.manifest) is as hostile as a parameter file:
    # read under the same limits (no alias, bounded size, depth and strings), in one line.
    doc = read(manifest, "manifest")
    check_tree(doc, str(manifest), "manifest")
    if not isinstance(doc, dict) or not isinstance(doc.get("pins"), dict) or not doc["pins"]:
        raise _manifest_error(manifest, "top level",
                              "expected a mapping with a non-empty 'pins' mapping")
    pins: dict[str, Pin] = {}
    for name, entry in doc["pins"].items():
        problem = pin_name_problem(name)
        if problem:
            raise _manifest_error(manifest, f"pin {shorten(repr(name))}", problem)
        pins[name] = _entry(manifest, patches_dir, name, entry)
    return pins


def _entry(manifest: Path, patches_dir: Path, name: str, entry: Any) -> Pin:
    """One manifest entry, checked key by key (see :func:`load_pins`)."""
    where = f"pin {name!r}"
    if not isinstance(entry, dict):
        raise _manifest_error(manifest, where, "expected a mapping")
    missing = sorted(_PIN_KEYS - entry.keys())
    unknown = sorted(set(map(str, entry.keys())) - _PIN_KEYS - _OPTIONAL_KEYS)
    if missing or unknown:
        raise _manifest_error(manifest, where,
                              f"missing keys {missing}, unknown keys {shorten(unknown, 200)}")
    for key in ("commit", "tree"):
        val = entry[key]
        if not isinstance(val, str) or not GIT_OID_RE.match(val):
            raise _manifest_error(manifest, where,
                                  f"{key} must be 40 lower-case hex digits (quoted), "
                                  f"got {shorten(repr(val))}")
    if not is_sha256(entry["patch_sha256"]):
        raise _manifest_error(manifest, where,
                              "patch_sha256 must be 64 lower-case hex digits, "
                              f"got {shorten(repr(entry['patch_sha256']))}")
    err = check_rel_path(entry["patch"])
    if err:
        raise _manifest_error(manifest, where, f"patch {err}")
    patch_path = patches_dir / entry["patch"]
    if not patch_path.is_file():
        raise _manifest_error(manifest, where, f"patch file {patch_path} does not exist")
    touches = entry["touches"]
    if not isinstance(touches, list) or not touches:
        raise _manifest_error(manifest, where, "touches must be a non-empty list of paths")
    for t in touches:
        err = check_rel_path(t)
        if err:
            raise _manifest_error(manifest, where, f"touches entry {err}")
    if len(set(touches)) != len(touches):
        raise _manifest_error(manifest, where, "touches lists a path twice")
    not_run = entry.get("not_run_here", [])
    if not isinstance(not_run, list) or not all(isinstance(x, str) and x for x in not_run):
        raise _manifest_error(manifest, where, "not_run_here must be a list of non-empty "
                                               "strings")
    return Pin(name=name, commit=entry["commit"], tree=entry["tree"], patch_path=patch_path,
               patch_sha256=entry["patch_sha256"], touches=tuple(touches),
               not_run_here=tuple(not_run))


# ----------------------------------------------------------------------------- user pins

def load_user_pins(manifest: Path, packaged: Mapping[str, Pin] | None = None
                   ) -> dict[str, Pin]:
    """Read a manifest the user brings (``runtime.manifest``), held to its digests at once.

    Its entries have the packaged format (:func:`load_pins`; patch files relative to the
    manifest). Unlike the packaged manifest, whose patch drift ``build.patch_exact``
    reports, a user's manifest is refused before any work when a patch file's bytes are
    not the digest its entry declares: nothing but that file vouches for the pin.

    Parameters
    ----------
    manifest : Path
        The user's manifest file.
    packaged : mapping, optional
        The packaged pins (default: :func:`load_pins`), whose names a user pin may not
        take, also in another case.

    Returns
    -------
    dict of str to Pin
        The user's pins by name, in file order.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        One line naming the manifest and the pin: what :func:`load_pins` refuses, a
        patch file whose SHA-256 differs from its ``patch_sha256``, a patch file that is
        the manifest itself, or a name that clashes with a packaged pin.
    """
    manifest = Path(manifest)
    pins = load_pins(manifest)
    packaged = load_pins() if packaged is None else packaged
    taken = {n.casefold(): n for n in packaged}
    for name, pin in pins.items():
        where = f"pin {name!r}"
        if name.casefold() in taken:
            raise _manifest_error(manifest, where,
                                  f"the name clashes with verifylib's packaged pin "
                                  f"{taken[name.casefold()]!r}; give the user pin another name")
        if pin.patch_path.resolve() == manifest.resolve():
            raise _manifest_error(manifest, where, "patch names the manifest itself")
        try:
            actual = sha256_file(pin.patch_path)
        except OSError as exc:
            raise _manifest_error(manifest, where, f"cannot read patch file "
                                                   f"{pin.patch_path}: {exc}") from None
        if actual != pin.patch_sha256:
            raise _manifest_error(manifest, where,
                                  f"patch_sha256 {pin.patch_sha256} differs from the SHA-256 "
                                  f"of patch file {pin.patch_path} ({actual})")
    return pins


def patch_rel_path(manifest: Path, pin: Pin) -> str:
    """Return a user pin's ``patch`` as its manifest writes it (relative to the manifest).

    Parameters
    ----------
    manifest : Path
        The manifest the pin was loaded from.
    pin : Pin
        The pin.

    Returns
    -------
    str
        The POSIX path of the patch file relative to the manifest's folder.
    """
    return pin.patch_path.relative_to(Path(manifest).parent).as_posix()


def available_pins(user_manifest: str | Path | None = None) -> dict[str, Pin]:
    """Return the pins a parameter file may name: the packaged ones, then its own manifest's.

    Parameters
    ----------
    user_manifest : path-like, optional
        The parameter file's ``runtime.manifest`` (resolved), or None.

    Returns
    -------
    dict of str to Pin
        Packaged pins first, then the user's (:func:`load_user_pins`).
    """
    packaged = load_pins()
    if user_manifest is None:
        return packaged
    return {**packaged, **load_user_pins(Path(user_manifest), packaged)}


# ----------------------------------------------------------------------------- judging

def is_oid(value: Any) -> bool:
    """Tell whether ``value`` is a git object id (40 lower-case hex digits).

    Parameters
    ----------
    value : object
        The value to check.

    Returns
    -------
    bool
        True for a string matching :data:`GIT_OID_RE`.
    """
    return isinstance(value, str) and bool(GIT_OID_RE.match(value))


def pin_fields(pin: Pin) -> dict[str, Any]:
    """Return what a build sidecar records of its pin.

    The validator compares these fields with the manifest.

    Parameters
    ----------
    pin : Pin
        The pin.

    Returns
    -------
    dict
        ``pin``, ``pin_commit``, ``pin_tree``, ``declared_patch_sha256`` and ``touches``.
    """
    return {"pin": pin.name, "pin_commit": pin.commit, "pin_tree": pin.tree,
            "declared_patch_sha256": pin.patch_sha256, "touches": list(pin.touches)}


