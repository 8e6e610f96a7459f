"""``canary.sanitizer`` on both real v1.8.5 AddressSanitizer builds (the session's)."""

from __future__ import annotations

import pytest

from tests.helpers.canary import make_params
from verifylib.evidence.gates import Status
from verifylib.evidence.records import EvidenceView
from verifylib.evidence import registry as rules
from verifylib.runtime import contracts, sanitizer
from verifylib.stages import canary
from verifylib.stages.context import StageContext


def _judge(ctx, refs, ids):
    return rules.RULES["canary.sanitizer"](EvidenceView(ctx.run_dir, refs, ids))


# ----------------------------------------------------------------------------- physical

@pytest.mark.physical
def test_physical_sanitizer_gate_v185(tmp_path, v185_source, v185_asan_builds, v185_pin):
    u, p = v185_asan_builds.unpatched, v185_asan_builds.patched
    for res in (u, p):
        assert res.static and sanitizer.links_asan_runtime(res.needed_libs)
        assert res.binary.parent.name == res.key
    assert (u.variant, u.patch_sha256) == ("ggml-unpatched-asan", None)
    assert (p.variant, p.patch_sha256) == ("ggml-asan", v185_pin.patch_sha256)
    assert u.sha256 != p.sha256

    def record(res):
        return {"built": True, "binary": str(res.binary), "sha256": res.sha256, "key": res.key,
                "variant": res.variant, "options": dict(res.options),
                "needed_libs": list(res.needed_libs), "static": res.static,
                "tree_id": res.tree_id, "patch_sha256": res.patch_sha256}
    ctx = StageContext("03_canary", make_params(), tmp_path / "run")
    refs, ids = canary.sanitizer_ab(
        ctx, builds={"unpatched": record(u), "patched": record(p)}, pin=v185_pin.name,
        model=v185_source.path / contracts.TEST_MODEL_IN_TREE,
        audio=v185_source.path / contracts.TEST_AUDIO_IN_TREE, timeout=120, progress=False)
    j = _judge(ctx, refs, ids)
    assert j.status is Status.PASS, j.detail
    s = ctx.result.sanitizer.sides
    # docs/facts.md: ASan reports the free in whisper_batch_free on every unpatched run.
    doc = EvidenceView(ctx.run_dir, refs, ids).json("sanitizer")
    for run in doc["sides"]["unpatched"]["runs"]:
        app = sanitizer.Frame(**next(f for f in run["report"]["frames"]
                                     if not sanitizer.Frame(**f).in_runtime))
        assert app.function.startswith("whisper_batch_free")
        assert app.location.endswith("src/whisper.cpp:499")
        assert run["returncode"] == 1 and run["signal"] is None
    assert s["unpatched"].kind
    assert s["patched"].outcomes == {"exit 3 + both markers, no sanitizer report":
                                     sanitizer.RUNS_PER_SIDE}
