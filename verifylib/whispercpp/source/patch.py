"""Applying a pin's compatibility patch, and proving the tree carries exactly that patch.

The pristine source is copied into a fresh git work tree, committed, and the patch file's
bytes are applied; the work tree is named by its content (pristine tree id and patch
digest) and shared by concurrent runs, which reuse it only while it is exactly that
content. Checks made before and after a build compare the tree with its pin: the
diff is the patch file byte for byte and ``git status`` lists only the touched paths,
ignored files included. :func:`judge_patch_exact` re-judges that evidence from plain
JSON-able dicts, so ``verifylib verify`` needs no source tree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from verifylib.canonical import dumps, is_sha256, publish_dir, sha256_bytes
from verifylib.errors import SourceFailure
from verifylib.locks import (
    LOCKS_DIR,
    STAGING_PREFIX,
    make_owned_dir,
    produce_once,
    remove_owned_dir,
)
from verifylib.runtime.runner import CommandError
from verifylib.whispercpp.source.fetch import copy_tree, run_git
from verifylib.whispercpp.source.pins import Pin, is_oid, pin_fields


class PatchError(SourceFailure):
    """A pin's patch could not be applied, or its work tree could not be prepared or read."""


# ----------------------------------------------------------------------------- patching

@dataclass(frozen=True)
class PatchedTree:
    """A git work tree holding the pristine source as its single commit, plus the patch.

    Attributes
    ----------
    path : Path
        The work tree (``work_root/<name>``), with its ``.git`` inside.
    base_tree : str
        Tree id of HEAD (the pristine content), verified equal to the expected tree.
    patch_sha256 : str
        SHA-256 of the exact bytes that were applied.
    pin_name : str
        The pin whose patch was applied.
    head_commit : str
        The work repo's single commit (deterministic: fixed identity and dates).
    """

    path: Path
    base_tree: str
    patch_sha256: str
    pin_name: str
    head_commit: str


_WORK_KEY_SCHEMA = "verifylib-patched-work-tree-v1"


def work_tree_key(tree_id: str, patch_sha256: str) -> str:
    """Content key of a patched work tree: what decides its bytes.

    Parameters
    ----------
    tree_id : str
        Git tree id of the pristine source.
    patch_sha256 : str
        SHA-256 of the patch bytes applied to it.

    Returns
    -------
    str
        64 hex digits.
    """
    return sha256_bytes(dumps({"schema": _WORK_KEY_SCHEMA, "tree_id": tree_id,
                               "patch_sha256": patch_sha256}))


def _reusable(final: Path, pin: Pin, expected: str, patch: bytes) -> tuple[str, str] | None:
    """(HEAD tree, HEAD commit) of an existing work tree that is exactly pristine + patch."""
    if not (final / ".git").is_dir():
        return None
    try:
        check = check_patch_exact(final, pin)
        head = run_git(["rev-parse", "--verify", "HEAD"], git_dir=final / ".git", work_tree=final,
                    cwd=final).stdout_text.strip()
    except (PatchError, CommandError, OSError):
        return None
    # The declared digest is not consulted here: the stage's own checks judge it. Reuse
    # needs only that the folder holds these very bytes on this very base.
    if (check.head_tree == expected and check.diff_equals_patch
            and sha256_bytes(patch) == check.patch_file_sha256
            and check.status_lines == check.expected_status_lines):
        return check.head_tree, head
    return None


