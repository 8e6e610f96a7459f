"""Obtaining a pristine whisper.cpp source, and its git tree id.

A source comes from a PyPI sdist, a git commit, a release archive or a local folder. It is
fetched and extracted safely into the cache, under its git tree id: the identity is git's
own (``git add -A -f && git write-tree``), so it holds whatever the origin. Every ``git``
run goes through :func:`verifylib.runtime.runner.run`, with every setting that could change a tree
id or a diff's bytes pinned on the command line or in the child environment (no system or
user git config, no autocrlf, fixed commit identity and dates); the patching in
:mod:`verifylib.whispercpp.source.patch` runs git through the same plumbing.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from verifylib.canonical import (
    dumps,
    os_litter,
    publish_dir,
    read_json,
    sha256_bytes,
    sha256_file,
    write_json,
)
from verifylib.errors import ParametersInvalid, SourceFailure
from verifylib.locks import (
    LOCKS_DIR,
    STAGING_PREFIX,
    held,
    make_owned_dir,
    produce_once,
    remove_owned_dir,
)
from verifylib.runtime.runner import CommandError, RunResult, run
from verifylib.whispercpp.source.pins import GIT_OID_RE, Pin, check_rel_path

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


class SourceError(SourceFailure):
    """A source could not be obtained (download, clone, unsafe or unreadable archive)."""


# ----------------------------------------------------------------------------- git plumbing

GIT_HOME = os.path.join(os.devnull, "home")
"""The ``HOME`` git runs with: a path below the null device, where no file can exist.

