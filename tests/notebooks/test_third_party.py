"""Audits of artifacts this suite did not make, end to end through the CLI.

What users ship: whisper.cpp's own Core ML encoders (the pinned tree's
``convert-whisper-to-coreml.py``, an fp16 ML program, plain and with ``--optimize-ane``)
beside a ggml file — our f16 ``ggml-model.bin``, the same quantized to q5_0 by the tree's
own ``whisper-quantize``, and a ``.bin`` of another model. Each is named in a parameter
file exactly as other tools write one (``model: {kind: ggml, path, language}``,
``encoder: {path}``) and audited with ``verifylib run``; the published run must then pass
``verifylib verify``. The plain encoder is audited beside the f16 file (and beside the
other model's, stages 01-02); the ``--optimize-ane`` one beside the f16 and the q5_0 file,
so the quantized file's checks are that audit's.

Each of those audits also runs whisper.cpp's Core ML path through verifylib's seam
(docs/runtime-contract.md §11) on the upstream encoder's own program: on Linux, where no
``coremlc`` runs, a stand-in names the published ``.mlpackage`` and the executor runs that
package's program (tests/helpers/seam_checks.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.helpers import ROOT
from tests.helpers.seam_checks import assert_seam_positive, assert_seam_wer
from verifylib import canonical

pytestmark = [pytest.mark.physical, pytest.mark.notebook]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "verifylib", *args], capture_output=True,
                          text=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory, verifylib_cache, whisper_quantize):
    """Our f16 file of the default model, its q5_0, and a file of another model."""
    from tests.helpers.ggml import swapped_layers_folder
    from tests.helpers.model_data import default_model_spec
    from verifylib.models.ggml_writer import write_ggml_model
    from verifylib.models.intake import obtain_model
    from verifylib.runtime.runner import run

    root = tmp_path_factory.mktemp("third-party")
    info = obtain_model(default_model_spec(), verifylib_cache, log=lambda _m: None)
    f16 = root / "ggml-tiny.en.bin"
    write_ggml_model(info.hf_dir, f16)
    q5 = root / "ggml-tiny.en-q5_0.bin"
    run([str(whisper_quantize), str(f16), str(q5), "q5_0"], check=True, timeout=300,
        what="whisper-quantize")
    # Another model of the same shape: tiny.en with encoder blocks 1 and 2 swapped.
    other = root / "ggml-other.bin"
    write_ggml_model(swapped_layers_folder(info.hf_dir, root / "swapped", 1, 2), other)
    return {"f16": f16, "q5_0": q5, "other": other}


def _audit(tmp_path, name, model_file, encoder, *, canary=True, stages=None):
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["name"] = name
    data["model"] = {"kind": "ggml", "path": str(model_file), "language": "en"}
    data["encoder"] = {"path": str(encoder)}
    data.pop("export")
    data["fixtures"] = data["fixtures"][:1]  # jfk, from the verified runtime tree
    # Three lifecycle runs where a test asserts the canary; none where it does not (the
    # canary reads the runtime tree's own model, not the audited pair).
    data["canary"] = {"runs": 3} if canary else {"enabled": False}
    pfile = tmp_path / f"{name}.yaml"
    pfile.write_text(yaml.safe_dump(data))
    reports = tmp_path / "reports"
    if stages is None:
        res = _cli("run", str(pfile), "--reports", str(reports), "--no-progress")
    else:
        # Only the stages the test reads, through the audit's own runner (papermill, a kernel
        # per stage, the receipt, verify before publishing); the rest are unjudged.
        from verifylib.batch.audit import run_one
        from verifylib.params import load
        res = run_one(load(pfile), reports, stages=stages, log=lambda _m: None,
                      progress=False)
    runs = [p for p in (reports / name).iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1, res.stdout + res.stderr if stages is None else res
    receipt = canonical.read_json(runs[0] / "receipt.json")
    return res, runs[0], receipt, {g["id"]: g for g in receipt["gates"]}


OLD_NS = 1_577_836_800_000_000_000  # 2020-01-01T00:00:00Z


@pytest.fixture(scope="module")
def f16_given(tmp_path_factory, upstream_encoders):
    """Upstream's fp16 encoder as a user holds it, with its state before any command.

    A copy, its ``Manifest.json`` re-serialized compactly (the same manifest, in bytes
    coremltools would not write: a rewrite would show in the digest) and every time set to
    2020. Returns the package, its :func:`~tests.helpers.forge.snapshot` and tree digest.
    """
    from tests.helpers.forge import snapshot

    pkg = tmp_path_factory.mktemp("given") / "ggml-model-encoder.mlpackage"
    shutil.copytree(upstream_encoders.paths["plain"], pkg)
    manifest = pkg / "Manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()), separators=(",", ":")))
    for p in [*pkg.rglob("*"), pkg]:
        os.utime(p, ns=(OLD_NS, OLD_NS))
    return pkg, snapshot(pkg), canonical.tree_digest(pkg)


@pytest.fixture(scope="module")
def f16_audit(tmp_path_factory, files, f16_given):
    """Upstream's fp16 encoder beside our f16 file, audited once for this module."""
    return _audit(tmp_path_factory.mktemp("up-f16"), "up-f16", files["f16"], f16_given[0])


