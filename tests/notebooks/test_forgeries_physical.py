"""Consistent forgeries of the real default audit, each rejected naming the gate.

The audit is the session's ``default_audit`` (whisper.cpp built and run for real). Each
forgery clones it, edits the evidence the way a careful forger would -- every digest,
receipt row, identity and the verdict refreshed (``tests/helpers/forge.py``) -- and checks that
``verifylib verify`` still refuses it, for a reason that names the gate.
"""

from __future__ import annotations

import pytest

from verifylib import canonical
from verifylib.runtime import ledger
from verifylib.evidence import receipt
from verifylib.whispercpp import source

from tests.helpers.forge import clone, edit_json, problems_naming, relabel, reseal

pytestmark = [pytest.mark.physical, pytest.mark.notebook]

E01, E04, E05 = "evidence/01_build", "evidence/04_parity", "evidence/05_wer"


@pytest.fixture(scope="module")
def honest(default_audit):
    _, run_dir = default_audit
    res = receipt.verify(run_dir)
    assert res.ok, res.problems
    assert res.verdict == "INCOMPLETE"
    return run_dir


@pytest.fixture
def forged(honest, tmp_path):
    return clone(honest, tmp_path / "forged")


def rejected(run_dir, gate_id, needle=""):
    res = receipt.verify(run_dir)
    assert not res.ok, f"forgery of {gate_id} verified"
    named = problems_naming(res, gate_id)
    assert named, res.problems
    assert any(needle in p for p in named), named
    return named


def _policy_sha(rules):
    return canonical.sha256_bytes(canonical.dumps(rules))


def test_relaxed_wer_policy_is_rejected(forged):
    def relax(doc):
        doc["policy"]["ggml_vs_source"]["max_corpus_wer_delta"] = 0.9
        doc["policy_sha256"] = _policy_sha(doc["policy"])
    edit_json(forged, f"{E05}/wer.json", relax)
    edit_json(forged, f"{E05}/policy.json", lambda d: (
        d["rules"]["ggml_vs_source"].update(max_corpus_wer_delta=0.9),
        d.update(sha256=_policy_sha(d["rules"]))))
    reseal(forged)
    rejected(forged, "wer.ggml_vs_source", "not the packaged resource")


@pytest.mark.parametrize("gate, short", [("parity.program", "program"),
                                         ("parity.program_fp16", "program_fp16")])
def test_relaxed_parity_policy_is_rejected(forged, gate, short):
    def relax(doc):
        doc["policy"]["rules"]["pass"].update(snr_db_min=1.0, cosine_min=0.5)
        doc["policy"]["sha256"] = _policy_sha(doc["policy"]["rules"])
    edit_json(forged, f"{E04}/{short}.json", relax)
    edit_json(forged, f"{E04}/policy_{short}.json", lambda d: (
        d["rules"]["pass"].update(snr_db_min=1.0, cosine_min=0.5),
        d.update(sha256=_policy_sha(d["rules"]))))
    reseal(forged)
    rejected(forged, gate, "packaged resource")


OTHER_TREE = "1" * 40


@pytest.mark.parametrize("field", ["pin_tree", "pin_commit"])
def test_swapped_pin_ids_are_rejected(forged, field):
    # The forger makes source and pin agree on another tree (or commit) everywhere.
    def swap(doc):
        doc[field] = OTHER_TREE
        if field == "pin_tree":
            doc["computed_tree"] = OTHER_TREE
    edit_json(forged, f"{E01}/source.json", swap)
    edit_json(forged, f"{E01}/patch.json", lambda d: d.update({field: OTHER_TREE}))
    reseal(forged)
    named = rejected(forged, "build.source_identity", "is not the manifest's")
    assert any(field in p for p in named)
    rejected(forged, "build.patch_exact", "is not the manifest's")


def test_swapped_patch_digest_is_rejected(forged):
    other = "2" * 64
    def swap(doc):
        doc["declared_patch_sha256"] = other
        for phase in doc["checks"].values():
            if isinstance(phase, dict) and "patch_sha256" in phase:
                phase["patch_sha256"] = other
    edit_json(forged, f"{E01}/patch.json", swap)
    reseal(forged)
    rejected(forged, "build.patch_exact", "declared_patch_sha256")


