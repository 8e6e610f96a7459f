"""`verifylib doctor --json | head -c 1`: a reader that leaves early gets no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.fake


@pytest.mark.parametrize("argv", [["doctor", "--json"], ["--help"]])
def test_a_reader_that_leaves_early_gets_no_traceback(argv):
    # The pipe is closed before anything is written: every write meets EPIPE.
    proc = subprocess.Popen([sys.executable, "-m", "verifylib", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code in (0, 1, 2), (code, err)
