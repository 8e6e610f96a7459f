"""The parameters of tests/simmac/test_prebuilt_mlmodelc.py (a given ``.mlmodelc`` and a
ggml model file) audited on plain Linux, no simulation: a compiled model holds no program
this package can read, so ``capability_of`` raises ``export.compile``, ``export.pair`` and
``parity.program`` to macOS. They are NOT_RUN(platform), every gate that can run on Linux
runs, the verdict is INCOMPLETE, and ``verify`` accepts the run (each NOT_RUN(platform) is
justified by the host record and the bound parameters)."""

from __future__ import annotations

import importlib

import pytest

from tests.helpers.prebuilt_inputs import audit_params, gate_records, given_files
from verifylib import canonical
from verifylib.evidence import gates, receipt
from verifylib.evidence.gates import Capability

pytestmark = pytest.mark.physical  # real whisper.cpp builds and launches

MAC_ONLY = ("export.compile", "export.pair", "parity.program")


@pytest.fixture(scope="module")
def linux_run(tmp_path_factory, verifylib_cache):
    given = given_files(tmp_path_factory.getbasetemp(), verifylib_cache)
    p = audit_params(given.ggml, given.encoder, "prebuilt-mlmodelc-linux")
    run_dir = tmp_path_factory.mktemp("prebuilt-linux") / "run"
    for s in gates.STAGES:
        importlib.import_module(f"verifylib.stages.{s.split('_', 1)[1]}").run(p, run_dir)
    receipt.build_receipt(run_dir)
    return run_dir


def test_capability_of_raises_the_program_gates_to_macos(linux_run):
    bound = canonical.read_json(linux_run / "run.json")["params"]
    assert bound["encoder"]["path"].endswith(".mlmodelc")
    for gid in MAC_ONLY:
        assert gates.capability_of(gates.gate(gid), bound) is Capability.MACOS, gid
    assert gates.gate("export.pair").capability is Capability.ANY
    assert gates.gate("export.compile").capability is Capability.MACOS_XCODE


def test_mac_only_gates_are_not_run_for_the_platform(linux_run):
    recs = gate_records(linux_run)
    for gid in MAC_ONLY:
        rec = recs[gid]
        assert (rec["status"], rec["reason"]["kind"]) == ("NOT_RUN", "platform"), (gid, rec)
        assert "macOS" in rec["reason"]["detail"], rec["reason"]
        assert rec["evidence"] == []
    # A given .mlmodelc is compiled by nobody: macOS is needed, not Xcode.
    assert "Xcode" not in recs["export.compile"]["reason"]["detail"]


def test_what_linux_can_run_runs(linux_run):
    recs = gate_records(linux_run)
    for gid in ("build.ggml", "export.ggml_model", "export.contract", "wer.ggml_vs_source",
                "canary.lifecycle_ab"):
        assert recs[gid]["status"] == "PASS", (gid, recs[gid]["reason"])
    assert "audited as given" in recs["export.contract"]["reason"]["detail"]
    assert not (linux_run / "fp32/ggml-model-encoder.mlpackage").exists()
    assert (linux_run / "fp32/ggml-model-encoder.mlmodelc/model.mil").is_file()


def test_verdict_is_incomplete_and_verify_accepts_it(linux_run):
    rec = canonical.read_json(linux_run / "receipt.json")
    assert rec["verdict"] == "INCOMPLETE"
    assert not [g["id"] for g in rec["gates"] if g["status"] in ("FAIL", "ERROR")]
    res = receipt.verify(linux_run)  # a real Linux host: no --allow-simulated needed
    assert res.ok, res.problems
    assert res.verdict == "INCOMPLETE"


def test_the_platform_status_is_justified_by_the_mlmodelc_path(linux_run, tmp_path):
    """What justifies export.pair's NOT_RUN(platform) is capability_of on the bound
    parameters: a forged clone whose bound encoder.path names an .mlpackage (digests and
    the parameters' digest refreshed) leaves export.pair and parity.program unjustified on
    Linux, while export.compile still needs Xcode and stays justified."""
    from tests.helpers.forge import clone, edit_json, problems_naming, reseal

    forged = clone(linux_run, tmp_path / "forged")

    def as_package(rec):
        enc = rec["params"]["encoder"]
        enc["path"] = enc["path"].replace(".mlmodelc", ".mlpackage")
        rec["params_sha256"] = canonical.sha256_bytes(canonical.dumps(rec["params"]))
    edit_json(forged, "run.json", as_package)
    reseal(forged)
    res = receipt.verify(forged)
    assert not res.ok
    for gid in ("export.pair", "parity.program"):
        assert any("platform" in x or "capab" in x for x in problems_naming(res, gid)), \
            (gid, res.problems)
    assert not problems_naming(res, "export.compile"), res.problems
