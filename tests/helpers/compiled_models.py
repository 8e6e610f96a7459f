"""A compiled Core ML encoder (``.mlmodelc``) made on Linux from one of our own ``.mlpackage``
exports, for tests that audit a given ``.mlmodelc``.

The folder is what the simulated Mac's ``coremlc`` writes (tests/simmac/xcrun.py, which
compiles with tests/simmac/coremlc.py): the file set Apple's compiler writes for an ML
program, ``model.mil`` as MIL text in coremlc's syntax and ``metadata.json`` as coremlc's
list of one object, so the encoder card reads it as it reads a real compiled model. The
compile is remembered in the simulated framework's memory (shared by every simulated Mac),
so the simulated Mac's ``CompiledMLModel`` loads the folder wherever it is copied.
"""

from __future__ import annotations

import json
import shutil
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers import ROOT

XCRUN = ROOT / "tests" / "simmac" / "xcrun.py"


def compile_like_coremlc(package: str | os.PathLike, out_dir: str | os.PathLike,
                         framework_dir: str | os.PathLike | None = None) -> Path:
    """Compile ``package`` with the simulated ``coremlc`` (``xcrun coremlc compile``).

    Parameters
    ----------
    package : path-like
        A saved ``X.mlpackage`` (an ML program).
    out_dir : path-like
        Where ``X.mlmodelc`` goes (created).
    framework_dir : path-like, optional
        The simulated framework's memory to record the compile in (the one every
        simulated Mac shares by default).

    Returns
    -------
    Path
        The compiled folder.
    """
    from tests.simmac import framework_memory

    package, out_dir = Path(package), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    memory = Path(framework_dir or framework_memory.default_dir())
    with tempfile.TemporaryDirectory(prefix="verifylib-coremlc-") as state:
        scenario = Path(state) / "scenario.json"
        scenario.write_text(json.dumps({"coremlc": "xcode", "state_dir": state,
                                        "framework_dir": str(memory)}))
        res = subprocess.run([sys.executable, str(XCRUN), str(scenario), "coremlc", "compile",
                              str(package), str(out_dir)], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"simulated coremlc failed: {res.stderr}")
    return out_dir / re.sub(r"\.mlpackage$", ".mlmodelc", package.name)


def compiled_folder(package: Path, out: Path) -> Path:
    """What coremlc would write for ``package``, as far as the executor reads it: ``model.mil``
    (the simulated coremlc's text, :func:`tests.simmac.coremlc.mil_text`) beside the
    package's own ``weights/weight.bin``, in process (no ``xcrun``, nothing remembered)."""
    from coremltools.proto import Model_pb2

    from tests.simmac import coremlc

    package, out = Path(package), Path(out)
    manifest = json.loads((package / "Manifest.json").read_text())
    entry = manifest["itemInfoEntries"][manifest["rootModelIdentifier"]]
    model_file = package / "Data" / entry["path"]
    spec = Model_pb2.Model()
    spec.ParseFromString(model_file.read_bytes())
    out.mkdir(parents=True)
    (out / "model.mil").write_text(coremlc.mil_text(spec), encoding="utf-8")
    blob = model_file.parent / "weights/weight.bin"
    if blob.is_file():
        (out / "weights").mkdir()
        shutil.copyfile(blob, out / "weights/weight.bin")
    return out


def same_program(a, b) -> None:
    """Assert two executor programs are the same program, constants compared bit for bit."""
    import numpy as np

    assert a.inputs == b.inputs and a.outputs == b.outputs
    assert [(o.type, dict(o.inputs), o.outputs) for o in a.ops] == \
        [(o.type, dict(o.inputs), o.outputs) for o in b.ops]
    assert {k: (o.type, dict(o.inputs), o.outputs) for k, o in a.constexprs.items()} == \
        {k: (o.type, dict(o.inputs), o.outputs) for k, o in b.constexprs.items()}
    assert a.const_dtypes == b.const_dtypes
    assert a.op_counts == b.op_counts and a.specification_version == b.specification_version
    for name, x in a.consts.items():
        y = b.consts[name]
        assert type(x) is type(y), (name, type(x), type(y))
        if isinstance(x, str):
            assert x == y, name
            continue
        xa, ya = np.asarray(x), np.asarray(y)
        assert (xa.dtype, xa.shape) == (ya.dtype, ya.shape), name
        assert xa.tobytes() == ya.tobytes(), name


__all__ = ["compile_like_coremlc", "compiled_folder", "same_program"]
