"""The parameters of tests/simmac/test_prebuilt_mlmodelc.py (a given ``.mlmodelc`` and a
ggml model file) audited on plain Linux, no simulation.

The compiled model's program is read from its ``model.mil`` and its weights from
``weights/weight.bin`` (:mod:`verifylib.numerics.mil_compiled`), so ``export.pair`` and
``parity.program`` run here, with verifylib's executor, on the program the Core ML runtime
would load: the evidence names the file read and the digests of ``model.mil`` and
``weight.bin``, and ``verify`` accepts the PASS on a host without macOS because the
evidence says the program was read from its text. ``export.compile`` (placing the folder
needs nothing, checking it needs Core ML) stays NOT_RUN(platform); the verdict is
INCOMPLETE.

A compiled model whose ``model.mil`` the executor cannot take exactly (here a constant
that is not exact in its declared type) keeps both gates NOT_RUN(platform), the reason
saying what could not be read, never PASS.

The folder is our own export compiled by the simulated ``coremlc``, which writes the
grammar real coremlc outputs show (docs/facts.md, "The compiled model's model.mil").

The same audit of that folder zipped as upstream ships it (``encoder.path`` naming
``ggml-tiny.en-encoder.mlmodelc.zip``) ends with the same gates, statuses and card: only
the zip's record and digest are added, and ``verify`` holds the published folder against
the files the zip listed.

Both audits run whisper.cpp's Core ML path through verifylib's seam (docs/runtime-contract.md
§11) on the given compiled model itself: the seam's ``init`` reads the placed folder's
``model.mil`` and ``weights/weight.bin`` (kind ``mlmodelc``, no stand-in), for
``canary.seam_positive`` and for ``wer.seam`` (tests/helpers/seam_checks.py).
"""

from __future__ import annotations

import importlib
import re
import shutil

import pytest

from tests.helpers.prebuilt_inputs import audit_params, gate_records, given_files
from tests.helpers.seam_checks import assert_seam_positive, assert_seam_wer
from verifylib import canonical
from verifylib.canonical import sha256_file
from verifylib.evidence import gates, receipt
from verifylib.evidence.gates import Capability

pytestmark = pytest.mark.physical  # real whisper.cpp builds and launches

PROGRAM_GATES = ("export.pair", "parity.program")
SLOT = "fp32/ggml-model-encoder.mlmodelc"


def _stages(p, run_dir, stages):
    for s in stages:
        importlib.import_module(f"verifylib.stages.{s.split('_', 1)[1]}").run(p, run_dir)


@pytest.fixture(scope="module")
def downloads(tmp_path_factory, verifylib_cache):
    """The folder ``encoder.path`` names (a copy of the given encoder), and the base."""
    given = given_files(tmp_path_factory.getbasetemp(), verifylib_cache)
    base = tmp_path_factory.mktemp("prebuilt-linux")
    named = base / "downloads" / given.encoder.name
    shutil.copytree(given.encoder, named)
    return given, named, base


