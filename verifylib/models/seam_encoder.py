"""What the Core ML seam loads: a compiled model's program, or a package's stand-in.

whisper.cpp's ``whisper_coreml_init`` receives the ``.mlmodelc`` path it derived from
``-m``. Apple's framework loads the compiled model found there; the seam
(docs/runtime-contract.md §11) loads, from the same folder, the program verifylib's executor
runs in Apple's place:

- a compiled model (``model.mil`` and ``weights/weight.bin``, a given ``.mlmodelc`` or its
  unpacked zip, or one ``coremlc`` compiled on a Mac): its program is read from the text,
  as :mod:`verifylib.numerics.mil_compiled` reads it for parity;
- a **stand-in** where no ``coremlc`` can run (the suite's own export on Linux): a folder
  at the derived path holding one file, ``verifylib-seam-standin.json``, which names the
  exported ``.mlpackage`` and its tree digest. The program comes from that package. A
  stand-in is never an ``.mlmodelc``: it lives in a scratch folder outside the run, Core ML
  would refuse it, and the seam re-hashes the package before loading.

Either way a load is refused wherever Core ML's would fail: no folder, a missing or
unreadable ``model.mil`` or weight file, a program that does not parse or holds an
operation the executor lacks, IO other than one float32 ``logmel_data`` of rank 3 in and
a float32 ``output`` of rank 3 out.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifylib.canonical import dumps, tree_digest
from verifylib.errors import ParametersInvalid
from verifylib.runtime.contracts import COREML_INPUT_NAME, COREML_OUTPUT_NAME
from verifylib.runtime.contracts.seam import STANDIN_FILE, STANDIN_KIND

__all__ = ["SeamLoadRefused", "SeamProgram", "load_seam_program", "write_standin"]


class SeamLoadRefused(ParametersInvalid):
    """The folder the seam was asked to load holds no program it can run (init returns NULL)."""


@dataclass
class SeamProgram:
    """A program the seam runs, and where it came from.

    Attributes
    ----------
    program : verifylib.numerics.mil_exec.Program
        The executable program.
    kind : str
        ``mlmodelc`` (read from ``model.mil``) or ``standin`` (a package named by a
        stand-in).
    folder : str
        The folder whisper.cpp named.
    digest : str
        What identifies the program: the compiled folder's tree digest, or the package's.
    source : dict
        ``model_mil_sha256`` and ``weight_bin_sha256`` of a compiled model, or the
        package path of a stand-in.
    input_shape : tuple of int
        ``logmel_data``'s declared shape, ``(1, n_mel, n_ctx)``.
    output_shape : tuple
        ``output``'s declared shape.
    """

    program: Any
    kind: str
    folder: str
    digest: str
    source: dict[str, Any]
    input_shape: tuple[int, ...]
    output_shape: tuple[Any, ...]

    def describe(self) -> str:
        """Return the one line the seam prints after a successful load.

        Returns
        -------
        str
        """
        what = ("model.mil of a compiled model" if self.kind == "mlmodelc"
                else f"stand-in for package {self.source.get('package')}")
        return (f"{what}, tree digest {self.digest}, {len(self.program.ops)} operations, "
                f"logmel_data {list(self.input_shape)} -> output {list(self.output_shape)}, "
                "executed in float32")


def write_standin(package: str | os.PathLike[str], folder: str | os.PathLike[str]) -> Path:
    """Write a stand-in folder that hands ``package``'s program to the seam.

    Parameters
    ----------
    package : path-like
        An ``.mlpackage`` (absolute path recorded; it must stay where it is).
    folder : path-like
        The folder to create: the ``.mlmodelc`` path whisper.cpp derives from the seam
        launch's ``-m``, in a scratch folder outside any run.

    Returns
    -------
    Path
        The stand-in file.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``package`` is not a folder or ``folder`` already exists.
    """
    pkg = Path(package).resolve()
    if not pkg.is_dir():
        raise ParametersInvalid(f"seam stand-in: {pkg} is not a package folder")
    dest = Path(folder)
    dest.mkdir(parents=False, exist_ok=False)
    doc = {"kind": STANDIN_KIND, "package": str(pkg), "package_tree_digest": tree_digest(pkg),
           "note": "verifylib's Core ML seam stand-in: not a compiled model; Core ML would "
                   "refuse it"}
    path = dest / STANDIN_FILE
    path.write_bytes(dumps(doc))
    return path


def _io_shapes(program: Any) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """Check the program's IO is whisper.cpp's contract; return both declared shapes."""
    names = [v.name for v in program.inputs]
    if names != [COREML_INPUT_NAME]:
        raise SeamLoadRefused(f"the program takes {names}, not the one input "
                              f"{COREML_INPUT_NAME!r} whisper.cpp feeds")
    inp = program.inputs[0]
    if inp.dtype != "fp32" or len(inp.shape) != 3 or \
            not all(isinstance(d, int) for d in inp.shape) or inp.shape[0] != 1:
        raise SeamLoadRefused(f"{COREML_INPUT_NAME} is {inp.dtype} {list(inp.shape)}, not "
                              "float32 [1, n_mel, n_ctx]")
    if COREML_OUTPUT_NAME not in program.outputs:
        raise SeamLoadRefused(f"the program returns {list(program.outputs)}, no "
                              f"{COREML_OUTPUT_NAME!r}")
    out = program.value_types().get(COREML_OUTPUT_NAME)
    if out is None or out.dtype != "fp32" or len(out.shape) != 3:
        desc = "undeclared" if out is None else f"{out.dtype} {list(out.shape)}"
        raise SeamLoadRefused(f"{COREML_OUTPUT_NAME} is {desc}, not float32 of rank 3 "
                              "(whisper.cpp copies float32 values)")
    return tuple(int(d) for d in inp.shape), tuple(out.shape)


def load_seam_program(folder: str | os.PathLike[str]) -> SeamProgram:
    """Load the program the seam runs for the folder whisper.cpp derived.

    Parameters
    ----------
    folder : path-like
        The ``.mlmodelc`` path whisper.cpp passed to ``whisper_coreml_init``.

    Returns
    -------
    SeamProgram

    Raises
    ------
    SeamLoadRefused
        Wherever Core ML's load would fail (see the module docstring), with the reason.
    """
    from verifylib.errors import VerifylibError
    from verifylib.numerics.mil_compiled import MODEL_MIL, WEIGHT_BIN, load_compiled_program
    from verifylib.numerics.mil_exec import MilExecError, check_supported, load_program

    path = Path(folder)
    if not path.is_dir():
        raise SeamLoadRefused(f"no folder at {str(path)!r}")
    standin = path / STANDIN_FILE
    try:
        if standin.is_file():
            doc = json.loads(standin.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("kind") != STANDIN_KIND:
                raise SeamLoadRefused(f"{STANDIN_FILE} is not a {STANDIN_KIND} document")
            pkg = Path(str(doc.get("package")))
            if not pkg.is_dir() or tree_digest(pkg) != doc.get("package_tree_digest"):
                raise SeamLoadRefused(f"the stand-in's package {pkg} is missing or no longer "
                                      "hashes to the digest the stand-in names")
            program = load_program(pkg)
            check_supported(program)
            kind, digest, source = "standin", str(doc["package_tree_digest"]), \
                {"package": str(pkg)}
        else:
            for name in (MODEL_MIL, WEIGHT_BIN):
                f = path / name
                if not f.is_file() or not os.access(f, os.R_OK):
                    raise SeamLoadRefused(f"{path.name} has no readable {name}")
            program, src = load_compiled_program(path)
            kind, digest = "mlmodelc", tree_digest(path)
            source = {"model_mil_sha256": src.model_mil_sha256,
                      "weight_bin_sha256": src.weight_bin_sha256}
    except SeamLoadRefused:
        raise
    except (VerifylibError, MilExecError, OSError, ValueError) as exc:
        raise SeamLoadRefused(f"{path.name}: {exc}") from None
    in_shape, out_shape = _io_shapes(program)
    return SeamProgram(program, kind, str(path), digest, source, in_shape, out_shape)
