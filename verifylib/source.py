"""Pinned whisper.cpp sources: obtain, identify by git tree id, patch, and prove the patch.

Why this is hand-written: no package answers "is this folder the pinned upstream tree,
carrying exactly the declared patch bytes and nothing else (ignored files included)".
The identity is git's own (``git add -A -f && git write-tree``), so it holds whether the
source came from a git clone, a release archive or a PyPI sdist; the checks are thin
wrappers around ``git`` run through :func:`verifylib.runner.run`, with every setting that
could change a tree id or a diff's bytes pinned on the command line or in the child
environment (no system or user git config, no autocrlf, fixed commit identity and dates).

The judging functions (:func:`judge_source_identity`, :func:`judge_patch_exact`) take
plain JSON-able dicts, so ``verifylib verify`` can re-judge the stored evidence later
without the source tree.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping, Sequence

import yaml

from .canonical import (dumps, is_sha256, publish_dir, read_json, sha256_bytes, sha256_file,
                        write_json)
from .runner import CommandError, RunResult, run

PATCHES_DIR = Path(__file__).resolve().parent.parent / "patches"
"""The repository's ``patches/`` folder (pins and their compatibility patches)."""

DEFAULT_MANIFEST = PATCHES_DIR / "manifest.yaml"

GIT_OID_RE = re.compile(r"^[0-9a-f]{40}$")
_PIN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PIN_KEYS = frozenset({"commit", "tree", "patch", "patch_sha256", "touches"})
_SOURCE_KINDS = ("pypi-sdist", "git", "archive", "folder")
_REQ_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")

# Fixed identity and dates make the work repo's commit id, and so anything a build embeds
# from `git rev-parse HEAD`, the same on every run.
_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "verifylib", "GIT_AUTHOR_EMAIL": "verifylib@localhost",
    "GIT_COMMITTER_NAME": "verifylib", "GIT_COMMITTER_EMAIL": "verifylib@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
# Settings that would otherwise come from (untrusted, machine-specific) config and change
# tree ids, diff bytes or status output.
_GIT_CONFIG = (
    "safe.directory=*", "core.autocrlf=false", "core.safecrlf=false", "core.filemode=true",
    "core.symlinks=true", "core.fsmonitor=false", "core.untrackedCache=false",
    "core.quotePath=true", "user.name=verifylib", "user.email=verifylib@localhost",
    "commit.gpgSign=false", "init.defaultBranch=main", "advice.detachedHead=false",
    "gc.auto=0", "diff.noprefix=false", "diff.mnemonicPrefix=false", "color.ui=false",
    "status.showUntrackedFiles=all",
)


class SourceError(RuntimeError):
    """A source could not be obtained (download, clone, unsafe or unreadable archive)."""


class PatchError(RuntimeError):
    """A pin's patch could not be applied, or its work tree could not be prepared or read."""


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
    """

    name: str
    commit: str
    tree: str
    patch_path: Path
    patch_sha256: str
    touches: tuple[str, ...]

    def patch_bytes(self) -> bytes:
        """Return the patch file's bytes as they are on disk now."""
        return self.patch_path.read_bytes()


def _manifest_error(manifest: Path, where: str, msg: str) -> ValueError:
    return ValueError(f"{manifest}: {where}: {msg}")