@pytest.mark.parametrize("gate, kind, detail", [
    ("wer.ggml_vs_source", "prerequisite", "export.ggml_model is FAIL"),
    ("canary.lifecycle_ab", "disabled", "disabled by parameter canary.enabled = false"),
    ("parity.program", "not-implemented", "unimplemented"),
    ("build.ggml", "platform", "needs macOS"),
])
def test_pass_relabelled_not_run_is_rejected(forged, gate, kind, detail):
    relabel(forged, gate, "NOT_RUN", kind, detail)
    reseal(forged)
    rejected(forged, gate, "NOT_RUN")


def test_a_launch_missing_from_the_ledger_is_rejected(forged):
    entries = ledger.read(forged)
    assert entries, "the default audit records its whisper.cpp launches"
    # Drop the first lifecycle launch and renumber, as a forger hiding a crash would.
    lines = [e for e in entries if e["seq"] != entries[-1]["seq"]]
    path = forged / ledger.LEDGER_FILE
    path.unlink()
    path.write_bytes(b"".join(canonical.dumps(e).rstrip(b"\n") + b"\n" for e in lines))
    reseal(forged)
    res = receipt.verify(forged)
    assert not res.ok
    assert any("ledger" in p or "launch" in p for p in res.problems), res.problems


def test_a_hidden_extra_launch_is_rejected(forged):
    entries = ledger.read(forged)
    extra = dict(entries[-1], seq=len(entries))
    path = forged / ledger.LEDGER_FILE
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data + canonical.dumps(extra).rstrip(b"\n") + b"\n")
    reseal(forged)
    res = receipt.verify(forged)
    assert not res.ok
    assert any(f"#{extra['seq']}" in p or "uncited" in p for p in res.problems), res.problems


def test_a_swapped_build_probe_stream_is_rejected(forged):
    path = forged / E01 / "probe.stderr.txt"
    text = path.read_text().replace("COREML = 0", "COREML = 0 ")
    path.unlink()
    path.write_text(text)
    reseal(forged)
    rejected(forged, "build.ggml", "not the run's stream")


def test_a_swapped_model_load_stream_is_rejected(forged):
    path = forged / "evidence" / "02_export" / "load.stderr.txt"
    data = path.read_bytes() + b"\n"
    path.unlink()
    path.write_bytes(data)
    reseal(forged)
    rejected(forged, "export.ggml_model", "not the run's stream")


def test_an_edited_host_record_is_rejected(forged):
    def to_mac(r):
        r["host"].update(system="Darwin", macos_version="15.1",
                         coremlc="/Applications/Xcode.app/Contents/Developer/usr/bin/coremlc")
        r["host"]["capabilities"] = {k: True for k in r["host"]["capabilities"]}
    edit_json(forged, "run.json", to_mac)
    reseal(forged)
    rejected(forged, "build.coreml", "NOT_RUN(platform)")


def test_a_receipt_with_a_gate_dropped_is_rejected(forged):
    edit_json(forged, "receipt.json", lambda r: r.update(
        gates=[g for g in r["gates"] if g["id"] != "wer.ggml_vs_source"]))
    rejected(forged, "wer.ggml_vs_source", "missing from the receipt")


def test_the_manifest_is_what_the_validator_knows(honest):
    # The source sidecar's pin fields are exactly the shipped manifest's (no self-report).
    doc = canonical.read_json(honest / E01 / "source.json")
    pin = source.load_pins()[doc["pin"]]
    assert (doc["pin_tree"], doc["pin_commit"]) == (pin.tree, pin.commit)


# ----------------------------------------------------------------------------- the seam

E03 = "evidence/03_canary"