git still looks under ``$HOME`` (``.gitconfig``, ``.config/git/*``) even with
``GIT_CONFIG_GLOBAL`` set, and treats a path it cannot open because a parent is not a
folder (ENOTDIR) as a missing file: the user's files stay out of every result and nothing
is created. A throwaway folder did the same but was left in ``$TMPDIR`` by every process
that ends without running ``atexit`` handlers, every stage kernel among them (killed once
its notebook ends)."""


def _git_env(git_dir: Path, work_tree: Path | None) -> dict[str, str]:
    home = GIT_HOME
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


def run_git(args: Sequence[str | os.PathLike], *, git_dir: Path, work_tree: Path | None,
            cwd: Path | None = None, check: bool = True, stdin: bytes | None = None,
            timeout: float = 600.0, what: str | None = None) -> RunResult:
    """Run one git command on an explicit repository, isolated from the user's config.

    The command gets the fixed ``-c`` options, a ``HOME`` that holds nothing
    (:data:`GIT_HOME`), no system or global config, a fixed identity, and
    ``GIT_DIR``/``GIT_WORK_TREE`` (plus the index and object paths) set explicitly, so the
    caller's environment cannot point it elsewhere. It runs through
    :func:`verifylib.runtime.runner.run`.

    Parameters
    ----------
    args : sequence of str or path-like
        The git arguments (``["write-tree"]`` …).
    git_dir : Path
        The repository (``GIT_DIR``).
    work_tree : Path or None
        The work tree (``GIT_WORK_TREE``), None for none.
    cwd : Path, optional
        Working directory (default: ``work_tree``, else the parent of ``git_dir``).
    check : bool
        Raise :class:`verifylib.runtime.runner.CommandError` unless git exited 0.
    stdin : bytes, optional
        Bytes fed to git's standard input.
    timeout : float
        Seconds allowed.
    what : str, optional
        How the launch is described (default ``git <first argument>``).

    Returns
    -------
    RunResult
        The finished git process.
    """
    argv: list[str | os.PathLike] = ["git"]
    for opt in _GIT_CONFIG:
        argv += ["-c", opt]
    argv += list(args)
    return run(argv, cwd=cwd if cwd is not None else (work_tree or git_dir.parent),
               env_extra=_git_env(git_dir.resolve(),
                                  None if work_tree is None else work_tree.resolve()),
               stdin=stdin, check=check, timeout=timeout, what=what or f"git {args[0]}")


def git_tree_id(folder: Path) -> str:
    """Compute the git tree id of a folder's content, writing nothing inside it.

    The id ``git init && git add -A -f && git write-tree`` would give in ``folder``, but
    the repository lives in a temporary folder elsewhere and no object is written to it
    (the files are hashed, not stored). ``-f`` matters: upstream's
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
    verifylib.runtime.runner.CommandError
        If git fails.
    """
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise NotADirectoryError(f"not a directory: {folder}")
    with tempfile.TemporaryDirectory(prefix="verifylib-treeid-") as tmp:
        git_dir = Path(tmp) / "repo.git"
        run_git(["init", "-q"], git_dir=git_dir, work_tree=folder, cwd=Path(tmp), what="git init")
        # Hashed, not stored: `git add` would compress and write every blob into the
        # throw-away repository (measured: 3.0 s of CPU, three quarters of it system time,
        # on the 1,791 files of v1.8.5; this way 0.7 s, the same id). `ls-files --others`
        # with no exclude option lists what `add -A -f` adds, ignored files included; an
        # embedded repository is listed as `dir/` and added by name, a gitlink as `add`
        # makes it.
        listed = run_git(["ls-files", "-z", "--others", "--", "."], git_dir=git_dir,
                         work_tree=folder, cwd=folder, what="git ls-files --others")
        paths = b"".join(p.rstrip(b"/") + b"\0" for p in listed.stdout.split(b"\0") if p)
        run_git(["update-index", "-z", "--add", "--info-only", "--stdin"], git_dir=git_dir,
                work_tree=folder, cwd=folder, stdin=paths, what="git update-index --info-only")
        res = run_git(["write-tree", "--missing-ok"], git_dir=git_dir, work_tree=folder,
                      cwd=folder, what="git write-tree")
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

    Raises
    ------
    verifylib.errors.ParametersInvalid
        For an unknown kind, keys that do not fit the kind, or a malformed value; the
        message names the key.
    """

    kind: str
    package: str | None = None
    url: str | None = None
    commit: str | None = None
    path: Path | None = None
    subdir: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _SOURCE_KINDS:
            raise ParametersInvalid(f"source key kind: must be one of {_SOURCE_KINDS}, "
                                    f"got {self.kind!r}")
        needs = {"pypi-sdist": {"package"}, "git": {"url", "commit"},
                 "archive": {"path"}, "folder": {"path"}}[self.kind]
        given = {k for k in ("package", "url", "commit", "path") if getattr(self, k) is not None}
        if given != needs:
            raise ParametersInvalid(f"source kind {self.kind!r} takes the keys {sorted(needs)} "
                                    f"(+ optional subdir), got {sorted(given)}")
        if self.package is not None and not _REQ_RE.match(self.package):
            raise ParametersInvalid(f"source key package: pypi-sdist package must be an exact "
                                    f"'name==version', got {self.package!r}")
        if self.commit is not None and not GIT_OID_RE.match(self.commit):
            raise ParametersInvalid(f"source key commit: git commit must be 40 lower-case hex "
                                    f"digits, got {self.commit!r}")
        if self.path is not None and not isinstance(self.path, Path):
            object.__setattr__(self, "path", Path(self.path))
        if self.subdir is not None:
            err = check_rel_path(self.subdir)
            if err:
                raise ParametersInvalid(f"source key subdir: {err}")

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
            raise ParametersInvalid(f"unknown source keys {sorted(unknown)} "
                                    f"(allowed: {sorted(allowed)})")
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


PYWHISPERCPP_V185 = SourceSpec(kind="pypi-sdist", package="pywhispercpp==1.5.1",
                               subdir="whisper.cpp")
"""whisper.cpp v1.8.5, byte-identical inside the pywhispercpp 1.5.1 sdist (docs/facts.md)."""


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
        (``sdist_sha256``, ``archive_sha256``, ...), and ``os_litter`` when it holds files
        macOS writes on its own (``.DS_Store``, ``._*``: :func:`verifylib.canonical.os_litter`),
        which the tree id counts.
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
        raise SourceError(f"{archive}: unsupported archive type "
                          f"(tar.gz/tgz/tar/tar.xz/tar.bz2/zip)")
    if not hasattr(tarfile, "data_filter"):
        raise SourceError("safe tar extraction needs Python >= 3.11.4 "
                          "(tarfile extraction filters)")
    try:
        with tarfile.open(archive) as tf:
            # The 'data' filter refuses absolute paths, '..', links leaving the folder and
            # device files, and keeps the owner's executable bit (which git records).
            tf.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise SourceError(f"{archive}: cannot extract safely: {exc}") from exc


def copy_tree(src: Path, dest: Path) -> None:
    """Copy ``src`` to a new folder ``dest``, keeping modes and symlinks, skipping ``src/.git``."""
    top = src.resolve()

    def _ignore(folder: str, names: list[str]) -> list[str]:
        return [".git"] if Path(folder).resolve() == top and ".git" in names else []

    shutil.copytree(src, dest, symlinks=True, ignore=_ignore)


def _single_top(folder: Path, what: str) -> Path:
    entries = [p for p in folder.iterdir()]
    if len(entries) != 1 or not entries[0].is_dir():
        raise SourceError(f"{what}: expected one top-level folder, "
                          f"found {sorted(p.name for p in entries)}")
    return entries[0]


def _select_subdir(root: Path, subdir: str | None, what: str) -> Path:
    chosen = root if subdir is None else root / subdir
    if chosen.is_symlink() or not chosen.is_dir():
        raise SourceError(f"{what}: subdir {subdir!r} is not a folder")
    return chosen


def _spec_key(spec: SourceSpec, extra: Mapping[str, Any]) -> str:
    return sha256_bytes(dumps({"spec": spec.to_dict(), **extra}))


def _fetch_pypi_sdist(spec: SourceSpec, staging: Path,
                      log: Callable[[str], None]) -> tuple[Path, dict]:
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
    run_git(["init", "-q"], git_dir=git_dir, work_tree=tree, cwd=staging)
    res = run_git(["fetch", "-q", "--no-tags", "--depth=1", url, spec.commit], git_dir=git_dir,
               work_tree=tree, cwd=staging, check=False, timeout=1800)
    if not res.ok:
        # Some servers refuse fetching a commit by id; fall back to all branches and tags.
        res = run_git(["fetch", "-q", url, "+refs/heads/*:refs/remotes/origin/*",
                    "+refs/tags/*:refs/tags/*"], git_dir=git_dir, work_tree=tree, cwd=staging,
                   check=False, timeout=1800)
        if not res.ok:
            tail = "\n".join(res.stderr_text.strip().splitlines()[-10:])
            raise SourceError(f"git fetch {spec.url} failed ({res.describe()}):\n{tail}")
    res = run_git(["rev-parse", "--verify", "-q", f"{spec.commit}^{{commit}}"], git_dir=git_dir,
               work_tree=tree, cwd=staging, check=False)
    if not res.ok or res.stdout_text.strip() != spec.commit:
        raise SourceError(f"{spec.url}: commit {spec.commit} not found")
    run_git(["checkout", "-q", "-f", "--detach", spec.commit], git_dir=git_dir, work_tree=tree,
         cwd=tree, timeout=1800)
    commit_tree = run_git(["rev-parse", f"{spec.commit}^{{tree}}"], git_dir=git_dir,
                          work_tree=tree, cwd=staging).stdout_text.strip()
    origin = {"kind": spec.kind, "url": spec.url, "commit": spec.commit, "subdir": spec.subdir,
              "commit_tree": commit_tree}
    return _select_subdir(tree, spec.subdir, spec.url), origin


def _fetch_archive(spec: SourceSpec, staging: Path, log: Callable[[str], None],
                   archive_sha256: str) -> tuple[Path, dict]:
    assert spec.path is not None
    log(f"extracting {spec.path} …")
    ex = staging / "extract"
    _extract_archive(spec.path, ex)
    origin = {"kind": spec.kind, "archive": str(spec.path.resolve()),
              "archive_sha256": archive_sha256, "archive_bytes": spec.path.stat().st_size,
              "subdir": spec.subdir}
    return _select_subdir(ex, spec.subdir, str(spec.path)), origin


def _fetch_folder(spec: SourceSpec, staging: Path,
                  log: Callable[[str], None]) -> tuple[Path, dict]:
    assert spec.path is not None
    src = _select_subdir(spec.path, spec.subdir, str(spec.path))
    log(f"copying {src} …")
    dest = staging / "copy"
    copy_tree(src, dest)
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

    Concurrent processes on one cache fetch a spec once: the fetch runs under the spec's
    lock (``cache_dir/locks/source-<spec-key>.lock``) and a process that waited for it
    reuses the entry the holder published. A folder already published under the same tree
    id is never replaced while it still hashes to that id (another process may be
    building from it); only a damaged one is.

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

    if spec.kind == "folder":
        # A local folder can change between runs, so it is copied every time; only the
        # publication of its tree id is shared (and locked) in _publish_tree.
        return _fetch_and_publish(spec, cache_dir, archive_sha, None, log)
    key = _spec_key(spec, {"archive_sha256": archive_sha} if archive_sha else {})
    index_path = sources / "index" / f"{key}.json"
    reported: set[str] = set()

    # One process fetches a given spec at a time; the others wait and then find it in the
    # index (the sdist is downloaded once, not once per concurrent audit).
    return produce_once(cache_dir / LOCKS_DIR, "source", key,
                        check=lambda: _cached_source(index_path, sources, reported, log),
                        produce=lambda: _fetch_and_publish(spec, cache_dir, archive_sha,
                                                           index_path, log),
                        what=f"source {_describe_spec(spec)}", log=log)


def _cached_source(index_path: Path, sources: Path, reported: set[str],
                   log: Callable[[str], None]) -> SourceTree | None:
    """Return the cached entry an index file names, if it still hashes to its tree id.

    ``reported`` holds what was already logged (wrong tree ids, a damaged index), so that
    each is logged once.
    """
    if not index_path.is_file():
        return None
    try:
        entry = read_json(index_path)
        recorded = entry["tree_id"]
        origin = dict(entry["origin"])
        if not (isinstance(recorded, str) and GIT_OID_RE.match(recorded)):
            raise ValueError(f"tree_id {recorded!r} is not a git object id")
    except (ValueError, KeyError, TypeError, OSError) as exc:
        # Written whole or not at all (write_json), so one that does not read is damaged:
        # the source is fetched again and the index rewritten, and the user told.
        if "index" not in reported:  # checked once before and once under the lock
            reported.add("index")
            log(f"cached source index {index_path} is damaged ({type(exc).__name__}: "
                f"{exc}): refetching")
        return None
    folder = sources / recorded
    if not folder.is_dir():
        return None
    tree = git_tree_id(folder)
    if tree == recorded:
        log(f"source {tree} from cache ({folder})")
        return SourceTree(path=folder, tree_id=tree, origin=origin, cached=True)
    # A corrupted entry is refetched rather than trusted or half-used.
    if tree not in reported:  # checked once before and once under the lock
        reported.add(tree)
        log(f"cached source {folder} hashes to {tree}, not {recorded}: refetching")
    return None


def _describe_spec(spec: SourceSpec) -> str:
    return spec.package or (f"{spec.url}@{spec.commit[:12]}" if spec.commit else None) \
        or str(spec.path)


def _publish_tree(root: Path, sources: Path, tree: str, cache_dir: Path,
                  log: Callable[[str], None]) -> tuple[Path, bool]:
    """Publish a fetched folder as ``sources/<tree>`` unless an intact one is there.

    Two different specs (an sdist and a git commit, or two folder copies) can yield the
    same tree, and another process may be building from that folder right now, so an
    existing folder that still hashes to ``tree`` is kept and reused, never replaced;
    only a damaged one is. The check and the rename happen under the tree's lock.

    Returns
    -------
    (Path, bool)
        The published folder and whether an existing one was reused.
    """
    final = sources / tree
    with held(cache_dir / LOCKS_DIR, "source-tree", tree, what=f"source tree {tree}", log=log):
        if final.is_dir() and git_tree_id(final) == tree:
            return final, True
        return publish_dir(root, final), False


def _fetch_and_publish(spec: SourceSpec, cache_dir: Path, archive_sha: str | None,
                       index_path: Path | None, log: Callable[[str], None]) -> SourceTree:
    """Fetch ``spec`` into a private staging folder, identify it and publish it."""
    sources = cache_dir / "sources"
    staging = make_owned_dir(sources, STAGING_PREFIX)
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
        # Counted in the tree id like any file (git's own identity, nothing skipped), so
        # recorded: a tree that is not the pin's because of them says so.
        litter = os_litter(root)
        if litter:
            origin["os_litter"] = list(litter)
        tree = git_tree_id(root)
        final, reused = _publish_tree(root, sources, tree, cache_dir, log)
    except (CommandError, OSError) as exc:
        raise SourceError(f"cannot obtain {spec.to_dict()}: {exc}") from exc
    finally:
        remove_owned_dir(staging)
    if index_path is not None:
        write_json(index_path, {"tree_id": tree, "origin": origin})
    log(f"source {tree} obtained ({final}{', identical to the cached folder' if reused else ''})")
    return SourceTree(path=final, tree_id=tree, origin=origin, cached=reused)


# ----------------------------------------------------------------------------- evidence

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
