"""``import verifylib`` stays light in a fresh interpreter: ``open_run`` is there without
loading the run reader or torch."""

from __future__ import annotations

import os
import subprocess
import sys

import verifylib
from tests.helpers import ROOT


def test_import_verifylib_stays_light():
    code = ("import sys, verifylib; assert 'verifylib.evidence.runs' not in sys.modules; "
            "assert verifylib.open_run is verifylib.evidence.runs.open_run; "
            "assert 'torch' not in sys.modules")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert verifylib.Run.__name__ == "Run"