def test_the_default_audit_runs_the_seam_gates_and_keeps_its_verdict(honest):
    res = receipt.verify(honest)
    assert res.ok, res.problems
    rows = {g["id"]: g["status"] for g in canonical.read_json(honest / "receipt.json")["gates"]}
    statuses = {g: rows[g] for g in ("canary.seam_negative", "canary.seam_positive", "wer.seam")}
    assert set(statuses.values()) == {"PASS"}, statuses
    not_run = sorted(g for g, s in rows.items() if s == "NOT_RUN")
    assert not_run == sorted(["build.coreml", "export.compile", "canary.coreml_negative",
                              "canary.coreml_positive", "parity.runtime", "wer.hybrid",
                              "placement.plan", "parity.runtime_fp16"]), not_run
    assert res.verdict == "INCOMPLETE"


def test_a_forged_encode_count_is_rejected(forged):
    def twice(doc):
        calls = doc["executor"]["calls"]
        calls.append(dict(calls[0], index=2))
    edit_json(forged, f"{E03}/seam_positive.json", twice)
    reseal(forged)
    named = rejected(forged, "canary.seam_positive")
    assert any("encode" in p for p in named), named


def test_a_forged_output_digest_is_rejected(forged):
    def swap(doc):
        doc["executor"]["calls"][0]["output_sha256"] = "0" * 64
    edit_json(forged, f"{E03}/seam_positive.json", swap)
    reseal(forged)
    named = rejected(forged, "canary.seam_positive")
    assert any("disagree" in p for p in named), named


def test_a_forged_seam_transcript_cause_is_rejected(forged):
    def hide(doc):
        for v in doc["variants"]:
            for c in v["clips"]:
                if c["cause"] == "encoder":
                    c["cause"] = "same"
                    return
        # No clip differs: call one that agrees a difference instead.
        doc["variants"][0]["clips"][0]["cause"] = "encoder"
    edit_json(forged, f"{E05}/seam_wer.json", hide)
    reseal(forged)
    rejected(forged, "wer.seam", "cause")


def test_a_seam_launch_relabelled_as_a_core_ml_launch_is_rejected(forged):
    # The forger takes the seam's positive launch and files it as canary.coreml_positive:
    # the document rewritten in the Core ML format, the seam gate emptied so the launch is
    # cited once, the Core ML gate PASS on the seam's streams and binary.
    seam = canonical.read_json(forged / E03 / "seam_positive.json")
    run = dict(seam["run"])
    doc = {"schema": "verifylib-coreml-positive/1", "binary": seam["binary"],
           "binary_sha256": seam["binary_sha256"], "model_arg": seam["encoder"]["model_arg"],
           "mlmodelc": {"path": seam["encoder"]["folder"], "tree_digest_before": "1" * 64,
                        "tree_digest_after": "1" * 64},
           "timeouts_s": {"warmup": 900, "measured": 120},
           "warmup": run, "measured": run, "outcome": seam["outcome"],
           "transcript_chars": seam["transcript_chars"]}
    canonical.write_json(forged / E03 / "positive.json", doc)
    stage = canonical.read_json(forged / "gates" / "03_canary.json")
    recs = {g["id"]: g for g in stage["gates"]}
    streams = {e["name"]: e["path"] for e in recs["canary.seam_positive"]["evidence"]}
    recs["canary.coreml_positive"].update(
        status="PASS", reason={"kind": "rule", "detail": "forged"},
        evidence=[{"name": "positive", "path": f"{E03}/positive.json", "sha256": ""},
                  *({"name": n, "path": streams[s], "sha256": ""} for n, s in (
                      ("measured_stderr", "seam_positive_stderr"),
                      ("measured_stdout", "seam_positive_stdout"),
                      ("warmup_stderr", "seam_positive_stderr"),
                      ("warmup_stdout", "seam_positive_stdout")))],
        identities={"binary.coreml.sha256": seam["binary_sha256"]})
    canonical.write_json(forged / "gates" / "03_canary.json", stage)
    relabel(forged, "canary.seam_positive", "NOT_RUN", "disabled",
            "disabled by parameter seam.enabled = false")
    reseal(forged)
    res = receipt.verify(forged)
    assert not res.ok
    named = problems_naming(res, "canary.coreml_positive")
    assert any("seam" in p for p in named), named
