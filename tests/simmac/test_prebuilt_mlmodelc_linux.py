"""The parameters of tests/simmac/test_prebuilt_mlmodelc.py (a given ``.mlmodelc`` and a
ggml model file) audited on plain Linux, no simulation: a compiled model holds no program
this package can read, so ``capability_of`` raises ``export.compile``, ``export.pair`` and
``parity.program`` to macOS. They are NOT_RUN(platform), every gate that can run on Linux
runs, the verdict is INCOMPLETE, and ``verify`` accepts the run (each NOT_RUN(platform) is
justified by the host record and the bound parameters).

The same audit of that folder zipped as upstream ships it (``encoder.path`` naming
``ggml-tiny.en-encoder.mlmodelc.zip``) ends with the same gates, statuses and card: only
the zip's record and digest are added, and ``verify`` holds the published folder against
the files the zip listed."""

from __future__ import annotations

import importlib

import pytest

from tests.helpers.prebuilt_inputs import audit_params, gate_records, given_files
from verifylib import canonical
from verifylib.evidence import gates, receipt
from verifylib.evidence.gates import Capability

pytestmark = pytest.mark.physical  # real whisper.cpp builds and launches

MAC_ONLY = ("export.compile", "export.pair", "parity.program")


def _audit(p, run_dir):
    for s in gates.STAGES:
        importlib.import_module(f"verifylib.stages.{s.split('_', 1)[1]}").run(p, run_dir)
    receipt.build_receipt(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def linux_run(tmp_path_factory, verifylib_cache):
    given = given_files(tmp_path_factory.getbasetemp(), verifylib_cache)
    p = audit_params(given.ggml, given.encoder, "prebuilt-mlmodelc-linux")
    return _audit(p, tmp_path_factory.mktemp("prebuilt-linux") / "run")


def _zip_folder(folder, dest):
    """Zip a folder as ``zip -r`` does: folder entries, then files, deflated."""
    import zipfile
    dest.parent.mkdir(parents=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for q in sorted([folder, *folder.rglob("*")]):
            zf.write(q, q.relative_to(folder.parent).as_posix())
    return dest


@pytest.fixture(scope="module")
def zipped(tmp_path_factory, verifylib_cache):
    """The same audit, ``encoder.path`` naming the folder zipped: (run, zip)."""
    given = given_files(tmp_path_factory.getbasetemp(), verifylib_cache)
    base = tmp_path_factory.mktemp("prebuilt-linux-zip")
    zp = _zip_folder(given.encoder, base / "downloads" / f"{given.encoder.name}.zip")
    p = audit_params(given.ggml, zp, "prebuilt-mlmodelc-linux")
    assert p.encoder.archive and p.encoder.format == "mlmodelc"
    return _audit(p, base / "run"), zp


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


# ----------------------------------------------------------------------------- the zip

def test_the_zip_audits_to_the_same_gates_as_the_folder(linux_run, zipped):
    run, _ = zipped
    folder, zip_ = gate_records(linux_run), gate_records(run)
    assert set(folder) == set(zip_)
    assert {g: (r["status"], r["reason"]["kind"]) for g, r in zip_.items()} == \
        {g: (r["status"], r["reason"]["kind"]) for g, r in folder.items()}
    # Each run names its own folder; apart from that, every reason but the contract's
    # (which names what was given) is word for word the folder's.
    differ = [g for g in folder if folder[g]["reason"]["detail"].replace(str(linux_run), "RUN")
              != zip_[g]["reason"]["detail"].replace(str(run), "RUN")]
    assert differ == ["export.contract"], differ
    assert zip_["export.contract"]["status"] == "PASS"
    assert ".mlmodelc.zip audited as given (zip sha256 " in \
        zip_["export.contract"]["reason"]["detail"]
    assert canonical.read_json(run / "receipt.json")["verdict"] == \
        canonical.read_json(linux_run / "receipt.json")["verdict"] == "INCOMPLETE"


def test_the_zip_adds_its_record_beside_the_same_card_and_tree(linux_run, zipped):
    import hashlib
    import zlib
    run, zp = zipped
    a = canonical.read_json(linux_run / "evidence/02_export/contract.json")
    b = canonical.read_json(run / "evidence/02_export/contract.json")
    assert b["variants"] == a["variants"]
    archive = b["prebuilt"].pop("archive")
    assert "archive" not in a["prebuilt"]
    assert b["prebuilt"].pop("given") == str(zp) and a["prebuilt"].pop("given") != str(zp)
    assert b["prebuilt"] == a["prebuilt"]  # format, card, tree digest, precision, policy
    assert archive["sha256"] == hashlib.sha256(zp.read_bytes()).hexdigest()
    assert archive["bytes"] == zp.stat().st_size and archive["skipped"] == 0
    placed = run / "fp32/ggml-model-encoder.mlmodelc"
    assert archive["top"] == "ggml-tiny.en-encoder.mlmodelc"
    assert [(f["path"], f["bytes"], f["crc32"]) for f in archive["files"]] == [
        (q.relative_to(placed).as_posix(), q.stat().st_size,
         f"{zlib.crc32(q.read_bytes()):08x}")
        for q in sorted(placed.rglob("*"), key=lambda q: q.relative_to(placed).as_posix())
        if q.is_file()]
    ids_a = canonical.read_json(linux_run / "receipt.json")["identities"]
    ids_b = canonical.read_json(run / "receipt.json")["identities"]
    assert ids_b.pop("encoder.archive.sha256") == archive["sha256"]
    assert ids_b == ids_a
    assert not list((run / "fp32").glob(".*"))  # the staging folder is gone
    assert sorted(p.name for p in zp.parent.iterdir()) == [zp.name]  # nothing beside the zip


def test_verify_holds_the_published_folder_against_the_zip(zipped, tmp_path):
    """``verify`` accepts the run. A forger who changes a byte of the published weights and
    replaces the old tree digest with the new one in every record (then reseals) leaves the
    zip's declared CRC-32 disagreeing, and only that check names it."""
    from tests.helpers.forge import clone, reseal
    from verifylib.canonical import tree_digest

    run, zp = zipped
    res = receipt.verify(run)
    assert res.ok, res.problems
    forged = clone(run, tmp_path / "forged")
    weights = forged / "fp32/ggml-model-encoder.mlmodelc/weights/weight.bin"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.unlink()  # hard-linked to the run: replace, never write in place
    weights.write_bytes(bytes(data))
    old, new = tree_digest(run / "fp32/ggml-model-encoder.mlmodelc"), \
        tree_digest(forged / "fp32/ggml-model-encoder.mlmodelc")
    for f in [*(forged / "evidence").rglob("*.json"), *(forged / "gates").glob("*.json")]:
        text = f.read_text()
        if old in text:
            f.unlink()
            f.write_text(text.replace(old, new))
    reseal(forged)
    res = receipt.verify(forged)
    assert not res.ok
    assert all(f"not what {zp.name} held" in p for p in res.problems), res.problems
    assert any("weights/weight.bin" in p and "CRC-32" in p for p in res.problems)
