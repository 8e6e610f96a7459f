"""``verifylib pin-check``: the batch member's state read from a declaration, and bad
candidates exit 2 (docs/runtime-contract.md §6.4). Real v1.8.5 is checked in
tests/physical/test_pincheck.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from verifylib.whispercpp.pincheck import PinCheckError, assess, batch_member_state


@pytest.mark.parametrize("decl,state", [
    ("    whisper_batch batch;", "uninitialized"),
    ("    whisper_batch batch = {};", "initialized"),
    ("    whisper_batch batch{};", "initialized"),
    ("    whisper_batch batch = { };", "initialized"),
    ("    int other;", "absent"),
])
def test_batch_member_state(decl, state):
    text = f"x\nstruct whisper_state {{\n    int a;\n{decl}\n    struct {{ int b; }} c;\n}};\n"
    got, line = batch_member_state(text)
    assert got == state
    assert line == (None if state == "absent" else 4)


def test_bad_candidates_exit_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "verifylib", "pin-check", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "is not a 40-hex commit id, an archive or a folder" in res.stderr
    with pytest.raises(PinCheckError, match="unknown pin"):
        assess(str(tmp_path), pin_name="v0.0", build=False)