@pytest.fixture(scope="module")
def linux_run(downloads):
    given, named, base = downloads
    p = audit_params(given.ggml, named, "prebuilt-mlmodelc-linux")
    run_dir = base / "run"
    _stages(p, run_dir, gates.STAGES[:1])
    shutil.copytree(run_dir, base / "after-01", symlinks=True)
    _stages(p, run_dir, gates.STAGES[1:])
    receipt.build_receipt(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def inexact_run(linux_run, downloads):
    """Stages 02 and 04 for the same ``encoder.path`` holding a copy whose model.mil has a
    constant written ``0.1``, which no fp32 holds exactly (stage 01 copied from
    ``linux_run``, as a run directory belongs to one parameter set)."""
    given, named, base = downloads
    mil = named / "model.mil"
    edited, n = re.subn(r"val = tensor<fp32, \[\]>\(0x1p-3\)", "val = tensor<fp32, []>(0.1)",
                        mil.read_text(), count=1)
    assert n == 1
    mil.write_text(edited)
    p = audit_params(given.ggml, named, "prebuilt-mlmodelc-linux")
    run_dir = base / "inexact"
    shutil.copytree(base / "after-01", run_dir, symlinks=True)
    _stages(p, run_dir, ("02_export", "04_parity"))
    return run_dir


def test_capability_of_needs_macos_only_when_the_program_is_not_read_from_text(linux_run):
    bound = canonical.read_json(linux_run / "run.json")["params"]
    assert bound["encoder"]["path"].endswith(".mlmodelc")
    for gid in PROGRAM_GATES:
        g = gates.gate(gid)
        assert gates.capability_of(g, bound) is Capability.MACOS, gid
        assert gates.capability_of(g, bound, program_from_text=True) is Capability.ANY, gid
    compile_gate = gates.gate("export.compile")
    assert gates.capability_of(compile_gate, bound, program_from_text=True) \
        is Capability.MACOS


def test_the_program_gates_run_the_compiled_program_here(linux_run):
    recs = gate_records(linux_run)
    for gid in PROGRAM_GATES:
        assert recs[gid]["status"] == "PASS", (gid, recs[gid]["reason"])
    folder = linux_run / SLOT
    digests = {"model_mil_sha256": sha256_file(folder / "model.mil"),
               "weight_bin_sha256": sha256_file(folder / "weights/weight.bin")}
    pair = canonical.read_json(linux_run / "evidence/02_export/pair.json")
    assert pair["execution"] == "program-float32" and pair["encoder"] == SLOT
    src = pair["program_source"]
    assert src["read_from"] == "model.mil" and src["opset"] == "ios15"
    assert {k: src[k] for k in digests} == digests
    assert src["coremlc_version"].startswith("verifylib simulated coremlc")
    # A program read from text exposes its blocks: the pair is compared block by block.
    assert all(len(i["block_snr_db"]) == 4 for i in pair["inputs"])
    parity = canonical.read_json(linux_run / "evidence/04_parity/program.json")
    cand = parity["candidate"]
    assert cand["program_source"] == src
    assert cand["executor"].startswith("verifylib.mil_exec")
    assert {(m["input"], m["execution"]) for m in parity["measurements"]} == \
        {(i, e) for i in ("fixture", "random") for e in ("float32", "float64")}
    drift = canonical.read_json(linux_run / "evidence/04_parity/program-drift.json")
    assert drift["layers"]["float32"] and "layers_unavailable" not in drift
    assert "export.compile" in recs and recs["export.compile"]["status"] == "NOT_RUN"
    assert recs["export.compile"]["reason"]["kind"] == "platform"


def test_what_linux_can_run_runs(linux_run):
    recs = gate_records(linux_run)
    for gid in ("build.ggml", "export.ggml_model", "export.contract", "wer.ggml_vs_source",
                "canary.lifecycle_ab", *PROGRAM_GATES):
        assert recs[gid]["status"] == "PASS", (gid, recs[gid]["reason"])
    assert "audited as given" in recs["export.contract"]["reason"]["detail"]
    assert not (linux_run / "fp32/ggml-model-encoder.mlpackage").exists()
    assert (linux_run / SLOT / "model.mil").is_file()


def test_the_seam_runs_the_given_compiled_model(linux_run, downloads):
    """canary.seam_positive and wer.seam loaded the placed .mlmodelc's own model.mil (the
    program export.pair read), tree digest that of the folder given, and served its encode
    calls."""
    given, _, _ = downloads
    digest = canonical.tree_digest(given.encoder)
    assert canonical.tree_digest(linux_run / SLOT) == digest
    doc = assert_seam_positive(linux_run, kind="mlmodelc", digest=digest)
    pair = canonical.read_json(linux_run / "evidence/02_export/pair.json")
    src = pair["program_source"]
    assert doc["executor"]["program"]["source"] == \
        {k: src[k] for k in ("model_mil_sha256", "weight_bin_sha256")}
    assert_seam_wer(linux_run, kind="mlmodelc", digest=digest, fixtures=["jfk"])


def test_verdict_is_incomplete_and_verify_accepts_it(linux_run):
    rec = canonical.read_json(linux_run / "receipt.json")
    assert rec["verdict"] == "INCOMPLETE"
    assert not [g["id"] for g in rec["gates"] if g["status"] in ("FAIL", "ERROR")]
    res = receipt.verify(linux_run)  # a real Linux host: no --allow-simulated needed
    assert res.ok, res.problems
    assert res.verdict == "INCOMPLETE"


def test_a_pass_that_does_not_say_where_its_program_came_from_is_refused(linux_run, tmp_path):
    """Without its program source, a PASS of a given .mlmodelc on Linux is unjustified twice:
    the host lacks the macOS the gate then needed, and the rule wants the record."""
    from tests.helpers.forge import clone, edit_json, problems_naming, reseal

    forged = clone(linux_run, tmp_path / "forged")

    def drop(doc):
        doc.pop("program_source")
    edit_json(forged, "evidence/02_export/pair.json", drop)
    edit_json(forged, "evidence/04_parity/program.json", lambda d: d["candidate"].pop(
        "program_source"))
    reseal(forged)
    res = receipt.verify(forged)
    assert not res.ok
    for gid in PROGRAM_GATES:
        found = problems_naming(res, gid)
        assert any("without capability macos" in x for x in found), (gid, res.problems)
    assert any("without recording the model.mil" in x
               for x in problems_naming(res, "export.pair")), res.problems


def test_a_program_gate_hidden_as_not_run_platform_does_not_verify(linux_run, tmp_path):
    """The hole verify used to have: a program gate of a given .mlmodelc relabelled
    NOT_RUN(platform) on Linux, its evidence removed and the run resealed. The placed
    folder's model.mil reads whole here, so the host lacked nothing: refused, by name."""
    from tests.helpers.forge import clone, problems_naming, relabel, reseal

    forged = clone(linux_run, tmp_path / "forged")
    relabel(forged, "parity.program", "NOT_RUN", "platform",
            "needs macOS: Core ML runs a given compiled model")
    for ref in gate_records(linux_run)["parity.program"]["evidence"]:
        (forged / ref["path"]).unlink()
    # The seam's side: its gates need nothing but this host, so NOT_RUN(platform) is refused.
    relabel(forged, "canary.seam_positive", "NOT_RUN", "platform", "needs macOS")
    reseal(forged)
    res = receipt.verify(forged)
    found = problems_naming(res, "parity.program")
    assert any(f"NOT_RUN(platform) but the given compiled model's program ({SLOT}/model.mil) "
               "reads whole here" in x for x in found), res.problems
    assert "gate canary.seam_positive: NOT_RUN(platform) but the host record has any" in \
        res.problems, res.problems


def test_a_recorded_digest_must_be_the_published_files(linux_run, tmp_path):
    from tests.helpers.forge import clone, edit_json, problems_naming, reseal

    forged = clone(linux_run, tmp_path / "forged")

    def other(doc):
        doc["program_source"]["model_mil_sha256"] = "0" * 64
    edit_json(forged, "evidence/02_export/pair.json", other)
    reseal(forged)
    res = receipt.verify(forged)
    assert any("model.mil digest" in x for x in problems_naming(res, "export.pair")), \
        res.problems


def test_a_program_the_executor_cannot_take_exactly_stays_not_run(inexact_run, tmp_path):
    # Its honest NOT_RUN(platform) verifies: the model.mil does not read here either.
    from tests.helpers.forge import clone, problems_naming
    sealed = clone(inexact_run, tmp_path / "sealed")
    receipt.build_receipt(sealed)
    res = receipt.verify(sealed)
    for gid in PROGRAM_GATES:
        assert problems_naming(res, gid) == [], res.problems
    recs = gate_records(inexact_run)
    assert recs["export.contract"]["status"] == "PASS", recs["export.contract"]["reason"]
    for gid in PROGRAM_GATES:
        rec = recs[gid]
        assert (rec["status"], rec["reason"]["kind"]) == ("NOT_RUN", "platform"), (gid, rec)
        detail = rec["reason"]["detail"]
        assert "macOS" in detail, detail
        assert "cannot run the program of its model.mil" in detail, detail
        assert "0.1 is not exact as fp32" in detail and "model.mil line" in detail, detail
        assert rec["evidence"] == []


def test_replay_executes_the_compiled_program_again(linux_run, downloads, tmp_path):
    """``verify --replay``'s parity step reads the run's model.mil again and reproduces
    the recorded outputs (it judged NOT_REPLAYABLE before: only Core ML ran a .mlmodelc)."""
    from tests.helpers.forge import clone
    from verifylib.evidence.runs import open_run
    from verifylib.replay.claims import ClaimStatus
    from verifylib.replay.parity import replay_parity

    given, named, _ = downloads
    p = audit_params(given.ggml, named, "prebuilt-mlmodelc-linux")
    scratch = clone(linux_run, tmp_path / "scratch")  # up to stage 02, as replay's scratch
    (scratch / "receipt.json").unlink()
    for stage in gates.STAGES[2:]:
        (scratch / "gates" / f"{stage}.json").unlink(missing_ok=True)
        shutil.rmtree(scratch / "evidence" / stage, ignore_errors=True)
    claims = {c.id: c for c in replay_parity(open_run(linux_run), scratch, p,
                                             log=lambda _m: None)}
    claim = claims["parity.program"]
    assert claim.status is ClaimStatus.REPRODUCED, claim
    assert claim.replayed["status"] == "PASS"


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
    run_dir = base / "run"
    _stages(p, run_dir, gates.STAGES)
    receipt.build_receipt(run_dir)
    return run_dir, zp


# ----------------------------------------------------------------------------- the zip

def test_the_zip_audits_to_the_same_gates_as_the_folder(linux_run, zipped):
    run, _ = zipped
    folder, zip_ = gate_records(linux_run), gate_records(run)
    assert set(folder) == set(zip_)
    assert {g: (r["status"], r["reason"]["kind"]) for g, r in zip_.items()} == \
        {g: (r["status"], r["reason"]["kind"]) for g, r in folder.items()}
    # Each run names its own folder, and canary.seam_positive's PASS ends with its launch's
    # measured times (as canary.coreml_positive's does); apart from that, every reason but
    # the contract's (which names what was given) is word for word the folder's.
    timed = re.compile(r" \(wall [0-9.]+ s, encode [0-9.]+ ms\)$")

    def said(recs, g, run_dir):
        detail = recs[g]["reason"]["detail"].replace(str(run_dir), "RUN")
        return timed.sub(" (wall W s, encode E ms)", detail) \
            if g == "canary.seam_positive" else detail
    assert timed.search(zip_["canary.seam_positive"]["reason"]["detail"])
    differ = [g for g in folder if said(folder, g, linux_run) != said(zip_, g, run)]
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


def test_the_seam_runs_the_compiled_model_the_zip_held(zipped, downloads):
    """The unpacked zip, placed at the derived path, is what the seam's init read: kind
    mlmodelc, the given folder's tree digest, for the canary and for every WER clip."""
    run, _ = zipped
    given, _, _ = downloads
    digest = canonical.tree_digest(given.encoder)
    assert_seam_positive(run, kind="mlmodelc", digest=digest)
    assert_seam_wer(run, kind="mlmodelc", digest=digest, fixtures=["jfk"])


def test_verify_holds_the_published_folder_against_the_zip(zipped, tmp_path):
    """``verify`` accepts the run. A forger who changes a byte of the published weights and
    replaces the old tree digest with the new one in every record (then reseals) leaves the
    zip's declared CRC-32 disagreeing (beside the program's recorded weight.bin digest)."""
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
    assert any(f"not what {zp.name} held" in p for p in res.problems), res.problems
    assert any("weights/weight.bin" in p and "CRC-32" in p for p in res.problems)