def _check_rel_path(value: Any) -> str | None:
    """Return an error message if ``value`` is not a plain relative POSIX path."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    p = PurePosixPath(value)
    if p.is_absolute() or "\\" in value or any(part in ("", ".", "..") for part in value.split("/")):
        return f"{value!r} must be a relative path without '.', '..' or empty parts"
    return None


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
    ValueError
        If the manifest is malformed: not a mapping with a non-empty ``pins`` mapping,
        unknown or missing keys, a commit/tree that is not 40 lower-case hex digits, a
        ``patch_sha256`` that is not 64 lower-case hex digits, an unsafe path, or a patch
        file that does not exist. A patch file whose bytes no longer match its declared
        digest is *not* an error here: :func:`check_patch_exact` reports that drift.
    """
    manifest = Path(manifest) if manifest is not None else DEFAULT_MANIFEST
    patches_dir = Path(patches_dir) if patches_dir is not None else manifest.parent
    try:
        doc = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{manifest}: cannot read manifest: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{manifest}: not valid YAML: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("pins"), dict) or not doc["pins"]:
        raise _manifest_error(manifest, "top level", "expected a mapping with a non-empty 'pins' mapping")
    pins: dict[str, Pin] = {}
    for name, entry in doc["pins"].items():
        if not isinstance(name, str) or not _PIN_NAME_RE.match(name):
            raise _manifest_error(manifest, f"pin {name!r}",
                                  "name must be a string of letters, digits, '.', '_' or '-' "
                                  "(quote names YAML would read as numbers)")
        where = f"pin {name!r}"
        if not isinstance(entry, dict):
            raise _manifest_error(manifest, where, "expected a mapping")
        missing = sorted(_PIN_KEYS - entry.keys())
        unknown = sorted(set(map(str, entry.keys())) - _PIN_KEYS)
        if missing or unknown:
            raise _manifest_error(manifest, where, f"missing keys {missing}, unknown keys {unknown}")
        for key in ("commit", "tree"):
            val = entry[key]
            if not isinstance(val, str) or not GIT_OID_RE.match(val):
                raise _manifest_error(manifest, where,
                                      f"{key} must be 40 lower-case hex digits (quoted), got {val!r}")
        if not is_sha256(entry["patch_sha256"]):
            raise _manifest_error(manifest, where, "patch_sha256 must be 64 lower-case hex digits, "
                                  f"got {entry['patch_sha256']!r}")
        err = _check_rel_path(entry["patch"])
        if err:
            raise _manifest_error(manifest, where, f"patch {err}")
        patch_path = patches_dir / entry["patch"]
        if not patch_path.is_file():
            raise _manifest_error(manifest, where, f"patch file {patch_path} does not exist")
        touches = entry["touches"]
        if not isinstance(touches, list) or not touches:
            raise _manifest_error(manifest, where, "touches must be a non-empty list of paths")
        for t in touches:
            err = _check_rel_path(t)
            if err:
                raise _manifest_error(manifest, where, f"touches entry {err}")
        if len(set(touches)) != len(touches):
            raise _manifest_error(manifest, where, "touches lists a path twice")
        pins[name] = Pin(name=name, commit=entry["commit"], tree=entry["tree"],
                         patch_path=patch_path, patch_sha256=entry["patch_sha256"],
                         touches=tuple(touches))
    return pins


# ----------------------------------------------------------------------------- git plumbing

_HOME: str | None = None


def _throwaway_home() -> str:
    # git still looks under $HOME for some files even with GIT_CONFIG_GLOBAL set; an empty
    # private folder keeps the user's ~/.gitconfig, ~/.config/git/* out of every result.
    global _HOME
    if _HOME is None or not os.path.isdir(_HOME):
        _HOME = tempfile.mkdtemp(prefix="verifylib-git-home-")
        atexit.register(shutil.rmtree, _HOME, True)
    return _HOME


def _git_env(git_dir: Path, work_tree: Path | None) -> dict[str, str]:
    home = _throwaway_home()
    env = {
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
        "HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "GIT_TERMINAL_PROMPT": "0",
        # Set explicitly because the parent's environment could point any of these at
        # another repository, and the runner can only add variables, not remove them.
        "GIT_DIR": str(git_dir), "GIT_INDEX_FILE": str(git_dir / "index"),
        "GIT_OBJECT_DIRECTORY": str(git_dir / "objects"), "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
        "GIT_COMMON_DIR": str(git_dir),
        **_GIT_IDENTITY,
    }
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    return env


def _git(args: Sequence[str | os.PathLike], *, git_dir: Path, work_tree: Path | None,
         cwd: Path | None = None, check: bool = True, stdin: bytes | None = None,
         timeout: float = 600.0, what: str | None = None) -> RunResult:
    argv: list[str | os.PathLike] = ["git"]
    for opt in _GIT_CONFIG:
        argv += ["-c", opt]
    argv += list(args)
    return run(argv, cwd=cwd if cwd is not None else (work_tree or git_dir.parent),
               env_extra=_git_env(git_dir.resolve(), None if work_tree is None else work_tree.resolve()),
               stdin=stdin, check=check, timeout=timeout, what=what or f"git {args[0]}")


