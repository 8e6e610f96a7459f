"""A user pin's manifest entry for a candidate tree: its patch generated, proved and written.

``verifylib pin-check CANDIDATE --write-manifest FILE`` ends here once every
patch-deletion condition it can run on its host has been assessed. The entry has the
packaged manifest's format (commit, tree id, patch file, the patch's SHA-256, the paths it
touches) plus ``not_run_here``, the conditions the host could not run, so a parameter file
can name it (``runtime.manifest``) and :func:`verifylib.whispercpp.source.load_user_pins`
reads it back.

The patch is not copied from another pin: it is made for the candidate. The candidate is
committed into a scratch git work tree, the one uninitialized declaration
(``whisper_batch batch;`` in ``struct whisper_state``, at the line pin-check found) gets
the compatibility initializer, and ``git diff --no-ext-diff --binary --full-index`` gives
the bytes, whose ``index`` lines carry the candidate's full blob ids (only full-index
bytes are reproducible). Before anything is written the patch is proved as stage 01 will
use it: applied to a fresh copy of the candidate and checked exact
(:func:`verifylib.whispercpp.source.check_patch_exact`). Each file is written to a staging
file beside its destination and linked into place, never replacing a file: the patch
first, so the manifest never names a missing patch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import yaml

from verifylib.canonical import atomic_write_bytes, sha256_bytes
from verifylib.errors import ParametersInvalid
from verifylib.runtime import contracts
from verifylib.runtime.runner import CommandError
from verifylib.whispercpp.source.fetch import copy_tree, run_git
from verifylib.whispercpp.source.patch import PatchError, check_patch_exact, prepare_patched_tree
from verifylib.whispercpp.source.pins import (
    Pin,
    load_pins,
    load_user_pins,
    pin_name_problem,
)

TOUCHED = "src/whisper.cpp"
"""The one file the compatibility patch changes."""


@dataclass(frozen=True)
class PinEntry:
    """A manifest entry for one candidate tree.

    Attributes
    ----------
    name : str
        The pin's name (the manifest key).
    commit : str
        The upstream commit the user declares for the tree (40 hex).
    tree : str
        The candidate's git tree id.
    patch : bytes
        The generated full-index patch.
    touches : tuple of str
        The paths it modifies.
    not_run_here : tuple of str
        The patch-deletion conditions the host could not run, each with its reason.
    """

    name: str
    commit: str
    tree: str
    patch: bytes
    touches: tuple[str, ...]
    not_run_here: tuple[str, ...]

    @property
    def patch_sha256(self) -> str:
        """The SHA-256 of :attr:`patch`."""
        return sha256_bytes(self.patch)


def patch_destination(manifest: Path, name: str) -> Path:
    """Return where the entry's patch file goes: ``<name>.patch`` beside the manifest.

    Parameters
    ----------
    manifest : Path
        The manifest to write.
    name : str
        The pin's name.

    Returns
    -------
    Path
    """
    return Path(manifest).parent / f"{name}.patch"


def check_destination(manifest: Path, name: str) -> None:
    """Refuse, before any work, a manifest or pin name the entry could not be written as.

    Parameters
    ----------
    manifest : Path
        The manifest to write (it must not exist: pin-check never replaces a manifest).
    name : str
        The pin's name.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        One line naming the file: a malformed name, a name that clashes with a packaged
        pin (also in another case), or a manifest or patch file that exists already.
    """
    manifest = Path(manifest)
    problem = pin_name_problem(name)
    if problem:
        raise ParametersInvalid(f"{manifest}: pin {name!r}: {problem}")
    taken = {n.casefold(): n for n in load_pins()}
    if name.casefold() in taken:
        raise ParametersInvalid(f"{manifest}: pin {name!r}: the name clashes with verifylib's "
                                f"packaged pin {taken[name.casefold()]!r}; choose another "
                                "(--name)")
    for path in (manifest, patch_destination(manifest, name)):
        if path.exists() or path.is_symlink():
            raise ParametersInvalid(f"{path}: exists already; pin-check never replaces a "
                                    "file: write to a new manifest")


def generate_patch(src: Path, tree: str, line: int, scratch: Path) -> bytes:
    """Make the candidate's compatibility patch with git, as the packaged ones were made.

    Parameters
    ----------
    src : Path
        The candidate's source folder (only read).
    tree : str
        Its git tree id (the scratch commit must have it).
    line : int
        The 1-based line of ``whisper_batch batch;`` in ``src/whisper.cpp``.
    scratch : Path
        A folder to work in (must not exist).

    Returns
    -------
    bytes
        ``git diff --no-ext-diff --binary --full-index HEAD`` after the one-line change.

    Raises
    ------
    PatchError
        If git fails, the copy is not the tree, or the line is not the declaration.
    """
    work = scratch / "tree"
    git_dir = work / ".git"
    try:
        copy_tree(src, work)
        for args in (["init", "-q"], ["add", "-A", "-f", "--", "."],
                     ["commit", "-q", "--no-verify", "-m", "pristine candidate"]):
            run_git(args, git_dir=git_dir, work_tree=work, cwd=work)
        head = run_git(["rev-parse", "HEAD^{tree}"], git_dir=git_dir, work_tree=work,
                       cwd=work).stdout_text.strip()
    except (CommandError, OSError) as exc:
        raise PatchError(f"cannot commit the candidate {src} into a scratch tree: {exc}") from exc
    if head != tree:
        raise PatchError(f"the candidate {src} has tree {head}, not {tree}: it changed")
    target = work / TOUCHED
    lines = target.read_bytes().split(b"\n")
    old, new = (contracts.BATCH_MEMBER_UNINITIALIZED.encode(),
                contracts.BATCH_MEMBER_PATCHED.encode())
    if not 1 <= line <= len(lines) or not lines[line - 1].lstrip(b" \t").startswith(old):
        raise PatchError(f"{TOUCHED}:{line} is not `{contracts.BATCH_MEMBER_UNINITIALIZED}`")
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    target.write_bytes(b"\n".join(lines))
    try:
        return run_git(["diff", "--no-ext-diff", "--binary", "--full-index", "HEAD"],
                       git_dir=git_dir, work_tree=work, cwd=work).stdout
    except (CommandError, OSError) as exc:
        raise PatchError(f"git diff failed on the scratch tree: {exc}") from exc


def prove_entry(src: Path, entry: PinEntry, scratch: Path,
                log: Callable[[str], None] = print) -> None:
    """Apply the entry's patch to a fresh copy of the candidate and check it exact.

    This is what ``build.patch_exact`` will do with the entry: the work tree's diff must
    be the patch byte for byte and ``git status`` must list only the touched paths.

    Parameters
    ----------
    src : Path
        The candidate's source folder.
    entry : PinEntry
        The entry.
    scratch : Path
        A folder to work in.
    log : callable
        Progress lines.

    Raises
    ------
    PatchError
        If the patch does not apply or the patched tree is not exactly the patch.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    patch = scratch / f"{entry.name}.patch"
    patch.write_bytes(entry.patch)
    pin = Pin(entry.name, entry.commit, entry.tree, patch, entry.patch_sha256, entry.touches)
    tree = prepare_patched_tree(src, pin, scratch / "work", name=f"prove-{entry.name}",
                                expected_tree=entry.tree, log=log)
    check = check_patch_exact(tree.path, pin)
    if not check.ok:
        raise PatchError(f"the generated patch is not exact on the candidate: "
                         f"{'; '.join(check.problems)}")


