"""The stage 02 evidence schemas: exact round trips and refusals that name the field.

The documents are built the way :mod:`verifylib.stages.export` builds them (the ``model``
and ``ggml`` records of ``export.ggml_model``, with the load probe through
:func:`~verifylib.runtime.runner.run_record`; the ``contract`` record from an
:class:`~verifylib.models.coreml_contract.EncoderContract`; the ``compile`` record).
``to_json(from_json(doc))`` must give the same dict and the same canonical bytes; a
malformed variant must be refused with its field path, and the gate's rule must FAIL on it
naming that path.
"""

from __future__ import annotations

import copy

import pytest

from tests.helpers.edits import delete_at, set_at
from verifylib import canonical
from verifylib.errors import EvidenceInvalid
from verifylib.evidence.gates import Status
from verifylib.evidence.records import EvidenceRef, EvidenceView
from verifylib.evidence.export.rules import RULES
from verifylib.evidence.export import schema as schemas
from verifylib.models.coreml_contract import EncoderContract
from verifylib.runtime import contracts
from verifylib.runtime.runner import RunResult, run_record
from verifylib.evidence.fields import SchemaError

HPARAMS = {"n_vocab": 51864, "n_audio_ctx": 1500, "n_audio_state": 384, "n_audio_head": 6,
           "n_audio_layer": 4, "n_text_ctx": 448, "n_text_state": 384, "n_text_head": 6,
           "n_text_layer": 4, "n_mels": 80, "ftype": 1}
LOAD_ERR = "".join(f"{contracts.MODEL_LOAD_PREFIX}{k} = {v}\n" for k, v in HPARAMS.items())
MODEL_ARG = "/r/fp32/ggml-model.bin"
DESC = {"model_type": "mlProgram", "compute_dtypes": ["FLOAT32"],
        "inputs": [{"name": "logmel_data", "type": "multiArrayType", "dtype": "FLOAT32",
                    "shape": [1, 80, 3000], "flexible_shape": None}],
        "outputs": [{"name": "output", "type": "multiArrayType", "dtype": "FLOAT32",
                     "shape": [1, 1500, 384], "flexible_shape": None}]}


def model_doc() -> dict:
    return {"kind": "hf-dir", "source_digest": "a" * 64,
            "origin": {"kind": "hf-dir", "path": "/m/tiny"}, "hf_dir": "/c/models/tiny",
            "language": None, "cached": True}


def load_run(launch=True) -> RunResult:
    argv = ["/c/builds/k/whisper-cli", "-m", MODEL_ARG, "-f", "jfk.wav", "-d", "2000"]
    return RunResult(argv=argv, returncode=0, signal=None, timed_out=False, stdout=b"",
                     stderr=LOAD_ERR.encode(), wall_s=0.5612,
                     launch={"seq": 1, "binary_sha256": "c" * 64} if launch else None)


def ggml_doc(launch=True) -> dict:
    return canonical.loads(canonical.dumps({
        "path": "fp32/ggml-model.bin", "model_arg": MODEL_ARG, "sha256": "b" * 64,
        "bytes": 75_000_000, "hparams": dict(HPARAMS), "n_tensors": 167, "lossless": True,
        "binary_sha256": "c" * 64, "probe": run_record(load_run(launch))}))


def contract_doc(fp16=False) -> dict:
    c = EncoderContract(80, 1500, 384, 1, 2)
    variants = [("fp32", ["FLOAT32"])] + ([("fp16", ["FLOAT16", "FLOAT32"])] if fp16 else [])
    records = [{"precision": p, "path": f"{p}/ggml-model-encoder.mlpackage",
                "description": dict(DESC, compute_dtypes=dt), "problems": [], "placed": True,
                "tree_digest": "d" * 64,
                "conversion": {"options": {"compute_precision": p, "minimum_deployment_target":
                                           "macOS13"}, "seconds": 12.345}}
               for p, dt in variants]
    facts = {"coremltools": "9.0", "torch": "2.7.0", "transformers": "4.57.1",
             "numpy": "2.3.4", "torch_max_tested_by_coremltools": "2.7.0",
             "torch_above_tested": False, "torch_version_warning": [], "trace_seconds": 1.234}
    copies = ({"fp16/ggml-model.bin": {"from": "fp32/ggml-model.bin", "how": "hard link",
                                        "sha256": "b" * 64}} if fp16 else {})
    return canonical.loads(canonical.dumps({
        "model": {"hf_dir": "/c/models/tiny", "source_digest": "a" * 64,
                  "from": "export.ggml_model evidence"},
        "config": c.values(), "contract": c.as_dict(), "variants": records, "build": facts,
        "model_copies": copies}))


def compile_doc(with_sha=True) -> dict:
    entry = {"precision": "fp32", "package": "fp32/ggml-model-encoder.mlpackage",
             "package_tree_digest": "d" * 64, "model_arg": MODEL_ARG,
             "derived_path": contracts.coreml_encoder_path(MODEL_ARG),
             "placed_path": contracts.coreml_encoder_path(MODEL_ARG), "tree_digest": "e" * 64,
             "coremlc": {"argv": ["xcrun", "coremlc", "compile"], "returncode": 0,
                         "signal": None, "timed_out": False, "wall_s": 3.25,
                         "stderr_sha256": canonical.sha256_bytes(b"")}}
    if not with_sha:
        del entry["coremlc"]["stderr_sha256"]
    return canonical.loads(canonical.dumps({"variants": [entry], "coremlc": "/x/coremlc"}))