def git_tree_id(folder: Path) -> str:
    """Compute the git tree id of a folder's content, writing nothing inside it.

    Equivalent to ``git init && git add -A -f && git write-tree`` run in ``folder``, but
    the repository lives in a temporary folder elsewhere. ``-f`` matters: upstream's
    ``.gitignore`` matches tracked files, so without it the id differs. A ``.git`` entry
    inside ``folder`` is ignored, as git always does.

    Parameters
    ----------
    folder : Path
        The source folder.

    Returns
    -------
    str
        40 lower-case hex digits.

    Raises
    ------
    NotADirectoryError
        If ``folder`` is not a directory.
    verifylib.runner.CommandError
        If git fails.
    """
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise NotADirectoryError(f"not a directory: {folder}")
    with tempfile.TemporaryDirectory(prefix="verifylib-treeid-") as tmp:
        git_dir = Path(tmp) / "repo.git"
        _git(["init", "-q"], git_dir=git_dir, work_tree=folder, cwd=Path(tmp), what="git init")
        _git(["add", "-A", "-f", "--", "."], git_dir=git_dir, work_tree=folder, cwd=folder,
             what="git add -A -f")
        res = _git(["write-tree"], git_dir=git_dir, work_tree=folder, cwd=folder, what="git write-tree")
    tree = res.stdout_text.strip()
    if not GIT_OID_RE.match(tree):
        raise CommandError(res, f"git write-tree printed {tree!r}")
    return tree


# ----------------------------------------------------------------------------- sources

@dataclass(frozen=True)
class SourceSpec:
    """Where a source tree comes from.

    Attributes
    ----------
    kind : str
        ``"pypi-sdist"``, ``"git"``, ``"archive"`` or ``"folder"``.
    package : str, optional
        pypi-sdist: an exact requirement ``name==version``, e.g. ``"pywhispercpp==1.5.1"``.
    url : str, optional
        git: repository URL or local path.
    commit : str, optional
        git: full 40-hex commit id (a branch or tag name would not pin anything).
    path : Path, optional
        archive: a ``.tar.gz``/``.tgz``/``.tar``/``.tar.xz``/``.tar.bz2``/``.zip`` file;
        folder: a local folder.
    subdir : str, optional
        Folder inside the obtained content that is the source root. For pypi-sdist it is
        relative to the sdist's single top-level folder (``name-version/``); for the
        other kinds, relative to the clone, archive or folder root.
    """

    kind: str
    package: str | None = None
    url: str | None = None
    commit: str | None = None
    path: Path | None = None
    subdir: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _SOURCE_KINDS:
            raise ValueError(f"source kind must be one of {_SOURCE_KINDS}, got {self.kind!r}")
        needs = {"pypi-sdist": {"package"}, "git": {"url", "commit"},
                 "archive": {"path"}, "folder": {"path"}}[self.kind]
        given = {k for k in ("package", "url", "commit", "path") if getattr(self, k) is not None}
        if given != needs:
            raise ValueError(f"source kind {self.kind!r} takes {sorted(needs)} (+ optional subdir), "
                             f"got {sorted(given)}")
        if self.package is not None and not _REQ_RE.match(self.package):
            raise ValueError(f"pypi-sdist package must be an exact 'name==version', got {self.package!r}")
        if self.commit is not None and not GIT_OID_RE.match(self.commit):
            raise ValueError(f"git commit must be 40 lower-case hex digits, got {self.commit!r}")
        if self.path is not None and not isinstance(self.path, Path):
            object.__setattr__(self, "path", Path(self.path))
        if self.subdir is not None:
            err = _check_rel_path(self.subdir)
            if err:
                raise ValueError(f"subdir {err}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SourceSpec":
        """Build a spec from a parameters mapping (unknown keys are an error).

        Parameters
        ----------
        data : mapping
            Keys among ``kind, package, url, commit, path, subdir``.

        Returns
        -------
        SourceSpec
            The validated spec.
        """
        allowed = {"kind", "package", "url", "commit", "path", "subdir"}
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"unknown source keys {sorted(unknown)}")
        kw = dict(data)
        if kw.get("path") is not None:
            kw["path"] = Path(kw["path"])
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        """Return the spec as a JSON-able dict (absent fields omitted)."""
        out: dict[str, Any] = {"kind": self.kind}
        for key in ("package", "url", "commit", "path", "subdir"):
            val = getattr(self, key)
            if val is not None:
                out[key] = str(val)
        return out


PYWHISPERCPP_V185 = SourceSpec(kind="pypi-sdist", package="pywhispercpp==1.5.1", subdir="whisper.cpp")
"""whisper.cpp v1.8.5, byte-identical inside the pywhispercpp 1.5.1 sdist (FACTS.md)."""


