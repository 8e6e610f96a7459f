"""Shared helpers for the verifylib.whispercpp.source tests: a synthetic pin made with plain git.

The ``synth`` fixture built from these is in tests/fake/conftest.py.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import tarfile
import zipfile
from pathlib import Path

from verifylib.whispercpp import source
from verifylib.runtime.runner import run

V185_TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
V185_SDIST_SHA256 = "5df897e5dd9d9f16804fc937bd85b9f5880a0b29a55f8843585e0e03d76195e5"
V185_PATCH_SHA256 = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"

SRC_LINES = [f"int line_{i} = {i};\n" for i in range(1, 21)]


# ----------------------------------------------------------------------------- helpers

def plain_git(home: Path, *args, cwd: Path, stdin: bytes | None = None):
    """Ordinary git in ``cwd``, independent of verifylib.whispercpp.source's plumbing."""
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": str(home),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return run(["git", "-c", "safe.directory=*", "-c", "core.autocrlf=false",
                "-c", "init.defaultBranch=main", *args], cwd=cwd, env_extra=env, stdin=stdin,
               check=True)


def make_pristine(root: Path) -> Path:
    """A tiny upstream-like tree: .gitignore hiding build/ and *.o, a tracked *.o, an
    executable script, a symlink."""
    root.mkdir(parents=True)
    (root / ".gitignore").write_text("build/\n*.o\n")
    (root / "src").mkdir()
    (root / "src" / "whisper.cpp").write_text("".join(SRC_LINES))
    (root / "README.md").write_text("readme\n")
    (root / "tools").mkdir()
    (root / "tools" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "tools" / "run.sh", 0o755)
    (root / "models").mkdir()
    (root / "models" / "tracked.o").write_bytes(b"\x00\x01binary")  # tracked despite .gitignore
    os.symlink("README.md", root / "readme-link")
    return root


@dataclasses.dataclass
class Synth:
    pristine: Path
    pin: source.Pin
    manifest: Path
    home: Path


def snapshot(folder: Path) -> dict:
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[p.relative_to(folder).as_posix()] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def make_tar(src: Path, dest: Path, top: str) -> Path:
    with tarfile.open(dest, "w:gz") as tf:
        tf.add(src, arcname=top)
    return dest


def make_zip(src: Path, dest: Path, top: str) -> Path:
    with zipfile.ZipFile(dest, "w") as zf:
        for p in sorted(src.rglob("*")):
            name = f"{top}/{p.relative_to(src).as_posix()}"
            st = p.lstat()
            if p.is_symlink():
                info = zipfile.ZipInfo(name)
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                zf.writestr(info, os.readlink(p))
            elif p.is_dir():
                continue
            else:
                info = zipfile.ZipInfo(name)
                info.external_attr = (stat.S_IFREG | stat.S_IMODE(st.st_mode)) << 16
                zf.writestr(info, p.read_bytes())
    return dest