def test_upstream_fp16_encoder_with_our_f16_file(f16_audit):
    res, run_dir, receipt, gates = f16_audit
    assert receipt["verdict"] == "INCOMPLETE", res.stdout + res.stderr
    for gid in ("export.ggml_model", "export.contract", "export.pair", "parity.program",
                "wer.ggml_vs_source", "canary.lifecycle_ab"):
        assert gates[gid]["status"] == "PASS", (gid, gates[gid]["reason"])
    assert "fp16-v1" in gates["parity.program"]["reason"]["detail"]
    assert "audited as given" in gates["export.contract"]["reason"]["detail"]
    assert gates["parity.program_fp16"]["status"] == "NOT_RUN"
    assert receipt["identities"]["encoder.precision"] == "fp16"
    assert receipt["identities"]["encoder.parity_policy"] == "fp16-v1"
    ver = _cli("verify", str(run_dir))
    assert ver.returncode == 0, ver.stdout + ver.stderr


def test_upstream_fp16_encoder_runs_through_the_seam_on_its_package(f16_audit, f16_given):
    """canary.seam_positive and wer.seam ran whisper.cpp's Core ML path on upstream's plain
    fp16 package itself (a stand-in names it; no coremlc on Linux): the program the executor
    loaded hashes to the digest of what was given, and it served every encode call."""
    _, run_dir, _, _ = f16_audit
    digest = f16_given[2]
    assert canonical.tree_digest(run_dir / "fp32" / "ggml-model-encoder.mlpackage") == digest
    assert_seam_positive(run_dir, kind="standin", digest=digest)
    assert_seam_wer(run_dir, kind="standin", digest=digest, fixtures=["jfk"])


@pytest.fixture(scope="module", params=["f16", "q5_0"])
def ane_audit(request, tmp_path_factory, files, upstream_encoders):
    """Upstream's ``--optimize-ane`` encoder beside our f16 file and beside its q5_0."""
    name = f"up-ane-{request.param.replace('_', '')}"
    return request.param, _audit(tmp_path_factory.mktemp(name), name, files[request.param],
                                 upstream_encoders.paths["ane"])


