"""Stage 03's lifecycle A/B on the real v1.8.5 builds (the patched and the unpatched
static whisper-cli of the session). The stage on fakes is tests/fake/test_canary.py."""

from __future__ import annotations

import pytest

from tests.helpers.canary import CLEAN, ctx_for, judge
from verifylib.evidence.gates import Status
from verifylib.runtime import contracts
from verifylib.stages import canary


@pytest.mark.physical
def test_physical_lifecycle_ab_v185(tmp_path, v185_source, v185_ggml_build, v185_unpatched_build,
                                    v185_pin):
    u = v185_unpatched_build
    assert u.tree_before == u.tree_after == v185_pin.tree  # the pristine source is untouched
    assert u.result.static and u.result.variant == "ggml-unpatched"
    assert u.result.patch_sha256 is None and u.result.sha256 != v185_ggml_build.result.sha256
    ctx = ctx_for(tmp_path)
    refs, ids = canary.lifecycle_ab(
        ctx, patched=(v185_ggml_build.result.binary, v185_ggml_build.result.sha256),
        unpatched=(u.result.binary, u.result.sha256),
        model=v185_source.path / contracts.TEST_MODEL_IN_TREE,
        audio=v185_source.path / contracts.TEST_AUDIO_IN_TREE, runs=3, timeout=60,
        progress=False)
    j = judge("canary.lifecycle_ab", ctx, refs)
    assert j.status is Status.PASS, j.detail
    lc = ctx.result.lifecycle.sides
    assert lc["patched"].counts == {CLEAN: 3}
    # docs/facts.md: the unpatched static build crashed 10/10 with this trigger.
    assert lc["unpatched"].counts == {"SIGSEGV": 3}
