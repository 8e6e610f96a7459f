"""The Core ML seam's sources, laid into a whisper.cpp build tree (docs/runtime-contract.md §11).

The seam is C++ (``coreml_seam/whisper_coreml_seam.cpp``) and a CMake file
(``coreml_seam/attach.cmake``) that attaches it to whisper.cpp's ``whisper`` library
without editing an upstream file; the contract's header is generated from
:func:`verifylib.runtime.contracts.seam.c_header`, so the markers the rules match are the
ones the binary prints. :func:`seam_digest` covers all three, and enters the build key of
every seam variant (:mod:`verifylib.whispercpp.build_options`), so a changed seam is a new
build.
"""

from __future__ import annotations

from pathlib import Path

from verifylib.canonical import dumps, sha256_bytes
from verifylib.runtime.contracts.seam import c_header

SEAM_FOLDER = "verifylib-seam"
"""The seam's folder inside a build's source copy (never inside the pinned work tree)."""

ATTACH_FILE = "attach.cmake"
"""The file handed to whisper.cpp's configure as ``CMAKE_PROJECT_INCLUDE``."""

HEADER_FILE = "verifylib_seam_contract.h"
"""The generated header the C++ source includes."""

_SOURCES = Path(__file__).resolve().parent / "coreml_seam"


def seam_files() -> dict[str, bytes]:
    """Return the seam's files by name: the C++ source, the CMake file, the contract header.

    Returns
    -------
    dict of str to bytes
    """
    files = {p.name: p.read_bytes() for p in sorted(_SOURCES.iterdir())
             if p.suffix in (".cpp", ".cmake")}
    files[HEADER_FILE] = c_header().encode()
    return files


def seam_digest() -> str:
    """Return the SHA-256 that identifies the seam's sources (a seam build's key names it).

    Returns
    -------
    str
        64 hex digits over each file's name and digest.
    """
    return sha256_bytes(dumps({name: sha256_bytes(data)
                               for name, data in seam_files().items()}))


def lay_out(tree: Path) -> Path:
    """Write the seam's files into a build's source copy.

    Parameters
    ----------
    tree : Path
        The source copy a seam variant configures
        (:func:`verifylib.whispercpp.cmake_steps.build_tree`).

    Returns
    -------
    Path
        The seam folder, ``tree/verifylib-seam``.

    Raises
    ------
    FileExistsError
        If the tree already holds a seam folder (an upstream tree never does).
    """
    folder = Path(tree) / SEAM_FOLDER
    folder.mkdir()
    for name, data in seam_files().items():
        (folder / name).write_bytes(data)
    return folder