def test_upstream_ane_encoder_audits_incomplete_with_its_layers_read(ane_audit):
    """The defect of issue 36: the ANE program's (B, C, 1, S) taps made parity.program ERROR."""
    from tests.helpers.forge import snapshot

    ftype, (res, run_dir, receipt, gates) = ane_audit
    assert res.returncode == 0, res.stdout + res.stderr
    assert receipt["verdict"] == "INCOMPLETE", res.stdout + res.stderr
    for gid in ("export.ggml_model", "export.contract", "export.pair", "parity.program",
                "wer.ggml_vs_source", "canary.lifecycle_ab"):
        assert gates[gid]["status"] == "PASS", (gid, gates[gid]["reason"])
    # The encoder is fp16: it is gated by its own policy, and the fp16 variant gate has no
    # separate candidate to run on.
    assert gates["parity.program_fp16"]["status"] == "NOT_RUN"
    assert receipt["identities"]["encoder.precision"] == "fp16"
    (drift_file,) = run_dir.rglob("program-drift.json")
    drift = canonical.read_json(drift_file)
    rows = drift["layers"]["float32"]
    assert [r["label"] for r in rows] == ["embeddings", "block 0", "block 1", "block 2",
                                          "block 3", "output"]
    assert not any(r.get("unmapped") for r in rows) and drift["unmapped_taps"] == []
    assert {drift["tap_layouts"][f"block {i}"] for i in range(4)} == {"bc1s"}
    # Every point is compared (finite). Against the f16 file the fp16 program's float16
    # activations bound it (measured 55-75 dB); against the q5_0 file the reference carries
    # the quantization error (measured 24.9 dB at block 0, 71.0 dB at the embeddings).
    low, high = (40.0, 90.0) if ftype == "f16" else (10.0, 90.0)
    for r in rows:
        assert low < float(r["snr_db"]) < high, r
    report = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "upstream&#39;s --optimize-ane layout" in report or \
        "upstream's --optimize-ane layout" in report
    if ftype == "q5_0":
        # The quantized file's own checks (this audit replaced one of upstream's plain
        # fp16 encoder beside the same q5_0 file, which asserted exactly these).
        assert "pair-v1" in gates["parity.program"]["reason"]["detail"]
        # Placed under the name whisper.cpp expects, beside the encoder it derives from it.
        assert (run_dir / "fp32" / "ggml-model-q5_0.bin").is_file()
        assert "quantized reference" in report
    else:
        assert "fp16-v1" in gates["parity.program"]["reason"]["detail"]
    ver = _cli("verify", str(run_dir))
    assert ver.returncode == 0, ver.stdout + ver.stderr
    # Measured: REPRODUCED 14, DIFFERS 0, NOT_REPLAYABLE 7 (the macOS claims, the fp16
    # variant this encoder has none of) in 51 s on a warm cache.
    out = run_dir.parent.parent.parent / f"replay-{ftype}"
    before = snapshot(run_dir)
    rep = _cli("verify", str(run_dir), "--replay", "-o", str(out))
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert snapshot(run_dir) == before  # bytes and mtimes: replay opens its packages privately
    claims = canonical.read_json(out / "replay.json")["claims"]
    assert {c["id"]: c["status"] for c in claims}["parity.program"] == "REPRODUCED"
    assert not [c for c in claims if c["status"] == "DIFFERS"], claims


def test_upstream_ane_encoder_runs_through_the_seam_on_its_package(ane_audit,
                                                                   upstream_encoders):
    """The ``--optimize-ane`` program (its 1x1 convs, einsums and splits) executed by the
    seam in whisper.cpp's Core ML path, beside the f16 file and beside the q5_0 one (whose
    -m whisper.cpp strips of its ``-q5_0`` to derive the same encoder folder)."""
    ftype, (_, run_dir, _, _) = ane_audit
    digest = canonical.tree_digest(upstream_encoders.paths["ane"])
    assert canonical.tree_digest(run_dir / "fp32" / "ggml-model-encoder.mlpackage") == digest
    doc = assert_seam_positive(run_dir, kind="standin", digest=digest)
    model = "ggml-model-q5_0.bin" if ftype == "q5_0" else "ggml-model.bin"
    assert doc["encoder"]["model_arg"].endswith(f"/{model}"), doc["encoder"]
    assert_seam_wer(run_dir, kind="standin", digest=digest, fixtures=["jfk"])


