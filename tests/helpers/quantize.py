"""``whisper-quantize`` of the pinned tree, built once per machine into the session cache.

Built the way stage 01 builds the unpatched whisper-cli of the default parameters: the
same options (``GGML_NATIVE=ON``, static, Release), against the same shared ggml (so the
audit's ggml is reused, re-hashed, not built again) and through the same compiler cache
(so libwhisper and ``common`` come from the unpatched build's objects), with CMake
configured on a copy of the cached pristine source, which is never written into. The
published entry ``<cache>/builds/quantize-<tree>-<ggml key>/`` keeps what the physical
tests need beside the binary: the static ggml libraries and public headers it linked, so
a test can compile a small C program against the exact ggml the quantizer runs. The entry
is staged and renamed into place under its lock, with ``build.json`` recording every
file's SHA-256; a later session reuses it only if every file still hashes to its record.
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

SCHEMA = "verifylib-test-quantize-2"
VARIANT = "ggml-unpatched"
"""The whisper-cli variant whose options, ggml and objects the quantizer shares."""
OPTIONS = {"GGML_NATIVE": "ON"}
"""What ``verifylib run`` passes for the default parameters (tests/conftest.py too)."""
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
    """Build (or reuse) whisper-quantize from ``src``, against the audit's shared ggml."""
    from verifylib.whispercpp import build_options, cmake_steps, compiler_cache, shared_ggml

    src = Path(src).resolve()
    cache_dir = Path(cache_dir).resolve()
    opts = build_options.effective_options(VARIANT, OPTIONS)
    ggml = shared_ggml.build_ggml(src, tree_id=tree_id,
                                  options=shared_ggml.ggml_options(VARIANT, opts),
                                  cache_dir=cache_dir, jobs=jobs, log=log)
    final = cache_dir / "builds" / f"quantize-{tree_id[:12]}-{ggml.key[:12]}"
    t0 = time.monotonic()

    def check() -> QuantizeBuild | None:
        try:
            meta = read_json(final / "build.json")
        except (OSError, ValueError):
            return None
        if (not isinstance(meta, dict) or meta.get("schema") != SCHEMA
                or meta.get("tree_id") != tree_id or meta.get("options") != opts
                or meta.get("ggml_key") != ggml.key or meta.get("files") != _files(final)):
            return None
        return _result(final, tree_id, True, time.monotonic() - t0)

    def produce() -> QuantizeBuild:
        root = cache_dir / "cmake" / final.name
        log(f"building whisper-quantize from {src} …")
        tree, bdir = cmake_steps.build_tree(src, root)
        built, _ = cmake_steps.cmake_target(tree, bdir, opts, "whisper-quantize",
                                            "whisper-quantize", jobs=jobs, timeout=1800,
                                            log=log, ggml=ggml,
                                            ccache=compiler_cache.compiler_cache(cache_dir))
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".staging-{final.name}-", dir=final.parent))
        try:
            (staging / "bin").mkdir()
            (staging / "lib").mkdir()
            shutil.copy2(built, staging / "bin")
            for lib in LIBS:
                shutil.copy2(ggml.prefix / "lib" / lib, staging / "lib" / lib)
            shutil.copytree(ggml.prefix / "include", staging / "include")
            write_json(staging / "build.json", {"schema": SCHEMA, "tree_id": tree_id,
                                                "options": opts, "ggml_key": ggml.key,
                                                "files": _files(staging)})
            publish_dir(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        seconds = time.monotonic() - t0
        log(f"built whisper-quantize in {seconds:.0f} s ({final})")
        return _result(final, tree_id, False, seconds)

    return produce_once(cache_dir / LOCKS_DIR, "quantize", final.name, check=check,
                        produce=produce, what=f"whisper-quantize build {final.name}", log=log)