def _round_trip(parse, doc):
    parsed = parse(doc)
    assert parsed.to_json() == doc
    assert canonical.dumps(parsed.to_json()) == canonical.dumps(doc)
    return parsed


# ----------------------------------------------------------------------------- rule harness

def _view(tmp_path, docs: dict, blobs: dict) -> EvidenceView:
    refs = []
    for name, doc in docs.items():
        refs.append(EvidenceRef(name, f"{name}.json", canonical.write_json(
            tmp_path / f"{name}.json", doc)))
    for name, data in blobs.items():
        refs.append(EvidenceRef(name, f"{name}.txt", canonical.atomic_write_bytes(
            tmp_path / f"{name}.txt", data)))
    return EvidenceView(tmp_path, refs)


def judge_ggml_model(tmp_path, ggml, model=None):
    return RULES["export.ggml_model"](_view(tmp_path, {"ggml": ggml, "model": model or model_doc()},
                                            {"load_stderr": LOAD_ERR.encode(),
                                             "load_stdout": b""}))


def judge_contract(tmp_path, doc):
    logs = {f"convert_log_{v['precision']}": b"converted\n" for v in doc.get("variants", [])
            if isinstance(v, dict) and "precision" in v}
    return RULES["export.contract"](_view(tmp_path, {"contract": doc}, logs))


def judge_compile(tmp_path, doc):
    return RULES["export.compile"](_view(tmp_path, {"compile": doc}, {}))


# ----------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("launch", [True, False])
def test_ggml_model_round_trip_and_pass(tmp_path, launch):
    _round_trip(schemas.ModelIntake.from_json, model_doc())
    doc = ggml_doc(launch)
    parsed = _round_trip(schemas.GgmlModelEvidence.from_json, doc)
    assert (parsed.probe.launch is not None) is launch
    j = judge_ggml_model(tmp_path, doc)
    assert j.status is Status.PASS, j.detail


@pytest.mark.parametrize("fp16", [False, True])
def test_contract_round_trip_and_pass(tmp_path, fp16):
    doc = contract_doc(fp16)
    parsed = _round_trip(schemas.ContractEvidence.from_json, doc)
    assert [v.precision for v in parsed.variants] == (["fp32", "fp16"] if fp16 else ["fp32"])
    j = judge_contract(tmp_path, doc)
    assert j.status is Status.PASS, j.detail


@pytest.mark.parametrize("with_sha", [True, False])
def test_compile_round_trip_and_pass(tmp_path, with_sha):
    doc = compile_doc(with_sha)
    parsed = _round_trip(schemas.CompileEvidence.from_json, doc)
    assert (parsed.variants[0].coremlc.stderr_sha256 is not None) is with_sha
    j = judge_compile(tmp_path, doc)
    assert j.status is Status.PASS, j.detail


# ----------------------------------------------------------------------------- refusals

def _refused(parse, doc, edit, path) -> dict:
    d = copy.deepcopy(doc)
    edit(d)
    with pytest.raises(SchemaError) as info:
        parse(d)
    assert info.value.path == path, (path, str(info.value))
    assert isinstance(info.value, EvidenceInvalid)
    return d


@pytest.mark.parametrize("edit,path", [
    (delete_at("sha256"), "sha256"),
    (set_at("75", "bytes"), "bytes"),
    (set_at([], "hparams"), "hparams"),
    (set_at(None, "probe"), "probe"),
    (set_at(False, "probe", "returncode"), "probe.returncode"),
    (set_at([1], "probe", "argv"), "probe.argv[0]"),
    (delete_at("probe", "stdout_bytes"), "probe.stdout_bytes"),
])
def test_ggml_model_refusals(tmp_path, edit, path):
    d = _refused(schemas.GgmlModelEvidence.from_json, ggml_doc(), edit, path)
    j = judge_ggml_model(tmp_path, d)
    assert j.status is Status.FAIL and path in j.detail, j.detail


@pytest.mark.parametrize("edit,path", [(delete_at("source_digest"), "source_digest"),
                                       (set_at(1, "cached"), "cached")])
def test_model_intake_refusals(tmp_path, edit, path):
    d = _refused(schemas.ModelIntake.from_json, model_doc(), edit, path)
    j = judge_ggml_model(tmp_path, ggml_doc(), d)
    assert j.status is Status.FAIL and "model intake record" in j.detail and path in j.detail