@dataclass(frozen=True)
class SourceTree:
    """A pristine source folder (no ``.git`` inside) in the cache.

    Attributes
    ----------
    path : Path
        ``cache_dir/sources/<tree-id>``.
    tree_id : str
        Git tree id computed on ``path`` when it was returned (a cache hit is re-hashed,
        not trusted). The stage compares it with the pin's tree; a mismatch is the gate's
        FAIL, not an exception.
    origin : dict
        Where the content came from: the spec's fields plus digests of what was fetched
        (``sdist_sha256``, ``archive_sha256``, ...).
    cached : bool
        True if the folder was already in the cache.
    """

    path: Path
    tree_id: str
    origin: dict
    cached: bool


def _is_within(root: Path, target: Path) -> bool:
    try:
        target.relative_to(root)
        return True
    except ValueError:
        return False


def _extract_zip(archive: Path, dest: Path) -> None:
    # zipfile neither refuses unsafe names nor restores permission bits or symlinks; git
    # tree ids depend on the executable bit and on symlinks, so both are restored here.
    links: list[tuple[Path, str]] = []
    link_names: set[str] = set()
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:
            mode = (info.external_attr >> 16) & 0xFFFF
            if stat.S_ISLNK(mode):
                link_names.add(info.filename.rstrip("/"))
        for info in infos:
            name = info.filename
            if "\\" in name or name.startswith("/") or re.match(r"^[A-Za-z]:", name):
                raise SourceError(f"{archive}: unsafe member name {name!r}")
            parts = [p for p in name.rstrip("/").split("/")]
            if any(p in ("", ".", "..") for p in parts):
                raise SourceError(f"{archive}: unsafe member name {name!r}")
            for i in range(1, len(parts)):
                if "/".join(parts[:i]) in link_names:
                    raise SourceError(f"{archive}: member {name!r} lies under a symlink")
            target = dest.joinpath(*parts)
            mode = (info.external_attr >> 16) & 0xFFFF
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if stat.S_ISLNK(mode):
                link_target = zf.read(info).decode("utf-8")
                if link_target.startswith("/") or not _is_within(
                        dest.resolve(), (target.parent.resolve() / link_target).resolve()):
                    raise SourceError(f"{archive}: symlink {name!r} points outside the archive")
                links.append((target, link_target))
                continue
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(target, 0o755 if mode & stat.S_IXUSR else 0o644)
    for target, link_target in links:
        os.symlink(link_target, target)


