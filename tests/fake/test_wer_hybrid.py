"""wer.hybrid's real macOS code path, driven against the fake whisper-cli on Linux."""


import pytest

from tests.helpers import fake_whisper_cli
from verifylib import canonical, params
from verifylib.evidence import gates
from verifylib.evidence import registry as rules
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.gates import Status
from verifylib.numerics.scoring import english_normalizer
from verifylib.stages.context import StageContext
from verifylib.stages import wer
from verifylib.evidence.wer import rules as wer_rules

from tests.helpers import ROOT

JFK = "And so my fellow Americans ask not what your country can do for you, ask what you can do for your country."


def _texts(tmp_path, private=False):
    n = english_normalizer()
    audio = tmp_path / "clip.wav"
    audio.write_bytes(b"RIFF")  # the fake reads no audio
    clip = wer.ClipText("jfk", not private, audio, n(JFK), n(JFK), n(JFK), JFK, JFK, JFK)
    return [clip]


def _run(tmp_path, scenario, with_mlmodelc=True, private=False):
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    ctx = StageContext("05_wer", p, tmp_path / "run")
    binary = fake_whisper_cli.install(tmp_path / "bin", scenario)
    model = tmp_path / "fp32" / "ggml-model.bin"
    model.parent.mkdir()
    model.write_bytes(b"ggml")
    if with_mlmodelc:
        enc = tmp_path / "fp32" / "ggml-model-encoder.mlmodelc"
        enc.mkdir()
        # What the fake runtime can load: a compiled program, not just a folder.
        (enc / "coremldata.bin").write_bytes(b"compiled")
        (enc / "model.mil").write_text("program")
    refs, ids, shown = wer.hybrid(ctx, binary=binary,
                                  binary_sha256=canonical.sha256_file(binary),
                                  model_arg=str(model), texts=_texts(tmp_path, private),
                                  language="en", timeout=60)
    return rules.RULES["wer.hybrid"](EvidenceView(ctx.run_dir, refs, ids)), refs, ctx, shown


def test_hybrid_evidence_is_bound_to_the_core_ml_binary(tmp_path):
    j, refs, ctx, _ = _run(tmp_path, "coreml")
    assert j.status is Status.PASS, j.detail
    other = {"binary.coreml.sha256": "e" * 64, "policy.wer.sha256": "0" * 64}
    j = rules.RULES["wer.hybrid"](EvidenceView(ctx.run_dir, refs, other))
    assert j.status is Status.FAIL and "not the Core ML build's" in j.detail


def test_supported_runtime_passes(tmp_path):
    j, _, _, shown = _run(tmp_path, "coreml")
    assert j.status is Status.PASS, j.detail
    assert "hybrid 0.0000" in j.detail
    assert shown["jfk"].startswith("And so my fellow Americans")


def test_nil_prediction_is_caught_only_by_the_transcript(tmp_path):
    j, refs, ctx, _ = _run(tmp_path, "coreml-nil")
    assert j.status is Status.FAIL
    assert "hybrid transcript empty for ['jfk']" in j.detail
    # The load conditions alone held: the run log is a clean positive.
    hybrid = EvidenceView(ctx.run_dir, refs).json("hybrid")
    assert hybrid["clips"][0]["run"]["returncode"] == 0


@pytest.mark.parametrize("scenario,reason", [
    ("coreml-fallback", "failed to load Core ML model"),
    ("ggml", "COREML"),
    ("coreml-stale-log", "loading line"),
])
def test_load_condition_failures(tmp_path, scenario, reason):
    j, _, _, _ = _run(tmp_path, scenario, with_mlmodelc=scenario != "coreml-fallback")
    assert j.status is Status.FAIL
    assert "fails the load conditions" in j.detail and reason in j.detail, j.detail


def test_private_clip_keeps_no_text_and_is_still_judged(tmp_path):
    j, refs, ctx, shown = _run(tmp_path, "coreml", private=True)
    assert j.status is Status.PASS, j.detail
    assert shown == {}
    names = {r.name for r in refs}
    assert "hybrid_stdout_jfk" not in names and "hybrid_stderr_jfk" in names
    text = (ctx.run_dir / "evidence" / "05_wer" / "hybrid.json").read_text()
    assert "americans" not in text.lower()


def test_wer_hybrid_is_not_run_on_linux(tmp_path):
    import platform
    if platform.system() == "Darwin":
        pytest.skip("Linux expectation")
    p = params.load(ROOT / "parameters" / "tiny-en.yaml")
    ctx = StageContext("05_wer", p, tmp_path / "run")
    assert ctx.begin("wer.hybrid") is None
    assert ctx.records["wer.hybrid"].reason.kind == "platform"


def _ggml_doc(stderr: bytes, beside=False, rc=0):
    # A complete ``wer`` document (the rule reads it through its schema) around one run.
    from verifylib.canonical import sha256_bytes
    from verifylib.numerics.scoring import load_policy
    counts = {"hits": 11, "substitutions": 0, "deletions": 0, "insertions": 0}
    run = {"argv": ["/b/whisper-cli", "-m", "m.bin", "-f", "jfk.wav"], "returncode": rc,
           "signal": None, "timed_out": False, "wall_s": 0.25,
           "stdout_sha256": sha256_bytes(b""), "stderr_sha256": sha256_bytes(stderr),
           "stdout_bytes": 0, "stderr_bytes": len(stderr)}
    return {"policy": load_policy("wer-v1").rules, "mlmodelc_beside": beside,
            "clips": [{"id": "jfk", "public": False, "source": counts, "ggml": counts,
                       "source_empty": False, "ggml_empty": False, "ggml_run": run}]}


def test_ggml_runs_must_show_coreml_0_with_no_mlmodelc_beside():
    ok = b"system_info: n_threads = 2 / 2 | WHISPER : COREML = 0 | OPENVINO = 0 |\n"
    assert wer_rules.ggml_run_problems(_ggml_doc(ok), lambda cid: ok) == []
    bad = ok.replace(b"COREML = 0", b"COREML = 1")
    (p,) = wer_rules.ggml_run_problems(_ggml_doc(bad), lambda cid: bad)
    assert "does not show COREML = 0 (found 1)" in p
    (p,) = wer_rules.ggml_run_problems(_ggml_doc(ok, beside=True), lambda cid: ok)
    assert ".mlmodelc beside" in p
    (p,) = wer_rules.ggml_run_problems(_ggml_doc(ok), lambda cid: ok + b"x")
    assert "not the run's stream" in p
    (p,) = wer_rules.ggml_run_problems(_ggml_doc(ok, rc=-11), lambda cid: ok)
    assert "exit -11" in p
