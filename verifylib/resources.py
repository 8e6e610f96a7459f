"""Where verifylib's data files are.

The stage notebooks, the pins and patches, the default parameter file and its audio
fixtures.
The repository keeps them in top-level folders (``notebooks/``, ``parameters/``,
``patches/``), the layout docs/architecture.md describes, and the wheel carries a copy of the
three as ``verifylib/_data/`` (``setup.py`` copies them at build time). A source checkout
or an editable install has no ``_data`` and reads the top-level folders; an installed wheel
has no checkout and reads its copy. This module makes that choice, and no other module
builds these paths.

It is written here rather than taken from ``importlib.resources`` because the files live
outside the package in a checkout, which ``importlib.resources`` cannot reach, and because
papermill needs a real folder as the notebooks' working directory, not a resource handle.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_root", "is_packaged", "notebooks_dir", "notebook", "patches_dir",
           "manifest_path", "parameters_dir", "default_parameters", "fixtures_dir",
           "reports_dir", "policies_dir", "cache_dir"]

_PACKAGE_DIR = Path(__file__).resolve().parent
_PACKAGED = _PACKAGE_DIR / "_data"
_CHECKOUT = _PACKAGE_DIR.parent


def is_packaged() -> bool:
    """Whether the data comes from the copy shipped in the wheel.

    Returns
    -------
    bool
        True for an installed wheel, False for a source checkout or editable install.
    """
    return _PACKAGED.is_dir()


def data_root() -> Path:
    """Return the folder holding ``notebooks/``, ``parameters/`` and ``patches/``.

    Returns
    -------
    Path
        ``verifylib/_data`` inside an installed wheel, else the checkout's root.
    """
    return _PACKAGED if is_packaged() else _CHECKOUT


def notebooks_dir() -> Path:
    """Return the folder of the six stage notebooks (their working directory under papermill).

    Returns
    -------
    Path
        ``<data root>/notebooks``.
    """
    return data_root() / "notebooks"


def notebook(stage: str) -> Path:
    """Return the notebook of one stage.

    Parameters
    ----------
    stage : str
        A stage name such as ``"01_build"``.

    Returns
    -------
    Path
        ``<notebooks>/<stage>.ipynb`` (whether or not it exists).
    """
    return notebooks_dir() / f"{stage}.ipynb"


def patches_dir() -> Path:
    """Return the folder of the compatibility patches named by the pin manifest.

    Returns
    -------
    Path
        ``<data root>/patches``.
    """
    return data_root() / "patches"


def manifest_path() -> Path:
    """Return the pin manifest, ``patches/manifest.yaml``.

    Returns
    -------
    Path
        ``<data root>/patches/manifest.yaml``.
    """
    return patches_dir() / "manifest.yaml"


def parameters_dir() -> Path:
    """Return the folder of the shipped parameter files.

    Parameter values injected without their file (papermill's ``-f``) resolve their
    relative paths against it.

    Returns
    -------
    Path
        ``<data root>/parameters``.
    """
    return data_root() / "parameters"


def default_parameters() -> Path:
    """Return the parameter file used when none is given: ``parameters/tiny-en.yaml``.

    Returns
    -------
    Path
        ``<data root>/parameters/tiny-en.yaml``.
    """
    return parameters_dir() / "tiny-en.yaml"


def fixtures_dir() -> Path:
    """Return the folder of the default parameters' audio fixtures, with ``SHA256SUMS``.

    Returns
    -------
    Path
        ``<data root>/parameters/fixtures``.
    """
    return parameters_dir() / "fixtures"


def policies_dir() -> Path:
    """Return the folder of the packaged thresholds (``fp32-v1``, ``wer-v2`` …).

    Returns
    -------
    Path
        ``verifylib/policies``: package data, the same in a checkout and in a wheel.
    """
    return _PACKAGE_DIR / "policies"


def reports_dir() -> Path:
    """Return the default root of run directories: ``reports/`` in the current directory.

    Taken from the working directory, not from :func:`data_root`, because run output
    belongs to the user: an installed package's folder may be read-only or shared.

    Returns
    -------
    Path
        An absolute path (it may not exist yet).
    """
    return Path.cwd() / "reports"


def cache_dir() -> Path:
    """Return the shared cache of sources, models and builds.

    Returns
    -------
    Path
        ``$VERIFYLIB_CACHE`` when set, else ``~/.cache/verifylib``.
    """
    env = os.environ.get("VERIFYLIB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "verifylib"


def package_version() -> str:
    """Return the installed verifylib's version, or ``unknown`` from a tree never installed.

    Returns
    -------
    str
        E.g. ``0.2.0``: what a receipt records as the package that made it.
    """
    from importlib import metadata

    try:
        return metadata.version("verifylib")
    except metadata.PackageNotFoundError:
        return "unknown"