@pytest.mark.parametrize("edit,path", [
    (delete_at("model"), "model"),
    (delete_at("model", "from"), "model.from"),
    (set_at({}, "variants"), "variants"),
    (set_at("yes", "variants", 0, "placed"), "variants[0].placed"),
    (set_at([], "variants", 0, "description"), "variants[0].description"),
    (delete_at("variants", 0, "conversion", "seconds"), "variants[0].conversion.seconds"),
    (delete_at("build", "torch"), "build.torch"),
    (set_at(None, "build", "torch_version_warning"), "build.torch_version_warning"),
    (set_at({"x": {"from": "a", "how": "copy"}}, "model_copies"), "model_copies.x.sha256"),
])
def test_contract_refusals(tmp_path, edit, path):
    d = _refused(schemas.ContractEvidence.from_json, contract_doc(), edit, path)
    j = judge_contract(tmp_path, d)
    assert j.status is Status.FAIL and path in j.detail, j.detail


@pytest.mark.parametrize("edit,path", [
    (set_at(None, "variants"), "variants"),
    (delete_at("variants", 0, "placed_path"), "variants[0].placed_path"),
    (set_at(1.5, "variants", 0, "coremlc", "returncode"), "variants[0].coremlc.returncode"),
    (set_at(None, "variants", 0, "coremlc", "stderr_sha256"), "variants[0].coremlc.stderr_sha256"),
    (delete_at("coremlc"), "coremlc"),
])
def test_compile_refusals(tmp_path, edit, path):
    d = _refused(schemas.CompileEvidence.from_json, compile_doc(), edit, path)
    j = judge_compile(tmp_path, d)
    assert j.status is Status.FAIL and path in j.detail, j.detail


def test_documents_must_be_objects():
    for parse in (schemas.ModelIntake.from_json, schemas.GgmlModelEvidence.from_json,
                  schemas.ContractEvidence.from_json, schemas.CompileEvidence.from_json):
        with pytest.raises(SchemaError) as info:
            parse(["not", "an", "object"])
        assert info.value.path == "document"


# ----------------------------------------------------------------------------- typed facts

def test_export_facts_are_typed_and_give_the_table(tmp_path):
    from verifylib.evidence.records import GateRecord, Reason
    from verifylib.evidence.export.facts import ExportFacts, export_facts_from_evidence
    from verifylib.evidence.reading import fact_rows

    def judged(gate_id, docs):
        refs = tuple(EvidenceRef(n, f"{n}.json", canonical.write_json(tmp_path / f"{n}.json", d))
                     for n, d in docs.items())
        return GateRecord(gate_id, Status.PASS, Reason("rule", "judged"), refs)

    g, m, c, k = ggml_doc(), model_doc(), contract_doc(fp16=True), compile_doc()
    c["variants"][1].update(placed=False, tree_digest=None, problems=["a", "b"])
    records = {"export.ggml_model": judged("export.ggml_model", {"ggml": g, "model": m}),
               "export.contract": judged("export.contract", {"contract": c}),
               "export.compile": judged("export.compile", {"compile": k})}
    facts = export_facts_from_evidence(tmp_path, records)
    assert isinstance(facts, ExportFacts) and facts
    assert facts.model.ggml_sha256 == g["sha256"] and facts.model.load_probe == "exit 0"
    assert [p.placed for p in facts.contract.packages] == [True, False]
    assert facts.compiled[0].tree_digest == "e" * 64
    mlmodelc = contracts.coreml_encoder_path(MODEL_ARG)
    assert fact_rows(facts) == [
        ("model kind", "hf-dir"), ("model source digest", "a" * 64),
        ("Hugging Face folder", "/c/models/tiny"),
        ("ggml-model.bin", f"{'b' * 64} (75000000 bytes)"), ("hyper-parameters", HPARAMS),
        ("load probe", "exit 0 in 0.56 s"),
        ("encoder contract", f"logmel_data float32 [1, 80, 3000] -> output float32 "
                             f"[1, 1500, 384] (from {c['config']})"),
        ("coremltools / torch", "9.0 / 2.7.0"), ("torch-above-tested warning", "none"),
        ("trace", "1.23 s"),
        ("fp32 package", "fp32/ggml-model-encoder.mlpackage: converted in 12.35 s, computes "
                         f"FLOAT32; placed, tree digest {'d' * 64}"),
        ("fp16 package", "fp16/ggml-model-encoder.mlpackage: converted in 12.35 s, computes "
                         "FLOAT16/FLOAT32; NOT placed: a; b"),
        ("fp16/ggml-model.bin", f"hard link of fp32/ggml-model.bin (sha256 {'b' * 64})"),
        ("fp32 .mlmodelc", f"{mlmodelc} (tree {'e' * 64}) in 3.2 s"),
    ]
    assert not export_facts_from_evidence(tmp_path, {}) and fact_rows(ExportFacts()) == []


def test_an_absent_optional_key_reads_as_its_declared_default():
    # Runs made before files of other tensor types were audited record no ftype: their file
    # is the writer's f16 one, as the schema declares (it read as None before).
    doc = ggml_doc()
    doc.pop("ftype", None)
    parsed = schemas.GgmlModelEvidence.from_json(doc)
    assert parsed.ftype == "f16" and parsed.given is None
    assert schemas.GgmlModelEvidence.from_json({**doc, "ftype": "q5_0"}).ftype == "q5_0"
