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


__all__ = ["compile_like_coremlc"]
