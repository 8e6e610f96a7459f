"""The simulated Core ML framework's memory: which compiled models this framework can load.

A real ``.mlmodelc`` of an ML program carries everything Core ML needs: ``model.mil`` (the
program as MIL text), ``weights/weight.bin`` and ``coremldata.bin`` (a compiled binary,
Apple's private format). The simulated framework does not parse MIL text back into a
program; instead the simulated compiler (``coremlc.py``) remembers, for each compile, the
model specification it compiled, and writes into ``coremldata.bin`` an opaque compile id.
Loading a folder (the simulated ``whisper-cli``'s Core ML step, the fake
``libcoremlpython``) reads that id and finds the compile here:

- a folder without a readable ``coremldata.bin`` or ``model.mil``, or whose
  ``coremldata.bin`` is not one this compiler wrote, does not load (a corrupt model);
- a compile id this memory does not hold does not load (a folder no simulated ``coremlc``
  compiled: Core ML could not read it either);
- a ``model.mil`` changed after compiling does not load (its digest is not the compile's);
- a compile made for another platform (the ``other-os`` compiler) does not load on macOS;
- a program whose weights are in ``weights/weight.bin`` does not load without that file.

The program executed is the remembered specification with the folder's OWN
``weights/weight.bin``, so replaced weights change what the model computes, as on a Mac.

The memory is one folder shared by every simulated Mac (the scenario's ``framework_dir``,
by default :func:`default_dir`): a model compiled on one simulated Mac loads on another, as
a downloaded ``.mlmodelc`` does. Entries are content-addressed and written atomically, so
concurrent sessions share it safely. Standard library only: ``runtime.py`` imports it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"\x00\x01verifylib simulated coremldata\x00"
"""How every ``coremldata.bin`` the simulated compiler writes begins."""

MACOS = "macOS"


class NotLoadable(Exception):
    """The folder does not load; ``str(exc)`` says why, as Core ML's error would."""


@dataclass(frozen=True)
class Compiled:
    """One remembered compile.

    Attributes
    ----------
    compile_id : str
        What the folder's ``coremldata.bin`` names.
    spec : Path
        The model specification (``Model_pb2.Model`` bytes) the compiler compiled.
    platform : str
        The platform the folder was compiled for.
    has_weights : bool
        Whether the program reads ``weights/weight.bin``.
    """

    compile_id: str
    spec: Path
    platform: str
    has_weights: bool


def default_dir() -> Path:
    """The memory every simulated Mac shares unless its scenario names another."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"verifylib-simmac-coreml-framework-{uid}"


def framework_dir(scenario: dict) -> Path:
    """The memory a scenario's simulated Mac uses."""
    return Path(scenario.get("framework_dir") or default_dir())


def compile_id(model_mil: bytes, platform: str) -> str:
    """The id of compiling ``model_mil`` for ``platform`` (the same compile, the same id)."""
    return hashlib.sha256(platform.encode() + b"\n" + model_mil).hexdigest()


def coremldata(cid: str) -> bytes:
    """The bytes of ``coremldata.bin`` for the compile ``cid``."""
    return MAGIC + cid.encode("ascii")


def remember(memory: Path, model_mil: bytes, spec: bytes, platform: str,
             has_weights: bool) -> str:
    """Record one compile; return its id (for ``coremldata.bin``).

    Parameters
    ----------
    memory : Path
        The framework's memory folder (created).
    model_mil : bytes
        The ``model.mil`` the compiler wrote.
    spec : bytes
        The model specification it compiled.
    platform : str
        ``macOS`` or another platform.
    has_weights : bool
        Whether the program has a weight file.

    Returns
    -------
    str
    """
    cid = compile_id(model_mil, platform)
    dest = Path(memory) / cid
    if (dest / "entry.json").is_file():
        return cid
    Path(memory).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{cid[:12]}-", dir=memory))
    (tmp / "model.mlmodel").write_bytes(spec)
    (tmp / "entry.json").write_text(json.dumps({
        "platform": platform, "has_weights": has_weights,
        "model_mil_sha256": hashlib.sha256(model_mil).hexdigest()}))
    try:
        os.rename(tmp, dest)
    except OSError:  # another process remembered the same compile first
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return cid


def recall(memory: Path, mlmodelc: str) -> Compiled:
    """The compile behind the folder ``mlmodelc``, if this framework can load it.

    Parameters
    ----------
    memory : Path
        The framework's memory folder.
    mlmodelc : str
        The compiled model folder.

    Returns
    -------
    Compiled

    Raises
    ------
    NotLoadable
        If the folder does not load (see the module docstring for every case).
    """
    def read(name: str) -> bytes:
        try:
            with open(os.path.join(mlmodelc, name), "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise NotLoadable(f"{mlmodelc}: cannot read {name} ({exc.strerror})") from None

    blob = read("coremldata.bin")
    mil = read("model.mil")
    if not blob.startswith(MAGIC):
        raise NotLoadable(f"{mlmodelc}: coremldata.bin is not a compiled model")
    cid = blob[len(MAGIC):].decode("ascii", "replace")
    entry_dir = Path(memory) / cid
    try:
        entry = json.loads((entry_dir / "entry.json").read_text())
    except (OSError, ValueError):
        raise NotLoadable(f"{mlmodelc}: not a model this Core ML can read "
                          "(no simulated coremlc compiled it)") from None
    if hashlib.sha256(mil).hexdigest() != entry["model_mil_sha256"]:
        raise NotLoadable(f"{mlmodelc}/model.mil: error parsing MIL model (it is not the "
                          "program that was compiled)")
    if entry["platform"] != MACOS:
        raise NotLoadable(f"{mlmodelc}: compiled for {entry['platform']}, not for macOS")
    if entry["has_weights"] and not os.path.isfile(os.path.join(mlmodelc, "weights",
                                                                "weight.bin")):
        raise NotLoadable(f"{mlmodelc}/model.mil: could not open "
                          f"{mlmodelc}/weights/weight.bin")
    return Compiled(cid, entry_dir / "model.mlmodel", entry["platform"], entry["has_weights"])


def loadable(memory: Path, mlmodelc: str) -> bool:
    """Whether the folder loads (:func:`recall` without the reason)."""
    try:
        recall(memory, mlmodelc)
    except NotLoadable:
        return False
    return True


__all__ = ["MAGIC", "NotLoadable", "Compiled", "default_dir", "framework_dir", "compile_id",
           "coremldata", "remember", "recall", "loadable"]
