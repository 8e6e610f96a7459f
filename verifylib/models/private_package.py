"""A saved ``.mlpackage`` handed to coremltools only as a private copy.

coremltools writes into every package it opens: its package library (``ModelPackage``,
behind ``load_spec`` and ``MLModel``) rewrites ``Manifest.json`` and so changes the
folder's modification time, and a manifest that coremltools did not format itself gets
new bytes as well (measured with coremltools 9.0 on Linux). A package is either what the
user gave or part of a published run, and neither may change when read, so every opening
goes through :func:`private_copy`: a temporary folder holding a real copy of
``Manifest.json``, fresh directories, and a symbolic link to every other file of the given
package. coremltools only reads those files (the model specification, the weights), so
linking them spares copying weights that run to gigabytes; whatever it writes lands in the
temporary folder, which is removed when the opening ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

MANIFEST = "Manifest.json"
"""The package's manifest, the one file coremltools rewrites on opening (copied, not linked)."""


def _mirror(given: Path, copy: Path, top: bool) -> None:
    """Make ``copy`` a folder of links to ``given``'s files, its manifest copied."""
    copy.mkdir()
    with os.scandir(given) as entries:
        for entry in entries:
            source, target = Path(entry.path), copy / entry.name
            if entry.is_dir(follow_symlinks=False):
                _mirror(source, target, False)
            elif top and entry.name == MANIFEST:
                shutil.copyfile(source, target)
            else:
                os.symlink(source.absolute(), target)


@contextmanager
def private_copy(package: str | os.PathLike) -> Iterator[Path]:
    """Yield a private copy of a package for coremltools to open (removed afterwards).

    Parameters
    ----------
    package : path-like
        The saved ``.mlpackage`` folder: one the user gave or one inside a run.

    Yields
    ------
    Path
        The copy, under the same name in a fresh temporary folder: ``Manifest.json`` copied,
        every directory made anew, every other file a symbolic link to the given one.

    Raises
    ------
    NotADirectoryError
        If ``package`` is not a folder.
    """
    given = Path(package)
    if not given.is_dir():
        raise NotADirectoryError(f"{given}: not a saved .mlpackage folder")
    tmp = Path(tempfile.mkdtemp(prefix="verifylib-package-"))
    try:
        copy = tmp / (given.name or "model.mlpackage")
        _mirror(given, copy, True)
        yield copy
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_spec(package: str | os.PathLike) -> Any:
    """Read a package's protobuf specification with coremltools, from a private copy.

    Parameters
    ----------
    package : path-like
        The saved ``.mlpackage`` folder.

    Returns
    -------
    coremltools.proto.Model_pb2.Model
        What ``coremltools.models.utils.load_spec`` reads.
    """
    from coremltools.models.utils import load_spec

    with private_copy(package) as copy:
        return load_spec(str(copy))


@dataclass(frozen=True)
class OpenedPackage:
    """A package as coremltools' ``MLModel`` reads it, without loading the model.

    Attributes
    ----------
    spec : coremltools.proto.Model_pb2.Model
        The model specification.
    weights_dir : str or None
        The manifest's weights folder inside the *given* package (read-only use: the
        program's weights are mapped from it), None when the package has none.
    """

    spec: Any
    weights_dir: str | None


def open_package(package: str | os.PathLike) -> OpenedPackage:
    """Open a package with ``MLModel(path, skip_model_load=True)``, from a private copy.

    Parameters
    ----------
    package : path-like
        The saved ``.mlpackage`` folder.

    Returns
    -------
    OpenedPackage
        Its specification, and its weights folder mapped back into ``package`` (the copy
        is gone when this returns).

    Raises
    ------
    ValueError
        If the manifest places the weights folder outside the package.
    """
    import coremltools as ct

    with private_copy(package) as copy:
        model = ct.models.MLModel(str(copy), skip_model_load=True)
        spec, found = model.get_spec(), model.weights_dir
        if found is None:
            return OpenedPackage(spec, None)
        rel = os.path.relpath(os.path.realpath(found), os.path.realpath(copy))
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        raise ValueError(f"{package}: the manifest's weights folder leads outside the "
                         f"package ({found})")
    return OpenedPackage(spec, os.path.join(os.fspath(package), rel))