def test_a_mismatched_pair_is_rejected(tmp_path, files, upstream_encoders):
    # export.pair is stage 02's: the later stages would add nothing this test reads (the
    # seam gates of stages 03 and 05 included: they are not run here).
    res, run_dir, receipt, gates = _audit(tmp_path, "mismatch", files["other"],
                                          upstream_encoders.paths["plain"], canary=False,
                                          stages=("01_build", "02_export"))
    assert receipt["verdict"] == "REJECTED"
    pair = gates["export.pair"]
    assert pair["status"] == "FAIL"
    assert "does not compute the encoder of fp32/ggml-model.bin" in pair["reason"]["detail"]
    assert "first diverge at encoder block 1" in pair["reason"]["detail"]
    ver = _cli("verify", str(run_dir))
    assert ver.returncode == 0, ver.stdout + ver.stderr


def test_a_forged_precision_claim_is_rejected_by_verify(tmp_path, f16_audit):
    """Claim the fp16 encoder is fp32 wherever export.contract says so, digests resealed."""
    from tests.helpers.forge import clone, edit_json, reseal

    _, run_dir, _, _ = f16_audit
    forged = clone(run_dir, tmp_path / "forged")
    stage = canonical.read_json(forged / "gates" / "02_export.json")
    (rec,) = [r for r in stage["gates"] if r["id"] == "export.contract"]
    (ref,) = [e for e in rec["evidence"] if e["name"] == "contract"]

    def claim_fp32(doc):
        doc["prebuilt"].update(precision="fp32", parity_policy="fp32-v1")
        doc["prebuilt"]["card"]["precision"] = "fp32"
        doc["variants"][0]["description"]["compute_dtypes"] = ["FLOAT32"]
    edit_json(forged, ref["path"], claim_fp32)
    reseal(forged)
    ver = _cli("verify", str(forged))
    assert ver.returncode != 0
    assert "the published encoder declares fp16" in ver.stdout + ver.stderr


def test_nothing_given_or_published_is_written(tmp_path, f16_given, f16_audit):
    """``run`` leaves the given encoder as it was and records its digest as given;
    ``verify``, ``open_run(...).verify()``, ``compare`` and ``drift`` leave the published
    run as it was, bytes and modification times (each once wrote ``Manifest.json``)."""
    import verifylib
    from tests.helpers.forge import clone, snapshot

    pkg, given_before, given_digest = f16_given
    _, run_dir, _, _ = f16_audit
    assert snapshot(pkg) == given_before
    contract = canonical.read_json(run_dir / "evidence" / "02_export" / "contract.json")
    assert contract["prebuilt"]["source_tree_digest"] == given_digest
    other = clone(run_dir, tmp_path / "other")  # compare needs a second run
    before = snapshot(run_dir)
    for args in (("verify", str(run_dir)),
                 ("compare", str(run_dir), str(other), "-o", str(tmp_path / "cmp")),
                 ("drift", str(run_dir / "fp32" / "ggml-model-encoder.mlpackage"),
                  "--model", str(run_dir.parents[2] / "up-f16.yaml"))):
        res = _cli(*args)
        assert res.returncode == 0, (args[0], res.stdout + res.stderr)
        assert snapshot(run_dir) == before, args[0]
    assert verifylib.open_run(run_dir).verify().ok
    assert snapshot(run_dir) == before


def test_a_bad_encoder_path_exits_2_and_leaves_nothing(tmp_path, files):
    not_a_package = tmp_path / "enc.mlpackage"
    not_a_package.mkdir()
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data.update(name="bad", encoder={"path": str(not_a_package)})
    data.pop("export")
    pfile = tmp_path / "bad.yaml"
    pfile.write_text(yaml.safe_dump(data))
    res = _cli("run", str(pfile), "--reports", str(tmp_path / "reports"), "--no-progress")
    assert res.returncode == 2
    assert "key encoder.path" in res.stderr and str(pfile) in res.stderr
    assert not (tmp_path / "reports" / "bad").exists()
    shutil.rmtree(not_a_package)