def _extract_archive(archive: Path, dest: Path) -> None:
    name = archive.name.lower()
    dest.mkdir(parents=True, exist_ok=True)
    if name.endswith(".zip"):
        try:
            _extract_zip(archive, dest)
        except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as exc:
            raise SourceError(f"{archive}: cannot extract: {exc}") from exc
        return
    if not name.endswith((".tar.gz", ".tgz", ".tar", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")):
        raise SourceError(f"{archive}: unsupported archive type (tar.gz/tgz/tar/tar.xz/tar.bz2/zip)")
    if not hasattr(tarfile, "data_filter"):
        raise SourceError("safe tar extraction needs Python >= 3.11.4 (tarfile extraction filters)")
    try:
        with tarfile.open(archive) as tf:
            # The 'data' filter refuses absolute paths, '..', links leaving the folder and
            # device files, and keeps the owner's executable bit (which git records).
            tf.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise SourceError(f"{archive}: cannot extract safely: {exc}") from exc


def _copy_tree(src: Path, dest: Path) -> None:
    """Copy ``src`` to a new folder ``dest``, keeping modes and symlinks, skipping ``src/.git``."""
    top = src.resolve()

    def _ignore(folder: str, names: list[str]) -> list[str]:
        return [".git"] if Path(folder).resolve() == top and ".git" in names else []

    shutil.copytree(src, dest, symlinks=True, ignore=_ignore)


def _single_top(folder: Path, what: str) -> Path:
    entries = [p for p in folder.iterdir()]
    if len(entries) != 1 or not entries[0].is_dir():
        raise SourceError(f"{what}: expected one top-level folder, found {sorted(p.name for p in entries)}")
    return entries[0]


def _select_subdir(root: Path, subdir: str | None, what: str) -> Path:
    chosen = root if subdir is None else root / subdir
    if chosen.is_symlink() or not chosen.is_dir():
        raise SourceError(f"{what}: subdir {subdir!r} is not a folder")
    return chosen


def _spec_key(spec: SourceSpec, extra: Mapping[str, Any]) -> str:
    return sha256_bytes(dumps({"spec": spec.to_dict(), **extra}))


def _fetch_pypi_sdist(spec: SourceSpec, staging: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    assert spec.package is not None
    pkg_name = _REQ_RE.match(spec.package).group(1)  # type: ignore[union-attr]
    dl = staging / "download"
    dl.mkdir()
    log(f"downloading sdist {spec.package} …")
    # --no-binary <name>, not :all: — the latter forces pip to build the sdist's build
    # dependencies (cmake among them) from source, which takes over ten minutes.
    res = run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", pkg_name,
               "-d", dl, spec.package], timeout=900, what=f"pip download {spec.package}")
    if not res.ok:
        tail = "\n".join(res.stderr_text.strip().splitlines()[-15:])
        raise SourceError(f"pip download {spec.package} failed ({res.describe()}):\n{tail}")
    files = [p for p in dl.iterdir() if p.is_file()]
    if len(files) != 1:
        raise SourceError(f"pip download {spec.package} produced {sorted(p.name for p in files)}, "
                          "expected one sdist")
    sdist = files[0]
    origin = {"kind": spec.kind, "package": spec.package, "subdir": spec.subdir,
              "sdist_file": sdist.name, "sdist_sha256": sha256_file(sdist),
              "sdist_bytes": sdist.stat().st_size}
    ex = staging / "extract"
    _extract_archive(sdist, ex)
    root = _select_subdir(_single_top(ex, sdist.name), spec.subdir, sdist.name)
    return root, origin


def _fetch_git(spec: SourceSpec, staging: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    assert spec.url is not None and spec.commit is not None
    url = spec.url
    if Path(url).exists():
        url = str(Path(url).resolve())
    # The repository lives beside the work tree, so the checkout never contains a .git.
    git_dir, tree = staging / "repo.git", staging / "checkout"
    tree.mkdir()
    log(f"fetching {spec.url} at {spec.commit} …")
    _git(["init", "-q"], git_dir=git_dir, work_tree=tree, cwd=staging)
    res = _git(["fetch", "-q", "--no-tags", "--depth=1", url, spec.commit], git_dir=git_dir,
               work_tree=tree, cwd=staging, check=False, timeout=1800)
    if not res.ok:
        # Some servers refuse fetching a commit by id; fall back to all branches and tags.
        res = _git(["fetch", "-q", url, "+refs/heads/*:refs/remotes/origin/*",
                    "+refs/tags/*:refs/tags/*"], git_dir=git_dir, work_tree=tree, cwd=staging,
                   check=False, timeout=1800)
        if not res.ok:
            tail = "\n".join(res.stderr_text.strip().splitlines()[-10:])
            raise SourceError(f"git fetch {spec.url} failed ({res.describe()}):\n{tail}")
    res = _git(["rev-parse", "--verify", "-q", f"{spec.commit}^{{commit}}"], git_dir=git_dir,
               work_tree=tree, cwd=staging, check=False)
    if not res.ok or res.stdout_text.strip() != spec.commit:
        raise SourceError(f"{spec.url}: commit {spec.commit} not found")
    _git(["checkout", "-q", "-f", "--detach", spec.commit], git_dir=git_dir, work_tree=tree,
         cwd=tree, timeout=1800)
    commit_tree = _git(["rev-parse", f"{spec.commit}^{{tree}}"], git_dir=git_dir, work_tree=tree,
                       cwd=staging).stdout_text.strip()
    origin = {"kind": spec.kind, "url": spec.url, "commit": spec.commit, "subdir": spec.subdir,
              "commit_tree": commit_tree}
    return _select_subdir(tree, spec.subdir, spec.url), origin


def _fetch_archive(spec: SourceSpec, staging: Path, log: Callable[[str], None],
                   archive_sha256: str) -> tuple[Path, dict]:
    assert spec.path is not None
    log(f"extracting {spec.path} …")
    ex = staging / "extract"
    _extract_archive(spec.path, ex)
    origin = {"kind": spec.kind, "archive": str(spec.path.resolve()), "archive_sha256": archive_sha256,
              "archive_bytes": spec.path.stat().st_size, "subdir": spec.subdir}
    return _select_subdir(ex, spec.subdir, str(spec.path)), origin


def _fetch_folder(spec: SourceSpec, staging: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    assert spec.path is not None
    src = _select_subdir(spec.path, spec.subdir, str(spec.path))
    log(f"copying {src} …")
    dest = staging / "copy"
    _copy_tree(src, dest)
    origin = {"kind": spec.kind, "folder": str(spec.path.resolve()), "subdir": spec.subdir}
    return dest, origin


def obtain_source(spec: SourceSpec, cache_dir: Path, *,
                  log: Callable[[str], None] = print) -> SourceTree:
    """Obtain a pristine source folder, cached under ``cache_dir/sources/<tree-id>/``.

    The content is fetched into a staging folder under ``cache_dir/sources/``, its tree id
    computed, and only then renamed into place, so an interrupted fetch never leaves a
    half-written entry. A small index (``sources/index/<spec-key>.json``) maps immutable
    specs (an exact sdist version, a commit id, an archive's digest) to their entry; a
    ``folder`` spec is copied every time because a local folder can change.

    Parameters
    ----------
    spec : SourceSpec
        Where the source comes from.
    cache_dir : Path
        Cache root (shared with builds).
    log : callable
        Receives one-line progress messages.

    Returns
    -------
    SourceTree
        The folder, its freshly computed tree id, its origin and whether it was cached.

    Raises
    ------
    SourceError
        If the source cannot be fetched or extracted safely.
    """
    cache_dir = Path(cache_dir)
    sources = cache_dir / "sources"
    sources.mkdir(parents=True, exist_ok=True)

    archive_sha = None
    if spec.kind == "archive":
        assert spec.path is not None
        if not spec.path.is_file():
            raise SourceError(f"archive not found: {spec.path}")
        archive_sha = sha256_file(spec.path)
    elif spec.kind == "folder":
        assert spec.path is not None
        if not spec.path.is_dir():
            raise SourceError(f"folder not found: {spec.path}")

    index_path = None
    if spec.kind != "folder":
        key = _spec_key(spec, {"archive_sha256": archive_sha} if archive_sha else {})
        index_path = sources / "index" / f"{key}.json"
        if index_path.is_file():
            try:
                entry = read_json(index_path)
                recorded = entry["tree_id"]
                origin = dict(entry["origin"])
            except (ValueError, KeyError, TypeError):
                recorded, origin = None, {}
            if isinstance(recorded, str) and GIT_OID_RE.match(recorded):
                folder = sources / recorded
                if folder.is_dir():
                    tree = git_tree_id(folder)
                    if tree == recorded:
                        log(f"source {tree} from cache ({folder})")
                        return SourceTree(path=folder, tree_id=tree, origin=origin, cached=True)
                    # A corrupted entry is refetched rather than trusted or half-used.
                    log(f"cached source {folder} hashes to {tree}, not {recorded}: refetching")

    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=sources))
    try:
        if spec.kind == "pypi-sdist":
            root, origin = _fetch_pypi_sdist(spec, staging, log)
        elif spec.kind == "git":
            root, origin = _fetch_git(spec, staging, log)
        elif spec.kind == "archive":
            assert archive_sha is not None
            root, origin = _fetch_archive(spec, staging, log, archive_sha)
        else:
            root, origin = _fetch_folder(spec, staging, log)
        # A .git inside the content would make later `git init` reuse someone else's repo.
        if (root / ".git").exists():
            p = root / ".git"
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            origin["removed_dot_git"] = True
        tree = git_tree_id(root)
        final = publish_dir(root, sources / tree)
    except (CommandError, OSError) as exc:
        raise SourceError(f"cannot obtain {spec.to_dict()}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if index_path is not None:
        write_json(index_path, {"tree_id": tree, "origin": origin})
    log(f"source {tree} obtained ({final})")
    return SourceTree(path=final, tree_id=tree, origin=origin, cached=False)


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


def prepare_patched_tree(pristine: Path, pin: Pin, work_root: Path, *, name: str | None = None,
                         expected_tree: str | None = None) -> PatchedTree:
    """Copy a pristine tree into a fresh git work tree and apply the pin's patch.

    Parameters
    ----------
    pristine : Path
        Pristine source folder (e.g. :attr:`SourceTree.path`); it is only read.
    pin : Pin
        The pin whose patch is applied.
    work_root : Path
        Parent folder of the work tree.
    name : str, optional
        Work tree folder name; default ``"<pin>-patched"``. An existing folder of that
        name is replaced only once the new one is complete.
    expected_tree : str, optional
        Tree id HEAD must have; default the pin's tree.

    Returns
    -------
    PatchedTree
        The published work tree.

    Raises
    ------
    PatchError
        If HEAD's tree is not the expected one, the patch does not apply (the message
        carries git apply's own), or any step fails. The staging folder is removed and
        nothing is published.
    """
    pristine = Path(pristine)
    work_root = Path(work_root)
    work_root.mkdir(parents=True, exist_ok=True)
    final = work_root / (name or f"{pin.name}-patched")
    expected = expected_tree or pin.tree
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{pin.name}-", dir=work_root))
    try:
        tree_dir = staging / "tree"
        try:
            _copy_tree(pristine, tree_dir)
            git_dir = tree_dir / ".git"
            _git(["init", "-q"], git_dir=git_dir, work_tree=tree_dir, cwd=tree_dir)
            _git(["add", "-A", "-f", "--", "."], git_dir=git_dir, work_tree=tree_dir, cwd=tree_dir)
            _git(["commit", "-q", "--no-verify", "-m", f"pristine source for pin {pin.name}"],
                 git_dir=git_dir, work_tree=tree_dir, cwd=tree_dir)
            head_tree = _git(["rev-parse", "HEAD^{tree}"], git_dir=git_dir, work_tree=tree_dir,
                             cwd=tree_dir).stdout_text.strip()
            head = _git(["rev-parse", "HEAD"], git_dir=git_dir, work_tree=tree_dir,
                        cwd=tree_dir).stdout_text.strip()
        except (CommandError, OSError) as exc:
            raise PatchError(f"pin {pin.name}: cannot prepare a work tree from {pristine}: {exc}") from exc
        if head_tree != expected:
            raise PatchError(f"pin {pin.name}: pristine source {pristine} has tree {head_tree}, "
                             f"expected {expected}; refusing to patch a different tree")
        try:
            patch = pin.patch_bytes()
        except OSError as exc:
            raise PatchError(f"pin {pin.name}: cannot read patch {pin.patch_path}: {exc}") from exc
        # The bytes hashed are the bytes applied: git reads the patch from stdin.
        res = _git(["apply", "-"], git_dir=git_dir, work_tree=tree_dir, cwd=tree_dir,
                   stdin=patch, check=False)
        if not res.ok:
            raise PatchError(f"pin {pin.name}: patch {pin.patch_path} does not apply to {pristine} "
                             f"({res.describe()}): {res.stderr_text.strip()}")
        publish_dir(tree_dir, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return PatchedTree(path=final, base_tree=head_tree, patch_sha256=sha256_bytes(patch),
                       pin_name=pin.name, head_commit=head)


# ----------------------------------------------------------------------------- judging

def _expected_status(touches: Sequence[str]) -> list[str]:
    return [f" M {t}" for t in sorted(touches)]


def _is_oid(value: Any) -> bool:
    return isinstance(value, str) and bool(GIT_OID_RE.match(value))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _phase_problems(pin: Mapping[str, Any], phase: Mapping[str, Any]) -> list[str]:
    """The one implementation of the patch-exact rule, for a live check and for re-judging.

    ``pin`` holds what the manifest declares (``pin_tree``, ``declared_patch_sha256``,
    ``touches``); ``phase`` holds what one check measured.
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
        problems.append(f"patch file drifted: its sha256 is {actual}, the manifest declares {declared}")
    pin_tree, head_tree = pin.get("pin_tree"), phase.get("head_tree")
    if not _is_oid(pin_tree):
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
        want = _expected_status(touches)
        if lines != want:
            extra = [x for x in lines if x not in want]
            missing = [x for x in want if x not in lines]
            problems.append(f"git status (ignored files included) shows unexpected "
                            f"{extra[:8]!r}{' …' if len(extra) > 8 else ''} and lacks {missing!r}; "
                            f"expected exactly {want!r}")
    return problems


def pin_fields(pin: Pin) -> dict[str, Any]:
    """What a build sidecar records of its pin (the validator compares it with the manifest)."""
    return {"pin": pin.name, "pin_commit": pin.commit, "pin_tree": pin.tree,
            "declared_patch_sha256": pin.patch_sha256, "touches": list(pin.touches)}


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
        head_tree = _git(["rev-parse", "--verify", "HEAD^{tree}"], git_dir=git_dir, work_tree=work,
                         cwd=work).stdout_text.strip()
        # Against HEAD, not the index, so a change someone staged is not hidden.
        diff = _git(["diff", "--no-ext-diff", "--binary", "--full-index", "HEAD"],
                    git_dir=git_dir, work_tree=work, cwd=work).stdout
        status = _git(["status", "--porcelain", "--ignored", "--untracked-files=all"],
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
        expected_status_lines=tuple(_expected_status(pin.touches)))
    # Problems come from the same pure rule the validator re-runs on stored evidence.
    return dataclasses.replace(check, problems=tuple(_phase_problems(pin_fields(pin),
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


def judge_patch_exact(evidence: Mapping[str, Any],
                      required: Sequence[str] = ("before", "after")) -> tuple[bool, str]:
    """Re-judge ``build.patch_exact`` from stored evidence.

    Parameters
    ----------
    evidence : mapping
        As made by :func:`patch_evidence`: the pin's declared ``pin_tree``,
        ``declared_patch_sha256`` and ``touches``, and ``checks`` mapping each phase
        (``"before"``, ``"after"``) to what it measured: ``head_tree``,
        ``patch_file_sha256``, ``patch_file_bytes``, ``diff_sha256``, ``diff_bytes``,
        ``status_lines``. An ``apply_error`` entry in ``checks`` is a FAIL.
    required : sequence of str
        Phases that must be present.

    Returns
    -------
    tuple of (bool, str)
        True iff in every required phase the patch file's digest equals the declared
        one, the diff's digest and length equal the patch file's, HEAD is the pin's tree,
        and the status is exactly `` M <touched path>`` per touched path; with the reason.
    """
    if not isinstance(evidence, Mapping):
        return False, "evidence is not a mapping"
    checks = evidence.get("checks")
    if not isinstance(checks, Mapping):
        return False, "evidence has no checks"
    problems: list[str] = []
    if "apply_error" in checks:
        problems.append(f"patch did not apply: {checks['apply_error']}")
    for when in required:
        phase = checks.get(when)
        if not isinstance(phase, Mapping):
            problems.append(f"{when}: check missing")
            continue
        problems += [f"{when}: {p}" for p in _phase_problems(evidence, phase)]
    if problems:
        return False, "; ".join(problems)
    last = checks[required[-1]] if required else {}
    return True, (f"{' and '.join(required)} the build: git diff equals the declared patch "
                  f"(sha256 {evidence['declared_patch_sha256']}, {last.get('patch_file_bytes')} "
                  f"bytes) on pin tree {evidence['pin_tree']}; status exactly "
                  f"{_expected_status(evidence['touches'])}, ignored files included")


def source_evidence(pin: Pin, computed_tree: str | None = None,
                    source: SourceTree | None = None) -> dict[str, Any]:
    """Assemble ``build.source_identity`` evidence.

    Parameters
    ----------
    pin : Pin
        The pin the source should match.
    computed_tree : str, optional
        The tree id computed now on the source folder; default recomputed from
        ``source.path`` with :func:`git_tree_id`.
    source : SourceTree, optional
        The obtained source (its origin and cache state are recorded).

    Returns
    -------
    dict
        ``{"pin", "pin_commit", "pin_tree", "computed_tree", "origin", "path", "cached"}``.
    """
    if computed_tree is None:
        if source is None:
            raise ValueError("need computed_tree or source")
        computed_tree = git_tree_id(source.path)
    return {"pin": pin.name, "pin_commit": pin.commit, "pin_tree": pin.tree,
            "computed_tree": computed_tree,
            "origin": dict(source.origin) if source is not None else None,
            "path": str(source.path) if source is not None else None,
            "cached": source.cached if source is not None else None}


def judge_source_identity(evidence: Mapping[str, Any]) -> tuple[bool, str]:
    """Re-judge ``build.source_identity`` from stored evidence.

    Parameters
    ----------
    evidence : mapping
        Holds ``computed_tree`` (tree id of the obtained folder) and ``pin_tree``.

    Returns
    -------
    tuple of (bool, str)
        True iff both are 40 lower-case hex digits and equal, with the reason.
    """
    if not isinstance(evidence, Mapping):
        return False, "evidence is not a mapping"
    computed, pinned = evidence.get("computed_tree"), evidence.get("pin_tree")
    for label, val in (("computed tree id", computed), ("pin tree id", pinned)):
        if not _is_oid(val):
            return False, f"{label} malformed: {val!r}"
    if computed != pinned:
        return False, f"source tree id {computed} is not the pin's {pinned}"
    return True, f"source tree id {computed} equals the pin's tree"