def manifest_text(entry: PinEntry, header: Sequence[str]) -> str:
    """Return the manifest holding the entry, with ``header`` as its opening comment.

    Parameters
    ----------
    entry : PinEntry
        The entry.
    header : sequence of str
        Comment lines (without ``#``); each is written on one line.

    Returns
    -------
    str
        YAML in the packaged manifest's format, ``patch`` relative to the manifest.
    """
    body = {"commit": entry.commit, "tree": entry.tree, "patch": f"{entry.name}.patch",
            "patch_sha256": entry.patch_sha256, "touches": list(entry.touches),
            "not_run_here": list(entry.not_run_here)}
    comments = "".join(f"# {' '.join(h.split())}\n" if h.strip() else "#\n" for h in header)
    return comments + yaml.safe_dump({"pins": {entry.name: body}}, sort_keys=False,
                                     allow_unicode=True, width=4096)


def write_manifest(entry: PinEntry, manifest: Path, header: Sequence[str]) -> Path:
    """Write the entry's patch and manifest, each staged and linked into place.

    Parameters
    ----------
    entry : PinEntry
        The entry (its patch proved by :func:`prove_entry`).
    manifest : Path
        The manifest to write; the patch goes beside it (:func:`patch_destination`).
    header : sequence of str
        The manifest's opening comment lines.

    Returns
    -------
    Path
        The patch file written.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If either file exists already (nothing is replaced), or the written manifest does
        not read back as a user manifest (both files are then removed).
    """
    manifest = Path(manifest)
    patch = patch_destination(manifest, entry.name)
    written: list[Path] = []
    try:
        for path, data in ((patch, entry.patch),
                           (manifest, manifest_text(entry, header).encode("utf-8"))):
            atomic_write_bytes(path, data, replace=False)
            written.append(path)
        pins = load_user_pins(manifest)
        if pins[entry.name].patch_sha256 != entry.patch_sha256:
            raise ParametersInvalid(f"{manifest}: does not read back as written")
    except FileExistsError as exc:
        for path in written:
            path.unlink(missing_ok=True)
        where = exc.filename2 or exc.filename
        raise ParametersInvalid(f"{where}: exists already; pin-check never replaces a "
                                "file") from None
    except ParametersInvalid:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return patch