def prepare_patched_tree(pristine: Path, pin: Pin, work_root: Path, *, name: str | None = None,
                         expected_tree: str | None = None,
                         log: Callable[[str], None] = print) -> PatchedTree:
    """Copy a pristine tree into a git work tree and apply the pin's patch (or reuse one).

    The work tree is content-addressed: by default it is
    ``work_root/<pin>-<work_tree_key>``, named after the pristine tree id and the patch
    bytes, so two builds of different sources never share a folder. Any number of
    processes may call this at once: the check and the preparation run under the key's
    lock (``work_root/../locks/work-<key>.lock``), and a tree that is already exactly
    pristine + patch (another process may be building from it) is reused, never replaced.
    Only a damaged one is replaced, and only once the new one is complete.

    Parameters
    ----------
    pristine : Path
        Pristine source folder (e.g. :attr:`verifylib.whispercpp.source.fetch.SourceTree.path`); it
        is only read.
    pin : Pin
        The pin whose patch is applied.
    work_root : Path
        Parent folder of the work tree (``<cache>/work`` in a run).
    name : str, optional
        Work tree folder name; default ``"<pin>-<key>"`` as above.
    expected_tree : str, optional
        Tree id HEAD must have; default the pin's tree.
    log : callable
        Receives progress lines (only while waiting for another process's lock).

    Returns
    -------
    PatchedTree
        The published (or reused) work tree.

    Raises
    ------
    PatchError
        If HEAD's tree is not the expected one, the patch does not apply (the message
        carries git apply's own), or any step fails. The staging folder is removed and
        nothing is published.
    """
    pristine = Path(pristine)
    work_root = Path(work_root)
    expected = expected_tree or pin.tree
    try:
        patch = pin.patch_bytes()
    except OSError as exc:
        raise PatchError(f"pin {pin.name}: cannot read patch {pin.patch_path}: {exc}") from exc
    key = work_tree_key(expected, sha256_bytes(patch))
    final = work_root / (name or f"{pin.name}-{key}")

    def check() -> PatchedTree | None:
        hit = _reusable(final, pin, expected, patch)
        if hit is None:
            return None
        return PatchedTree(path=final, base_tree=hit[0], patch_sha256=sha256_bytes(patch),
                           pin_name=pin.name, head_commit=hit[1])

    # The lock lives beside the work root (``<cache>/locks`` for ``<cache>/work``), keyed
    # by the folder it guards, so a custom ``name`` gets its own lock.
    lock_key = key if name is None else sha256_bytes(dumps({"key": key, "name": name}))
    return produce_once(work_root.parent / LOCKS_DIR, "work", lock_key, check=check,
                        produce=lambda: _prepare(pristine, pin, work_root, final, expected,
                                                 patch),
                        what=f"patched work tree {final.name}", log=log)


def _prepare(pristine: Path, pin: Pin, work_root: Path, final: Path, expected: str,
             patch: bytes) -> PatchedTree:
    """Make the work tree in a staging folder and publish it as ``final``."""
    staging = make_owned_dir(work_root, f"{STAGING_PREFIX}{pin.name}-", family=STAGING_PREFIX)
    try:
        tree_dir = staging / "tree"
        try:
            copy_tree(pristine, tree_dir)
            git_dir = tree_dir / ".git"
            run_git(["init", "-q"], git_dir=git_dir, work_tree=tree_dir, cwd=tree_dir)
            run_git(["add", "-A", "-f", "--", "."], git_dir=git_dir, work_tree=tree_dir,
                    cwd=tree_dir)
            run_git(["commit", "-q", "--no-verify", "-m", f"pristine source for pin {pin.name}"],
                 git_dir=git_dir, work_tree=tree_dir, cwd=tree_dir)
            head_tree = run_git(["rev-parse", "HEAD^{tree}"], git_dir=git_dir, work_tree=tree_dir,
                             cwd=tree_dir).stdout_text.strip()
            head = run_git(["rev-parse", "HEAD"], git_dir=git_dir, work_tree=tree_dir,
                        cwd=tree_dir).stdout_text.strip()
        except (CommandError, OSError) as exc:
            raise PatchError(f"pin {pin.name}: cannot prepare a work tree from {pristine}: "
                             f"{exc}") from exc
        if head_tree != expected:
            raise PatchError(f"pin {pin.name}: pristine source {pristine} has tree {head_tree}, "
                             f"expected {expected}; refusing to patch a different tree")
        # The bytes hashed are the bytes applied: git reads the patch from stdin.
        res = run_git(["apply", "-"], git_dir=git_dir, work_tree=tree_dir, cwd=tree_dir,
                   stdin=patch, check=False)
        if not res.ok:
            raise PatchError(f"pin {pin.name}: patch {pin.patch_path} does not apply to "
                             f"{pristine} "
                             f"({res.describe()}): {res.stderr_text.strip()}")
        publish_dir(tree_dir, final)
    finally:
        remove_owned_dir(staging)
    return PatchedTree(path=final, base_tree=head_tree, patch_sha256=sha256_bytes(patch),
                       pin_name=pin.name, head_commit=head)


# ----------------------------------------------------------------------------- judging

