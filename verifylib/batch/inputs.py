"""The parameter files of a batch, read and checked before any work.

Kept apart from the batch's execution (:mod:`verifylib.batch.audit`), which loads the
kernel client, papermill's notebook formats and the report renderer: a refused file exits
2 without importing any of them, in about a second rather than the several seconds they
take to import on a busy machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from verifylib.params import Params, check_distinct_names, load

if TYPE_CHECKING:
    from verifylib.models.encoder_card import EncoderCard


def preflight(params: Params) -> "EncoderCard | None":
    """Read what the parameters hand over as files, before any work (a bad one exits 2).

    The parameter validation checks a given encoder's folder shape (or its zip's central
    directory); here the encoder is read as stage 02 will read it (its protobuf or compiled
    metadata, its program; from a zip, those few files unpacked into a private temporary
    folder), so an unreadable one is refused with the parameter key before a run directory
    exists. A folder is checked whole first
    (:func:`verifylib.models.encoder_reader.check_given_encoder`): no link anywhere, only
    bounded, allocated regular files, a ``model.mil`` that parses, and every weight its
    program names a blob inside the folder.

    Parameters
    ----------
    params : Params
        Validated parameters.

    Returns
    -------
    EncoderCard or None
        The given encoder's card as read here (a zipped one's from its unpacked files),
        None when the suite exports the encoder.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        Naming the parameter file, the key and what is wrong.
    """
    from verifylib.errors import ParametersInvalid

    if params.encoder is None:
        return None
    from verifylib.models.encoder_reader import check_given_encoder
    from verifylib.models.encoder_zip import describe_archive
    describe = describe_archive if params.encoder.archive else check_given_encoder
    try:
        return describe(params.encoder.path)
    except ParametersInvalid as exc:
        raise ParametersInvalid(f"{params.origin}: key encoder.path: {exc}") from None


def load_all(paths: Sequence[str | Path], *, build_tools: bool = True) -> list[Params]:
    """Validate every parameter file (or folder of ``*.yaml``) before any work starts.

    Parameters
    ----------
    paths : sequence of path-like
        Parameter files, or folders whose ``*.yaml`` and ``*.yml`` files are all read
        (in sorted order).
    build_tools : bool
        Also refuse a host without the build tools every audit needs (cmake, git, a C and
        a C++ compiler: :func:`verifylib.runtime.tools.require_tools`). False only for a
        driver whose audits run on other hosts (the Ray executor).

    Returns
    -------
    list of Params
        One per file, in the order given.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        For the first unusable file, naming it and the key; or for two files whose model
        names are equal, also when only in case (:func:`~verifylib.params.check_distinct_names`).
    verifylib.runtime.tools.ToolMissing
        With ``build_tools``, for a missing build tool (a ``ParametersInvalid`` too).
    """
    from verifylib.errors import ParametersInvalid
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            # ``._x.yaml`` is the AppleDouble companion macOS writes beside x.yaml on
            # volumes without extended attributes (a USB stick, a network share): not a
            # parameter file.
            found = sorted(f for f in list(p.glob("*.yaml")) + list(p.glob("*.yml"))
                           if not f.name.startswith("._"))
            if not found:
                raise ParametersInvalid(f"{p}: folder holds no *.yaml parameter files")
            files += found
        else:
            files.append(p)
    out = [load(f) for f in files]
    for params in out:
        preflight(params)
    check_distinct_names(out)
    if build_tools:
        # Every audit builds whisper.cpp and identifies its source with git: a missing
        # tool exits 2 naming what installs it, before any run directory exists.
        from verifylib.runtime.tools import require_tools
        require_tools()
    return out
