"""Stage 03: the lifecycle A/B, the Core ML negative control and positive gate.

The macOS code paths run here for real against ``tests/helpers/fake_whisper_cli.py``: the
stage's functions take the binaries as arguments, and one test runs the whole stage with
the host capability detection replaced by a fake Mac (so ``StageContext.begin`` lets the
Core ML gates through). On the real host the same stage records them NOT_RUN(platform).
The lifecycle A/B on the real v1.8.5 builds is in tests/physical/test_canary.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from verifylib import canonical
from verifylib.runtime import contracts
from verifylib.evidence import gates, receipt
from verifylib.runtime.capabilities import detect
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.gates import Status
from verifylib.stages import canary
from verifylib.stages.artifacts import unpatched_binary
from verifylib.evidence.canary import rules as canary_rules

from tests.helpers.canary import (CLEAN, FAKE_MAC, ctx_for, fake, fake_bins,
                                  forge_prerequisites, judge, make_params)


# ----------------------------------------------------------------------------- lifecycle A/B

def test_lifecycle_ab_passes_on_a_clean_patched_build(tmp_path, tree, capsys):
    ctx = ctx_for(tmp_path)
    refs, ids = canary.lifecycle_ab(
        ctx, patched=fake(tmp_path, "ggml"), unpatched=fake(tmp_path, "ggml-unpatched"),
        model=tree / contracts.TEST_MODEL_IN_TREE, audio=tree / contracts.TEST_AUDIO_IN_TREE,
        runs=4, timeout=30)
    j = judge("canary.lifecycle_ab", ctx, refs)
    assert j.status is Status.PASS, j.detail
    assert "4/4 runs exit 3 with both markers, no signal" in j.detail
    assert "4x SIGSEGV (recorded, not gated)" in j.detail
    doc = ctx.evidence_of  # noqa: F841 (gate not recorded in this test)
    lc = ctx.result.lifecycle
    assert lc.sides["patched"].counts == {CLEAN: 4}
    assert lc.sides["unpatched"].counts == {"SIGSEGV": 4}
    assert set(ids) == {"binary.ggml.sha256", "binary.ggml_unpatched.sha256"}
    # Every stream is stored once per distinct digest, and the bar was plain text.
    names = [r.name for r in refs]
    assert names[0] == "lifecycle" and all(n.startswith("stream-") for n in names[1:])
    assert len(names) == len(set(names))
    out = capsys.readouterr()
    assert "lifecycle A/B" in out.out and "8/8" in out.out


def test_a_flaky_patched_build_fails_the_gate(tmp_path, tree):
    ctx = ctx_for(tmp_path)
    refs, _ = canary.lifecycle_ab(
        ctx, patched=fake(tmp_path, "ggml-flaky"), unpatched=fake(tmp_path, "ggml-unpatched"),
        model=tree / contracts.TEST_MODEL_IN_TREE, audio=tree / contracts.TEST_AUDIO_IN_TREE,
        runs=6, timeout=30, progress=False)
    j = judge("canary.lifecycle_ab", ctx, refs)
    assert j.status is Status.FAIL
    assert j.detail.split("...", 1)[1].startswith(
        ": 2/6 runs not clean (4x exit 3 + both markers, 2x SIGABRT); first, run 2: killed by "
        "SIGABRT (return code -6); missing on stderr: 'error: failed to initialize whisper "
        "context'.")


def test_unpatched_side_is_evidence_not_a_gate(tmp_path, tree):
    ctx = ctx_for(tmp_path)
    refs, ids = canary.lifecycle_ab(
        ctx, patched=fake(tmp_path, "ggml"), unpatched="the unpatched build failed: boom",
        model=tree / contracts.TEST_MODEL_IN_TREE, audio=tree / contracts.TEST_AUDIO_IN_TREE,
        runs=2, timeout=30, progress=False)
    j = judge("canary.lifecycle_ab", ctx, refs)
    assert j.status is Status.PASS
    assert j.detail.endswith("unpatched build not available (the unpatched build failed: boom)")
    assert "binary.ggml_unpatched.sha256" not in ids


def test_a_binary_that_changed_is_not_run(tmp_path, tree):
    exe, sha = fake(tmp_path, "ggml")
    with pytest.raises(RuntimeError, match="does not hash to"):
        canary.lifecycle_ab(ctx_for(tmp_path), patched=(exe, "0" * 64), unpatched="n/a",
                            model=tree / contracts.TEST_MODEL_IN_TREE,
                            audio=tree / contracts.TEST_AUDIO_IN_TREE, runs=1, timeout=30)


def _stream_lookup(ctx, refs):
    ev = EvidenceView(ctx.run_dir, refs)
    return lambda sha: ev.bytes(f"stream-{sha}") if ev.has(f"stream-{sha}") else None


def test_lifecycle_rule_refuses_records_the_streams_do_not_support(tmp_path, tree):
    ctx = ctx_for(tmp_path)
    refs, _ = canary.lifecycle_ab(
        ctx, patched=fake(tmp_path, "ggml"), unpatched=fake(tmp_path, "ggml-unpatched"),
        model=tree / contracts.TEST_MODEL_IN_TREE, audio=tree / contracts.TEST_AUDIO_IN_TREE,
        runs=2, timeout=30, progress=False)
    doc = EvidenceView(ctx.run_dir, refs).json("lifecycle")
    stream = _stream_lookup(ctx, refs)
    assert canary_rules.judge_lifecycle(doc, stream).status is Status.PASS

    def variant(edit):
        d = canonical.loads(canonical.dumps(doc))
        edit(d)
        return canary_rules.judge_lifecycle(d, stream)

    # An unpatched crash substituted into the patched side, relabeled as a clean exit 3.
    def relabel(d):
        crash = dict(d["sides"]["unpatched"]["runs"][0], returncode=3, signal=None,
                     outcome=CLEAN)
        crash["argv"] = [d["sides"]["patched"]["binary"]] + crash["argv"][1:]
        d["sides"]["patched"]["runs"][0] = crash
    j = variant(relabel)
    assert j.status is Status.FAIL
    assert ("patched run 0: recorded outcome 'exit 3 + both markers', but the stored "
            "exit status and stream give 'exit 3, marker missing'") in j.detail
    j = variant(lambda d: d["sides"]["unpatched"]["runs"][1].update(signal=None))
    assert j.status is Status.FAIL
    assert ("recorded signal None disagrees with return code -11 (SIGSEGV in the Linux signal "
            "table)") in j.detail
    j = variant(lambda d: d["sides"]["patched"]["counts"].update({CLEAN: 5}))
    assert j.status is Status.FAIL and "patched: recorded counts" in j.detail
    j = variant(lambda d: d["sides"]["patched"]["runs"][0].update(stderr_sha256="a" * 64))
    assert j.status is Status.FAIL and "patched run 0: stream not stored" in j.detail
    j = variant(lambda d: d.update(runs_per_side=3))
    assert j.status is Status.FAIL and j.detail == "patched: 2 runs recorded, expected 3"
    j = variant(lambda d: d["sides"]["patched"].update(available=False))
    assert j.status is Status.FAIL and "patched: no runs recorded" in j.detail
    j = variant(lambda d: d.update(trigger=["-dtw", "large.v3"]))
    assert j.status is Status.FAIL and j.detail.startswith("malformed trigger")
    j = variant(lambda d: d["sides"].pop("unpatched"))
    assert j == gates.Judgement(Status.FAIL,
                                "evidence must record both sides (unpatched and patched)")


# ----------------------------------------------------------------------------- Core ML paths

@pytest.fixture
def published(tmp_path) -> Path:
    fp32 = tmp_path / "run" / "fp32"
    fp32.mkdir(parents=True)
    model = fp32 / "ggml-model.bin"
    model.write_bytes(b"ggml model for the fake runtime")
    enc = fp32 / "ggml-model-encoder.mlmodelc"
    enc.mkdir()
    (enc / "coremldata.bin").write_bytes(b"compiled")
    (enc / "model.mil").write_text("program")  # both: what the fake runtime can load
    return model


def test_negative_control_is_one_run_in_a_scratch_folder(tmp_path, tree, published):
    ctx = ctx_for(tmp_path)
    exe, sha = fake(tmp_path, "coreml")
    count = exe.with_name("whisper-cli.count")
    refs, ids = canary.coreml_negative(ctx, binary=exe, binary_sha256=sha, model_file=published,
                                       audio=tree / contracts.TEST_AUDIO_IN_TREE, timeout=30,
                                       language="en")
    j = judge("canary.coreml_negative", ctx, refs)
    assert j.status is Status.PASS, j.detail
    assert "only ggml-model.bin in a scratch folder" in j.detail
    doc = EvidenceView(ctx.run_dir, refs).json("negative")
    assert doc["attempts"] == 1 and doc["scratch_listing"] == ["ggml-model.bin"]
    assert not Path(doc["model_arg"]).parent.exists()  # scratch removed
    assert ids == {"binary.coreml.sha256": sha,
                   "model.ggml.sha256": canonical.sha256_file(published)}
    assert not count.exists()


def test_negative_control_abort_fails_without_retry(tmp_path, tree, published):
    ctx = ctx_for(tmp_path)
    exe, sha = fake(tmp_path, "coreml-abort")
    refs, _ = canary.coreml_negative(ctx, binary=exe, binary_sha256=sha, model_file=published,
                                     audio=tree / contracts.TEST_AUDIO_IN_TREE, timeout=30,
                                     language="en")
    j = judge("canary.coreml_negative", ctx, refs)
    assert j.status is Status.FAIL
    assert j.detail == ("killed by SIGABRT (return code -6); missing on stderr: 'error: failed "
                        "to initialize whisper context'")
    doc = EvidenceView(ctx.run_dir, refs).json("negative")
    assert doc["run"]["signal"] == "SIGABRT" and doc["outcome"] == "SIGABRT"


def test_negative_rule_refuses_a_warm_up_or_a_crowded_scratch(tmp_path, tree, published):
    ctx = ctx_for(tmp_path)
    exe, sha = fake(tmp_path, "coreml")
    refs, _ = canary.coreml_negative(ctx, binary=exe, binary_sha256=sha, model_file=published,
                                     audio=tree / contracts.TEST_AUDIO_IN_TREE, timeout=30,
                                     language="en")
    ev = EvidenceView(ctx.run_dir, refs)
    doc, err, out = ev.json("negative"), ev.bytes("negative_stderr"), ev.bytes("negative_stdout")
    for edit, needle in [
        (lambda d: d.update(attempts=2), "must be the first and only run (attempts 2)"),
        (lambda d: d.update(scratch_listing=["ggml-model.bin", "ggml-model-encoder.mlmodelc"]),
         "not only the ggml-*.bin"),
        (lambda d: d.update(binary="/elsewhere/whisper-cli"), "did not launch the recorded binary"),
        (lambda d: d["run"].update(returncode=-6, signal="SIGABRT"), "killed by SIGABRT"),
        (lambda d: d.update(outcome="SIGABRT"), "recorded outcome 'SIGABRT'"),
    ]:
        d = canonical.loads(canonical.dumps(doc))
        edit(d)
        j = canary_rules.judge_negative(d, err, out)
        assert j.status is Status.FAIL and needle in j.detail, j.detail


def test_positive_gate_warm_up_then_measured_run(tmp_path, tree, published, monkeypatch):
    monkeypatch.setenv("FAKE_SLOW_S", "1.5")
    ctx = ctx_for(tmp_path)
    exe, sha = fake(tmp_path, "coreml-slow-first")
    refs, ids = canary.coreml_positive(ctx, binary=exe, binary_sha256=sha,
                                       model_arg=str(published),
                                       audio=tree / contracts.TEST_AUDIO_IN_TREE,
                                       first_timeout=60, timeout=1.2, language="en")
    j = judge("canary.coreml_positive", ctx, refs)
    assert j.status is Status.PASS, j.detail
    doc = EvidenceView(ctx.run_dir, refs).json("positive")
    assert doc["warmup"]["wall_s"] >= 1.5 > doc["measured"]["wall_s"]
    assert doc["measured"]["encode_time_ms"] == 42.75 and doc["measured"]["encode_runs"] == 1
    assert doc["mlmodelc"]["path"] == str(published)[:-4] + "-encoder.mlmodelc"
    assert ids["artifact.fp32.mlmodelc.tree_digest"] == canonical.tree_digest(
        published.with_name("ggml-model-encoder.mlmodelc"))
    assert ctx.result.positive.transcript.startswith("And so")


def test_positive_gate_first_run_needs_its_generous_timeout(tmp_path, tree, published, monkeypatch):
    monkeypatch.setenv("FAKE_SLOW_S", "3")
    ctx = ctx_for(tmp_path)
    exe, sha = fake(tmp_path, "coreml-slow-first")
    refs, _ = canary.coreml_positive(ctx, binary=exe, binary_sha256=sha,
                                     model_arg=str(published),
                                     audio=tree / contracts.TEST_AUDIO_IN_TREE,
                                     first_timeout=1, timeout=1, language="en")
    j = judge("canary.coreml_positive", ctx, refs)
    assert j.status is Status.FAIL
    assert j.detail.startswith("timed out (killed, no exit status)")


def test_positive_gate_classifies_the_measured_run_alone(tmp_path, tree, published):
    ctx = ctx_for(tmp_path)
    exe, sha = fake(tmp_path, "coreml")
    refs, _ = canary.coreml_positive(ctx, binary=exe, binary_sha256=sha,
                                     model_arg=str(published),
                                     audio=tree / contracts.TEST_AUDIO_IN_TREE,
                                     first_timeout=60, timeout=30, language="en")
    ev = EvidenceView(ctx.run_dir, refs)
    doc = ev.json("positive")
    good = (ev.bytes("measured_stderr"), ev.bytes("measured_stdout"))
    warm = (ev.bytes("warmup_stderr"), ev.bytes("warmup_stdout"))
    assert canary_rules.judge_positive(doc, *good, warm).status is Status.PASS
    j = canary_rules.judge_positive(doc, *good)
    assert j.status is Status.FAIL and "warm-up streams not stored" in j.detail
    # The warm-up's log in place of the measured run's is another run's log.
    j = canary_rules.judge_positive(doc, ev.bytes("warmup_stderr") + b"x", good[1], warm)
    assert j.status is Status.FAIL and "stderr is not this run's stream" in j.detail
    for edit, needle in [
        (lambda d: d["warmup"].update(argv=d["warmup"]["argv"][:-2]),
         "the warm-up ran another command line"),
        (lambda d: d["mlmodelc"].update(tree_digest_after="f" * 64),
         "the .mlmodelc changed between the warm-up and the measured run"),
        (lambda d: d["mlmodelc"].update(tree_digest_before=None), "no .mlmodelc at"),
        (lambda d: d.update(model_arg="/other/ggml-model.bin"),
         "-m is not the recorded model argument"),
    ]:
        d = canonical.loads(canonical.dumps(doc))
        edit(d)
        j = canary_rules.judge_positive(d, *good, warm)
        assert j.status is Status.FAIL and needle in j.detail, j.detail


@pytest.mark.parametrize("scenario, needle", [
    ("coreml-abort-first", "warm-up: killed by SIGABRT"),
    ("coreml-fallback-first",
     "warm-up: present on stderr: 'whisper_init_state: failed to load Core ML model' "
     "(a fallback)"),
])
def test_positive_gate_judges_the_warm_up(tmp_path, tree, published, scenario, needle):
    # The measured run is clean; only the warm-up crashed or fell back. Accepting that
    # would be the anti-pattern "accept or retry SIGABRT" (docs/runtime-contract.md §10).
    ctx = ctx_for(tmp_path)
    exe, sha = fake(tmp_path, scenario)
    refs, _ = canary.coreml_positive(ctx, binary=exe, binary_sha256=sha,
                                     model_arg=str(published),
                                     audio=tree / contracts.TEST_AUDIO_IN_TREE,
                                     first_timeout=60, timeout=30, language="en")
    ev = EvidenceView(ctx.run_dir, refs)
    measured = contracts.classify_positive(ev.json("positive")["measured"],
                                           ev.bytes("measured_stderr"),
                                           ev.bytes("measured_stdout"))
    assert measured.ok, measured.detail
    j = judge("canary.coreml_positive", ctx, refs)
    assert j.status is Status.FAIL
    assert needle in j.detail, j.detail


# ----------------------------------------------------------------------------- the whole stage


def test_the_stage_on_a_fake_mac_runs_all_four_canaries(tmp_path, tree, monkeypatch):
    monkeypatch.setattr("verifylib.stages.context.detect", lambda: FAKE_MAC)
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path))
    report = canary.run(make_params(runs=3), run_dir, progress=False)
    st = {r.id: r for r in report.records}
    for gid in ("canary.lifecycle_ab", "canary.coreml_negative", "canary.coreml_positive",
                "canary.sanitizer"):
        assert st[gid].status is Status.PASS, (gid, st[gid].reason)
    assert report.result.negative.outcome == "exit 3 + load-failure + init-failure"
    assert report.result.positive.measured_encode_ms == 42.75


def test_the_stage_on_a_fake_mac_with_an_unpatched_core_ml_build(tmp_path, tree, monkeypatch):
    monkeypatch.setattr("verifylib.stages.context.detect", lambda: FAKE_MAC)
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path, coreml="coreml-abort"))
    report = canary.run(make_params(runs=2), run_dir, progress=False)
    st = {r.id: r for r in report.records}
    assert st["canary.coreml_negative"].status is Status.FAIL
    assert st["canary.coreml_negative"].reason.detail.startswith("killed by SIGABRT")
    assert st["canary.coreml_positive"].status is Status.NOT_RUN
    assert st["canary.coreml_positive"].reason.detail == "canary.coreml_negative is FAIL"


def test_on_this_host_the_core_ml_canaries_are_not_run_for_platform(tmp_path, tree):
    if detect().has(gates.Capability.MACOS):
        pytest.skip("this host is a Mac")
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path))
    report = canary.run(make_params(runs=2), run_dir, progress=False)
    st = {r.id: r for r in report.records}
    assert st["canary.lifecycle_ab"].status is Status.PASS
    assert st["canary.sanitizer"].status is Status.PASS, st["canary.sanitizer"].reason
    for gid in ("canary.coreml_negative", "canary.coreml_positive"):
        assert st[gid].status is Status.NOT_RUN
        assert (st[gid].reason.kind, st[gid].reason.detail.split(";")[0]) == ("platform", "needs macOS")
    assert report.result.negative is None and report.result.positive is None


def test_disabled_canaries_say_which_parameter(tmp_path, tree):
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path))
    report = canary.run(make_params(runs=2, enabled=False), run_dir, progress=False)
    assert {r.id for r in report.records} == {g.id for g in gates.stage_gates("03_canary")}
    for r in report.records:
        assert (r.status, r.reason.kind, r.reason.detail) == (
            Status.NOT_RUN, "disabled", "disabled by parameter canary.enabled = false")


def test_unpatched_binary_refuses_a_changed_or_missing_build(tmp_path, tree):
    run_dir = tmp_path / "run"
    bins = fake_bins(tmp_path)
    forge_prerequisites(run_dir, tree, bins)
    ctx = ctx_for(tmp_path)
    assert unpatched_binary(ctx) == bins["unpatched"]
    with open(bins["unpatched"][0], "a") as fh:
        fh.write("# changed\n")
    with pytest.raises(RuntimeError, match="is not the unpatched whisper-cli"):
        unpatched_binary(ctx)
    (run_dir / "evidence" / "01_build" / "unpatched_build.json").unlink()
    with pytest.raises(RuntimeError, match="recorded no unpatched build"):
        unpatched_binary(ctx)


def test_verify_rejects_a_crash_relabeled_as_exit_3(tmp_path, tree):
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path))
    canary.run(make_params(runs=2), run_dir, progress=False)
    receipt.build_receipt(run_dir)
    before = receipt.verify(run_dir)
    assert not [p for p in before.problems if "canary" in p], before.problems

    # Relabel: an unpatched SIGSEGV run moved into the patched side as a clean exit 3, with
    # every digest (sidecar, gate record, receipt) recomputed to match.
    sidecar = run_dir / "evidence" / "03_canary" / "lifecycle.json"
    doc = canonical.read_json(sidecar)
    crash = dict(doc["sides"]["unpatched"]["runs"][0], returncode=3, signal=None, outcome=CLEAN)
    crash["argv"] = [doc["sides"]["patched"]["binary"]] + crash["argv"][1:]
    doc["sides"]["patched"]["runs"][0] = crash
    sha = canonical.write_json(sidecar, doc)
    gfile = run_dir / "gates" / "03_canary.json"
    stage = canonical.read_json(gfile)
    for g in stage["gates"]:
        for e in g["evidence"]:
            if e["name"] == "lifecycle":
                e["sha256"] = sha
    canonical.write_json(gfile, stage)
    receipt.build_receipt(run_dir)
    after = receipt.verify(run_dir)
    assert not after.ok
    mine = [p for p in after.problems if p.startswith("gate canary.lifecycle_ab:")]
    assert len(mine) == 1 and "recorded PASS but the evidence gives FAIL" in mine[0]
    assert ("patched run 0: recorded outcome 'exit 3 + both markers', but the stored exit "
            "status and stream give 'exit 3, marker missing'") in mine[0]


def test_show_renders_tables_and_chart_without_script(tmp_path, tree, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    run_dir = tmp_path / "run"
    forge_prerequisites(run_dir, tree, fake_bins(tmp_path))
    report = canary.run(make_params(runs=2), run_dir, progress=False)
    from verifylib.views import canary as canary_view
    assert canary_view.show(report) is None
    html = "".join(getattr(o, "data", "") for o in shown)
    assert "Batch-lifecycle A/B" in html and "2 &times; SIGSEGV" in html
    assert "<script" not in html.lower()
    if not detect().has(gates.Capability.MACOS):
        assert "canary.coreml_negative</code> did not run here: NOT_RUN (platform)" in html