def expected_status(touches: Sequence[str]) -> list[str]:
    """Return the ``git status --porcelain`` lines a correctly patched tree shows.

    Parameters
    ----------
    touches : sequence of str
        The paths the manifest says the patch modifies.

    Returns
    -------
    list of str
        One `` M <path>`` line per touched path, sorted.
    """
    return [f" M {t}" for t in sorted(touches)]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def phase_problems(pin: Mapping[str, Any], phase: Mapping[str, Any]) -> list[str]:
    """Judge one measured check by the patch-exact rule.

    This is the one implementation of the rule, for a live check and for re-judging.
    ``pin`` holds what the manifest declares (``pin_tree``, ``declared_patch_sha256``,
    ``touches``); ``phase`` holds what one check measured.

    Parameters
    ----------
    pin : mapping
        The manifest's declaration for the pin.
    phase : mapping
        What one check measured (patch file and diff digests and lengths, ``head_tree``,
        ``status_lines``).

    Returns
    -------
    list of str
        The problems found; empty when the tree is exactly the pin's tree plus the patch.
    """
    problems: list[str] = []
    if phase.get("pin", pin.get("pin")) != pin.get("pin"):
        problems.append(f"check was made for pin {phase.get('pin')!r}, not {pin.get('pin')!r}")
    declared = pin.get("declared_patch_sha256")
    actual = phase.get("patch_file_sha256")
    patch_len = phase.get("patch_file_bytes")
    if not is_sha256(declared):
        problems.append(f"declared patch sha256 malformed: {declared!r}")
    if not is_sha256(actual) or not _is_count(patch_len):
        problems.append(f"patch file digest/length malformed: {actual!r}/{patch_len!r}")
    elif declared != actual:
        problems.append(f"patch file drifted: its sha256 is {actual}, "
                        f"the manifest declares {declared}")
    pin_tree, head_tree = pin.get("pin_tree"), phase.get("head_tree")
    if not is_oid(pin_tree):
        problems.append(f"pin tree malformed: {pin_tree!r}")
    elif head_tree != pin_tree:
        problems.append(f"work tree HEAD is {head_tree!r}, not the pin's tree {pin_tree}")
    diff_sha, diff_len = phase.get("diff_sha256"), phase.get("diff_bytes")
    if not is_sha256(diff_sha) or not _is_count(diff_len):
        problems.append(f"diff digest/length malformed: {diff_sha!r}/{diff_len!r}")
    elif diff_len == 0:
        problems.append("tree is unpatched: git diff against the pristine commit is empty")
    elif diff_sha != actual or diff_len != patch_len:
        problems.append(f"git diff ({diff_len} bytes, sha256 {diff_sha}) is not the patch file "
                        f"({patch_len!r} bytes, sha256 {actual})")
    touches = pin.get("touches")
    lines = phase.get("status_lines")
    if (not isinstance(touches, list) or not touches
            or not all(isinstance(t, str) and t for t in touches)):
        problems.append(f"touched paths malformed: {touches!r}")
    elif not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        problems.append(f"status lines malformed: {lines!r}")
    else:
        want = expected_status(touches)
        if lines != want:
            extra = [x for x in lines if x not in want]
            missing = [x for x in want if x not in lines]
            problems.append(f"git status (ignored files included) shows unexpected "
                            f"{extra[:8]!r}{' …' if len(extra) > 8 else ''} "
                            f"and lacks {missing!r}; "
                            f"expected exactly {want!r}")
    return problems


@dataclass(frozen=True)
class PatchCheck:
    """What a work tree looks like against its pin, at one moment.

    Attributes
    ----------
    pin_name : str
        The pin.
    pin_tree : str
        The pin's tree id.
    head_tree : str
        Tree id of the work repo's HEAD (the pristine commit).
    touches : tuple of str
        Paths the patch declares it modifies.
    declared_patch_sha256 : str
        The manifest's digest.
    patch_file_sha256 : str
        The patch file's actual digest now.
    patch_file_bytes : int
        The patch file's length.
    diff_sha256 : str
        SHA-256 of ``git diff --no-ext-diff --binary --full-index HEAD``.
    diff_bytes : int
        Length of that diff.
    diff_equals_patch : bool
        Whether the diff bytes equal the patch file bytes (compared byte for byte).
    status_lines : tuple of str
        ``git status --porcelain --ignored --untracked-files=all`` lines, raw.
    expected_status_lines : tuple of str
        `` M <path>`` for each touched path.
    problems : tuple of str
        Every rule violation; empty means the tree is exactly pin + patch.
    """

    pin_name: str
    pin_tree: str
    head_tree: str
    touches: tuple[str, ...]
    declared_patch_sha256: str
    patch_file_sha256: str
    patch_file_bytes: int
    diff_sha256: str
    diff_bytes: int
    diff_equals_patch: bool
    status_lines: tuple[str, ...]
    expected_status_lines: tuple[str, ...]
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def to_evidence(self) -> dict[str, Any]:
        """Return this check as one phase of :func:`patch_evidence`.

        Returns
        -------
        dict
            ``{"pin", "pin_tree", "declared_patch_sha256", "touches", "head_tree",
            "patch_file_sha256", "patch_file_bytes", "diff_sha256", "diff_bytes",
            "status_lines", "problems"}`` (``problems`` is informational: the judge
            recomputes them).
        """
        return {"pin": self.pin_name, "pin_tree": self.pin_tree,
                "declared_patch_sha256": self.declared_patch_sha256,
                "touches": list(self.touches), "head_tree": self.head_tree,
                "patch_file_sha256": self.patch_file_sha256,
                "patch_file_bytes": self.patch_file_bytes, "diff_sha256": self.diff_sha256,
                "diff_bytes": self.diff_bytes, "status_lines": list(self.status_lines),
                "problems": list(self.problems)}


