"""``whisper-quantize`` of the pinned tree, built once per machine into the session cache.

The build is of the cached pristine source (never written into: CMake configures in
``<cache>/cmake/quantize-<tree>``), static and portable (``-DBUILD_SHARED_LIBS=OFF
-DGGML_NATIVE=OFF``, Release, no tests), and the published entry
``<cache>/builds/quantize-<tree>/`` keeps what the physical tests need beside the binary:
ggml's three static libraries and its public headers, so a test can compile a small C
program against the exact ggml the quantizer links. The entry is staged and renamed into
place under its lock, with ``build.json`` recording every file's SHA-256; a later session
reuses it only if every file still hashes to its record (about 2 minutes to rebuild).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from verifylib.canonical import publish_dir, read_json, sha256_file, write_json
from verifylib.locks import LOCKS_DIR, produce_once
from verifylib.runtime.runner import run

SCHEMA = "verifylib-test-quantize-1"
OPTIONS = {"BUILD_SHARED_LIBS": "OFF", "GGML_NATIVE": "OFF", "CMAKE_BUILD_TYPE": "Release",
           "WHISPER_BUILD_TESTS": "OFF"}
TARGETS = ("whisper-quantize", "ggml", "ggml-base", "ggml-cpu")
LIBS = ("libggml.a", "libggml-base.a", "libggml-cpu.a")


@dataclass(frozen=True)
class QuantizeBuild:
    """The published build: ``bin/whisper-quantize``, ``lib/*.a``, ``include/``."""

    root: Path
    binary: Path
    libs: tuple[Path, ...]
    include: Path
    tree_id: str
    cached: bool
    seconds: float


def _files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): sha256_file(p)
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "build.json"}


def _result(root: Path, tree_id: str, cached: bool, seconds: float) -> QuantizeBuild:
    return QuantizeBuild(root=root, binary=root / "bin" / "whisper-quantize",
                         libs=tuple(root / "lib" / n for n in LIBS),
                         include=root / "include", tree_id=tree_id, cached=cached,
                         seconds=seconds)


def build_quantize(src: Path, tree_id: str, cache_dir: Path, *, jobs: int = 2,
                   log: Callable[[str], None] = print) -> QuantizeBuild:
    """Build (or reuse) whisper-quantize and ggml's static libraries from ``src``."""
    cache_dir = Path(cache_dir).resolve()
    final = cache_dir / "builds" / f"quantize-{tree_id}"
    t0 = time.monotonic()

    def check() -> QuantizeBuild | None:
        try:
            meta = read_json(final / "build.json")
        except (OSError, ValueError):
            return None
        if (not isinstance(meta, dict) or meta.get("schema") != SCHEMA
                or meta.get("tree_id") != tree_id or meta.get("options") != OPTIONS
                or meta.get("files") != _files(final)):
            return None
        return _result(final, tree_id, True, time.monotonic() - t0)

    def produce() -> QuantizeBuild:
        bdir = cache_dir / "cmake" / f"quantize-{tree_id}"
        shutil.rmtree(bdir, ignore_errors=True)
        bdir.mkdir(parents=True)
        env = {"GIT_CEILING_DIRECTORIES": str(Path(src).parent)}
        log(f"building whisper-quantize from {src} (about 2 minutes) …")
        run(["cmake", "-S", src, "-B", bdir, *(f"-D{k}={v}" for k, v in OPTIONS.items())],
            check=True, timeout=900, env_extra=env, what="cmake configure (quantize)")
        run(["cmake", "--build", bdir, "--target", *TARGETS, "-j", str(jobs)], check=True,
            timeout=1800, env_extra=env, what="cmake build (quantize)")
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".staging-quantize-{tree_id[:12]}-",
                                        dir=final.parent))
        try:
            (staging / "bin").mkdir()
            (staging / "lib").mkdir()
            shutil.copy2(bdir / "bin" / "whisper-quantize", staging / "bin")
            for lib in LIBS:
                (found,) = list(bdir.rglob(lib))
                shutil.copy2(found, staging / "lib" / lib)
            shutil.copytree(Path(src) / "ggml" / "include", staging / "include")
            write_json(staging / "build.json", {"schema": SCHEMA, "tree_id": tree_id,
                                                "options": OPTIONS,
                                                "files": _files(staging)})
            publish_dir(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(bdir, ignore_errors=True)
        seconds = time.monotonic() - t0
        log(f"built whisper-quantize in {seconds:.0f} s ({final})")
        return _result(final, tree_id, False, seconds)

    return produce_once(cache_dir / LOCKS_DIR, "quantize", tree_id, check=check,
                        produce=produce, what=f"whisper-quantize build {tree_id[:12]}", log=log)
