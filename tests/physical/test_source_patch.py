"""verifylib.whispercpp.source.patch on real v1.8.5: the pinned patch reproduces the exact bytes."""

from __future__ import annotations

import pytest

from tests.helpers.source_synth import V185_PATCH_SHA256
from verifylib.whispercpp.source.patch import check_patch_exact

# ----------------------------------------------------------------------------- patching


@pytest.mark.physical
def test_real_v185_patch_reproduces_exact_bytes(v185_patched, v185_pin):
    check = check_patch_exact(v185_patched.path, v185_pin)
    assert check.ok, check.problems
    assert check.diff_equals_patch and check.diff_sha256 == V185_PATCH_SHA256
    assert check.status_lines == (" M src/whisper.cpp",)
    text = (v185_patched.path / "src" / "whisper.cpp").read_text().splitlines()
    assert text[864] == "    whisper_batch batch = {};"