def check_patch_exact(work: Path, pin: Pin) -> PatchCheck:
    """Compare a work tree with its pin: exactly the declared patch bytes, nothing else.

    Parameters
    ----------
    work : Path
        A work tree made by :func:`prepare_patched_tree`.
    pin : Pin
        Its pin.

    Returns
    -------
    PatchCheck
        Digests, raw status lines and the problems found (empty when exact). Ignored
        files count: upstream's ``.gitignore`` hides ``build/``, so a planted or stale
        binary there is invisible to a plain ``git status``.

    Raises
    ------
    PatchError
        If the work tree cannot be inspected (not a git repo, no HEAD).
    """
    work = Path(work).resolve()
    git_dir = work / ".git"
    try:
        head_tree = run_git(["rev-parse", "--verify", "HEAD^{tree}"], git_dir=git_dir,
                            work_tree=work, cwd=work).stdout_text.strip()
        # Against HEAD, not the index, so a change someone staged is not hidden.
        diff = run_git(["diff", "--no-ext-diff", "--binary", "--full-index", "HEAD"],
                    git_dir=git_dir, work_tree=work, cwd=work).stdout
        status = run_git(["status", "--porcelain", "--ignored", "--untracked-files=all"],
                      git_dir=git_dir, work_tree=work, cwd=work).stdout
    except (CommandError, OSError) as exc:
        raise PatchError(f"pin {pin.name}: cannot inspect work tree {work}: {exc}") from exc
    try:
        patch = pin.patch_bytes()
    except OSError as exc:
        raise PatchError(f"pin {pin.name}: cannot read patch {pin.patch_path}: {exc}") from exc
    lines = tuple(x for x in status.decode("utf-8", "replace").split("\n") if x)
    check = PatchCheck(
        pin_name=pin.name, pin_tree=pin.tree, head_tree=head_tree, touches=tuple(pin.touches),
        declared_patch_sha256=pin.patch_sha256, patch_file_sha256=sha256_bytes(patch),
        patch_file_bytes=len(patch), diff_sha256=sha256_bytes(diff), diff_bytes=len(diff),
        diff_equals_patch=diff == patch, status_lines=lines,
        expected_status_lines=tuple(expected_status(pin.touches)))
    # Problems come from the same pure rule the validator re-runs on stored evidence.
    return dataclasses.replace(check, problems=tuple(phase_problems(pin_fields(pin),
                                                                     check.to_evidence())))


def patch_evidence(pin: Pin, checks: Mapping[str, Any]) -> dict[str, Any]:
    """Assemble ``build.patch_exact`` evidence from the checks made around the build.

    Parameters
    ----------
    pin : Pin
        The pin (its declared tree, patch digest and touched paths are the standard).
    checks : mapping
        ``{"before": PatchCheck.to_evidence(), "after": PatchCheck.to_evidence()}``;
        may hold ``"apply_error": str`` instead when the patch did not apply. PatchCheck
        objects are accepted too.

    Returns
    -------
    dict
        ``{"pin", "pin_commit", "pin_tree", "declared_patch_sha256", "touches",
        "patch_file": <name>, "checks": {...}}`` for :func:`judge_patch_exact`.
    """
    out_checks: dict[str, Any] = {}
    for when, value in checks.items():
        out_checks[when] = value.to_evidence() if isinstance(value, PatchCheck) else value
    return {**pin_fields(pin), "patch_file": pin.patch_path.name, "checks": out_checks}


