"""The encoder card: what a Core ML encoder declares, read before anything is measured.

Packages are tiny MIL programs built with coremltools' Builder and converted without
loading (a fraction of a second each); compiled models are folders laid out as coremlc
writes them, their MIL text written here. tiny.en's own packages and their compressed
variants are in tests/physical/test_encoder_card.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from verifylib.errors import EvidenceInvalid, ParametersInvalid
from verifylib.models.coreml_contract import (
    FLOAT16_IO_REASON,
    EncoderContract,
    contract_problems,
    describe_mlpackage,
)
from verifylib.models.encoder_card import (EncoderCard, EncoderInvalid, PolicyUndetermined,
                                           contract_check, declared_policy)
from verifylib.models.encoder_reader import describe_encoder
from verifylib.models.mil_text import parse_mil_text

CONTRACT = EncoderContract(n_mels=4, max_source_positions=6, d_model=8, conv1_stride=1,
                           conv2_stride=2)
"""A contract of the shapes below: logmel_data (1, 4, 12) -> output (1, 6, 8)."""

RNG = np.random.default_rng(7)
W_LIN = RNG.normal(size=(8, 8)).astype(np.float32)
W_CONV = RNG.normal(size=(8, 4, 3)).astype(np.float32)


def _save(tmp_path: Path, prog, name: str, precision: str = "fp32", **kw) -> Path:
    import coremltools as ct
    cp = ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16
    model = ct.convert(prog, convert_to="mlprogram", compute_precision=cp,
                       skip_model_load=True, **kw)
    path = tmp_path / name
    model.save(str(path))
    return path


def _encoder_like(dtype=None, opset=None):
    """conv stem -> transpose -> linear -> layer_norm, named like the contract."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    spec = mb.TensorSpec(shape=(1, 4, 12), dtype=dtype or types.fp32)
    kw = {"opset_version": opset} if opset is not None else {}

    @mb.program(input_specs=[spec], **kw)
    def prog(logmel_data):
        x = logmel_data
        if dtype is not None:
            x = mb.cast(x=x, dtype="fp32")
        h = mb.conv(x=x, weight=W_CONV, strides=[2], pad_type="custom", pad=[1, 1])
        h = mb.gelu(x=h)
        h = mb.transpose(x=h, perm=[0, 2, 1])
        h = mb.linear(x=h, weight=W_LIN)
        out = mb.layer_norm(x=h, axes=[-1], epsilon=1e-5)
        if dtype is not None:
            out = mb.cast(x=out, dtype="fp16")
        return mb.identity(x=out, name="output")
    return prog


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """fp32, fp16, mixed, palettized, quantized, ANE-like and Float16-IO packages."""
    import coremltools as ct
    import coremltools.optimize.coreml as cto
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    root = tmp_path_factory.mktemp("cards")
    out = {"fp32": _save(root, _encoder_like(), "fp32.mlpackage"),
           "fp16": _save(root, _encoder_like(), "fp16.mlpackage", "fp16")}

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 12))])
    def mixed(logmel_data):
        h = mb.cast(x=logmel_data, dtype="fp16")
        h = mb.conv(x=h, weight=W_CONV.astype(np.float16), strides=[2], pad_type="custom",
                    pad=[1, 1])
        h = mb.transpose(x=h, perm=[0, 2, 1])
        h = mb.cast(x=h, dtype="fp32")
        return mb.layer_norm(x=h, axes=[-1], epsilon=1e-5, name="output")
    out["mixed"] = _save(root, mixed, "mixed.mlpackage")

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 1, 6))])
    def ane(x):
        q = mb.conv(x=x, weight=W_LIN.reshape(8, 8, 1, 1))
        a, b = mb.split(x=q, num_splits=2, axis=1)                 # 2 x (1, 4, 1, 6)
        b = mb.transpose(x=b, perm=[0, 3, 2, 1])                     # (1, 6, 1, 4)
        s = mb.einsum(values=(a, b), equation="nchw,nwhu->nchu")    # (1, 4, 1, 4)
        s = mb.softmax(x=s, axis=-1)
        return mb.reduce_sum(x=s, axes=[-1], name="output")
    out["ane"] = _save(root, ane, "ane.mlpackage")

    model = ct.models.MLModel(str(out["fp32"]), skip_model_load=True)
    pal = cto.palettize_weights(model, cto.OptimizationConfig(
        global_config=cto.OpPalettizerConfig(nbits=6, mode="uniform", weight_threshold=32)))
    pal.save(str(root / "pal6.mlpackage"))
    out["pal6"] = root / "pal6.mlpackage"
    lq = cto.linear_quantize_weights(model, cto.OptimizationConfig(
        global_config=cto.OpLinearQuantizerConfig(mode="linear_symmetric",
                                                  weight_threshold=32)))
    lq.save(str(root / "int8.mlpackage"))
    out["int8"] = root / "int8.mlpackage"
    out["f16io"] = _save(root, _encoder_like(dtype=types.fp16, opset=ct.target.iOS16),
                         "f16io.mlpackage", minimum_deployment_target=ct.target.iOS16)
    return out


# ----------------------------------------------------------------------------- packages

def test_fp32_package_card(packages):
    card = describe_encoder(packages["fp32"])
    assert (card.format, card.model_type, card.precision) == ("mlpackage", "mlProgram", "fp32")
    assert "every arithmetic operation produces FLOAT32" in card.precision_reason
    assert card.weight_compression == "none" and card.compressed_weights == ()
    assert card.layout == "plain"
    assert (card.converter_version, card.source) == ("9.0", "milinternal")
    assert card.converter_facts_from == "package metadata"
    assert dict(card.op_histogram)["linear"] == 1 and card.op_histogram_from == "program"
    assert [f.name for f in card.inputs] == ["logmel_data"]
    assert card.inputs[0].dtype == "FLOAT32" and card.inputs[0].shape == (1, 4, 12)
    assert card.outputs[0].shape == (1, 6, 8)
    assert card.opset == "CoreML5" and card.specification_version == 6
    assert card.read_from == ("Manifest.json", "Data/com.apple.CoreML/model.mlmodel")
    # The IO description is describe_mlpackage's, the reader export.contract judges.
    desc = describe_mlpackage(packages["fp32"])
    assert {k: card.description()[k] for k in desc} == desc
    assert contract_check(card, CONTRACT) == []
    assert declared_policy(card) == "fp32-v1"


def test_fp16_and_mixed_precision_come_from_the_program(packages):
    fp16 = describe_encoder(packages["fp16"])
    assert fp16.precision == "fp16" and "cast" in fp16.precision_reason
    assert dict(fp16.compute_ops) == {"FLOAT16": dict(fp16.compute_ops)["FLOAT16"]}
    assert set(fp16.compute_dtypes) == {"FLOAT16", "FLOAT32"}  # the output cast
    assert declared_policy(fp16) == "fp16-v1"
    assert contract_check(fp16, CONTRACT) == []
    mixed = describe_encoder(packages["mixed"])
    assert mixed.precision == "mixed" and set(dict(mixed.compute_ops)) == {"FLOAT16",
                                                                          "FLOAT32"}
    assert declared_policy(mixed) == "fp16-v1"


def test_weight_compression_and_bit_widths(packages):
    pal = describe_encoder(packages["pal6"])
    assert pal.weight_compression == "palettized"
    (entry,) = pal.compressed_weights
    assert (entry.op_type, entry.count, entry.nbits) == ("constexpr_lut_to_dense", 2, (6,))
    assert pal.precision == "fp32"  # decompression ops are weights, not arithmetic
    q = describe_encoder(packages["int8"])
    assert q.weight_compression == "linear-quantized"
    assert q.compressed_weights[0].nbits == (8,)
    assert q.compressed_weights[0].op_type == "constexpr_affine_dequantize"


def test_ane_layout(packages):
    card = describe_encoder(packages["ane"])
    assert card.layout == "ane", card.layout_reason
    assert "1 einsum" in card.layout_reason and "2-D" in card.layout_reason


def test_float16_interface_fails_the_contract_with_the_guides_reason(packages):
    card = describe_encoder(packages["f16io"])
    assert card.inputs[0].dtype == card.outputs[0].dtype == "FLOAT16"
    problems = contract_check(card, CONTRACT)
    assert problems == [f"logmel_data: dtype FLOAT16, a Float16 interface: {FLOAT16_IO_REASON}",
                        f"output: dtype FLOAT16, a Float16 interface: {FLOAT16_IO_REASON}"]
    assert "memcpys count * sizeof(float)" in FLOAT16_IO_REASON
    assert "Float32 MLMultiArray for 'logmel_data'" in FLOAT16_IO_REASON


def test_contract_problems_gives_the_float16_reason_and_keeps_the_other_dtypes():
    good = {"model_type": "mlProgram", "compute_dtypes": ["FLOAT32"],
            "inputs": [{"name": "logmel_data", "type": "multiArrayType", "dtype": "FLOAT32",
                        "shape": [1, 4, 12], "flexible_shape": None}],
            "outputs": [{"name": "output", "type": "multiArrayType", "dtype": "FLOAT16",
                         "shape": [1, 6, 8], "flexible_shape": None}]}
    (p,) = contract_problems(good, CONTRACT, "fp32")
    assert p.startswith("output: dtype FLOAT16") and "read past its buffer" in p
    good["outputs"][0]["dtype"] = "DOUBLE"
    assert contract_problems(good, CONTRACT, "fp32") == [
        "output: dtype DOUBLE, the runtime copies FLOAT32"]


def test_card_round_trips_and_the_policy_is_rederived_from_it(packages):
    for key in ("fp32", "fp16", "pal6", "ane"):
        card = describe_encoder(packages[key])
        doc = json.loads(json.dumps(card.to_json()))
        back = EncoderCard.from_json(doc)
        assert back == card
        if back.precision != "unknown":
            assert declared_policy(back) == declared_policy(card)
    doc = describe_encoder(packages["fp32"]).to_json()
    for bad in ({**doc, "precision": "fp8"}, {**doc, "extra": 1},
                {k: v for k, v in doc.items() if k != "layout"},
                {**doc, "inputs": [{"name": "x"}]}, {**doc, "op_histogram": [["a", "1"]]}):
        with pytest.raises(EvidenceInvalid):
            EncoderCard.from_json(bad)
    unknown = EncoderCard.from_json({**doc, "precision": "unknown",
                                     "precision_reason": "no program was read"})
    with pytest.raises(PolicyUndetermined, match="no program was read") as ei:
        declared_policy(unknown)
    assert isinstance(ei.value, ParametersInvalid) and ei.value.reason == "no program was read"
    problems = contract_check(unknown, CONTRACT)
    assert problems == ["compute precision unknown: no program was read"]


# ----------------------------------------------------------------------------- hostile

def _package_copy(src: Path, dest: Path) -> Path:
    import shutil
    shutil.copytree(src, dest)
    return dest


def _refused(path, needle: str):
    with pytest.raises(EncoderInvalid) as ei:
        describe_encoder(path)
    assert needle in str(ei.value), str(ei.value)
    assert isinstance(ei.value, ParametersInvalid)


def test_hostile_paths_and_packages_are_refused_with_a_reason(packages, tmp_path):
    _refused(tmp_path / "absent.mlpackage", "no such file or folder")
    (tmp_path / "enc.bin").mkdir()
    _refused(tmp_path / "enc.bin", "not '.bin'")
    (tmp_path / "file.mlpackage").write_bytes(b"x")
    _refused(tmp_path / "file.mlpackage", "this is a file")
    (tmp_path / "empty.mlpackage").mkdir()
    _refused(tmp_path / "empty.mlpackage", "no Manifest.json")
    pkg = _package_copy(packages["fp32"], tmp_path / "a.mlpackage")
    manifest = json.loads((pkg / "Manifest.json").read_text())
    (pkg / "Manifest.json").write_text("{not json")
    _refused(pkg, "Manifest.json is not JSON")
    (pkg / "Manifest.json").write_text(json.dumps({"itemInfoEntries": {}}))
    _refused(pkg, "names no root model")
    root = manifest["rootModelIdentifier"]
    evil = json.loads(json.dumps(manifest))
    evil["itemInfoEntries"][root]["path"] = "../../../../etc/passwd"
    (pkg / "Manifest.json").write_text(json.dumps(evil))
    _refused(pkg, "leads outside the artifact")
    (pkg / "Manifest.json").write_text(json.dumps(manifest))
    model = pkg / "Data" / "com.apple.CoreML" / "model.mlmodel"
    good = model.read_bytes()
    model.write_bytes(b"\xff\xff\xff\xff garbage")
    _refused(pkg, "not a readable Core ML protobuf")
    model.write_bytes(b"")
    _refused(pkg, "holds no model")
    model.unlink()
    _refused(pkg, "no Data/com.apple.CoreML/model.mlmodel")
    outside = tmp_path / "outside.mlmodel"
    outside.write_bytes(good)
    os.symlink(outside, model)
    _refused(pkg, "leads outside the artifact")


# ----------------------------------------------------------------------------- .mlmodelc

BLOB = 'BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), ' \
       'offset = tensor<uint64, []>({}))'

MIL_FP16 = """program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-component-MIL", "3304.5.2"}, {"coremlc-version", "3304.6.2"}, {"coremltools-component-torch", "2.1.0"}, {"coremltools-source-dialect", "TorchScript"}, {"coremltools-version", "7.1"}})]
{
    func main<ios16>(tensor<fp32, [1, 4, 12]> logmel_data) {
            tensor<string, []> to16 = const()[name = tensor<string, []>("to16"), val = tensor<string, []>("fp16")];
            tensor<fp16, [8, 4, 3]> w0 = const()[name = tensor<string, []>("w0"), val = tensor<fp16, [8, 4, 3]>(""" + BLOB.format(64) + """)];
            tensor<fp16, [8, 8]> w1 = constexpr_lut_to_dense()[indices = tensor<uint8, [48]>(""" + BLOB.format(256) + """), lut = tensor<fp16, [64]>(""" + BLOB.format(384) + """), name = tensor<string, []>("w1"), shape = tensor<uint32, [2]>([8, 8])];
            tensor<fp16, [1, 4, 12]> x16 = cast(dtype = to16, x = logmel_data)[name = tensor<string, []>("cast_0")];
            tensor<string, []> pt = const()[name = tensor<string, []>("pt"), val = tensor<string, []>("custom")];
            tensor<fp16, [1, 8, 6]> c = conv(pad_type = pt, weight = w0, x = x16)[name = tensor<string, []>("conv_0")];
            tensor<fp16, [1, 8, 6]> g = gelu(mode = tensor<string, []>("EXACT"), x = c)[name = tensor<string, []>("gelu_0")];
            tensor<int32, [3]> perm = const()[name = tensor<string, []>("perm"), val = tensor<int32, [3]>([0, 2, 1])];
            tensor<fp16, [1, 6, 8]> t = transpose(perm = perm, x = g)[name = tensor<string, []>("transpose_0")];
            tensor<fp16, [1, 6, 8]> l = linear(weight = w1, x = t)[name = tensor<string, []>("linear_0")];
            tensor<fp16, [1, 6, 8]> n = layer_norm(axes = tensor<int32, [1]>([-1]), x = l)[name = tensor<string, []>("ln; with a semicolon")];
            tensor<string, []> to32 = const()[name = tensor<string, []>("to32"), val = tensor<string, []>("fp32")];
            tensor<fp32, [1, 6, 8]> output = cast(dtype = to32, x = n)[name = tensor<string, []>("cast_1")];
    } -> (output);
}
"""

MIL_ANE_IOS18 = """program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3500.14.1"}})]
{
    func main<ios18>(tensor<fp16, [1, 8, 1, 6]> x) {
            tensor<fp16, [8, 8, 1, 1]> w = constexpr_lut_to_dense(indices = tensor<uint4, [8, 8, 1, 1]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64))), lut = tensor<fp16, [1, 1, 1, 1, 16, 1]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(128))))[name = string("w")];
            tensor<fp16, [1, 8, 1, 6]> q = conv(weight = w, x = x)[name = string("q")];
            int32 ax = const()[name = string("ax"), val = int32(1)];
            (tensor<fp16, [1, 4, 1, 6]> a, tensor<fp16, [1, 4, 1, 6]> b) = split(axis = ax, num_splits = int32(2), x = q)[name = string("s")];
            tensor<fp16, [1, 1, 6, 6]> e = einsum(equation = string("bchq,bchk->bhqk"), values = (a, b))[name = string("e")];
            tensor<fp16, [1, 1, 6, 6]> output = softmax(axis = int32(-1), x = e)[name = string("sm")];
    } -> (output);
}
"""


def _schema(name, dtype, shape):
    dims = ", ".join(map(str, shape))
    return {"hasShapeFlexibility": "0", "isOptional": "0", "dataType": dtype,
            "formattedType": f"MultiArray ({dtype} {' × '.join(map(str, shape))})",
            "shortDescription": "", "shape": f"[{dims}]", "name": name, "type": "MultiArray"}


def _metadata(out_dtype="Float32", **extra):
    meta = {"metadataOutputVersion": "3.0", "storagePrecision": "Mixed (Float16, Palettized "
            "(6 bits))", "outputSchema": [_schema("output", out_dtype, (1, 6, 8))],
            "modelParameters": [], "specificationVersion": 7,
            "mlProgramOperationTypeHistogram": {"Ios16.cast": 2, "Ios16.conv": 1,
                                                "Ios16.gelu": 1, "Ios16.transpose": 1,
                                                "Ios16.linear": 1, "Ios16.layerNorm": 1,
                                                "Ios16.constexprLutToDense": 1},
            "computePrecision": "Mixed (Float16, Float32, Int32)", "isUpdatable": "0",
            "availability": {"macOS": "13.0", "iOS": "16.0"},
            "modelType": {"name": "MLModelType_mlProgram"},
            "userDefinedMetadata": {"com.github.apple.coremltools.source_dialect": "TorchScript",
                                    "com.github.apple.coremltools.source": "torch==2.1.0",
                                    "com.github.apple.coremltools.version": "7.1"},
            "inputSchema": [_schema("logmel_data", "Float32", (1, 4, 12))],
            "generatedClassName": "coreml_encoder_tiny", "method": "predict"}
    meta.update(extra)
    return [meta]


def _compiled(tmp_path: Path, name="ggml-tiny-encoder.mlmodelc", mil=MIL_FP16, meta=None):
    d = tmp_path / name
    (d / "analytics").mkdir(parents=True)
    (d / "weights").mkdir()
    if mil is not None:
        (d / "model.mil").write_text(mil, encoding="utf-8")
    (d / "coremldata.bin").write_bytes(b"\xf6\x01\x00\x00" + bytes(60))
    (d / "analytics" / "coremldata.bin").write_bytes(b"\x19" + bytes(15))
    (d / "weights" / "weight.bin").write_bytes(bytes(512))
    (d / "metadata.json").write_text(json.dumps(meta if meta is not None else _metadata(),
                                                indent=2), encoding="utf-8")
    return d


def test_compiled_model_card_reads_model_mil(tmp_path):
    card = describe_encoder(_compiled(tmp_path))
    assert (card.format, card.model_type, card.opset) == ("mlmodelc", "mlProgram", "ios16")
    assert card.precision == "fp16", card.precision_reason
    assert card.layout == "plain"
    assert card.weight_compression == "palettized"
    assert card.compressed_weights[0].nbits == (6,)
    assert (card.converter_version, card.source, card.source_dialect) == \
        ("7.1", "torch==2.1.0", "TorchScript")
    assert card.converter_facts_from == "metadata.json"
    declared = dict(card.declared)
    assert declared["generatedClassName"] == "coreml_encoder_tiny"
    assert declared["buildInfo.coremlc-version"] == "3304.6.2"
    assert declared["storagePrecision"].startswith("Mixed (Float16, Palettized")
    assert card.op_histogram_from == "model.mil" and dict(card.op_histogram)["const"] == 5
    assert card.inputs[0].dtype == "FLOAT32" and card.outputs[0].shape == (1, 6, 8)
    assert card.notes == ()  # model.mil and metadata.json agree
    assert contract_check(card, CONTRACT) == []
    assert declared_policy(card) == "fp16-v1"
    assert EncoderCard.from_json(json.loads(json.dumps(card.to_json()))) == card


def test_compiled_model_without_readable_mil_falls_back_to_metadata(tmp_path):
    d = _compiled(tmp_path, mil="program { this is not MIL")
    card = describe_encoder(d)
    assert card.precision == "fp16"
    assert "metadata.json computePrecision" in card.precision_reason
    assert any("does not parse" in n for n in card.notes)
    assert card.weight_compression == "palettized" and card.compressed_weights[0].nbits == ()
    assert card.layout == "plain" and "histogram" in card.layout_reason
    assert card.op_histogram_from == "metadata.json"
    assert dict(card.op_histogram)["layer_norm"] == 1  # coremlc's keys as MIL op types
    d2 = _compiled(tmp_path / "b", mil="garbage", meta=[{k: v for k, v in _metadata()[0].items()
                                                         if k != "computePrecision"}])
    card2 = describe_encoder(d2)
    assert card2.precision == "unknown" and "does not parse" in card2.precision_reason
    with pytest.raises(PolicyUndetermined):
        declared_policy(card2)


def test_compiled_ane_program_in_ios18_syntax(tmp_path):
    meta = _metadata()
    meta[0]["inputSchema"] = [_schema("x", "Float16", (1, 8, 1, 6))]
    d = _compiled(tmp_path, mil=MIL_ANE_IOS18, meta=meta)
    card = describe_encoder(d)
    assert card.layout == "ane", card.layout_reason
    assert card.precision == "fp16"
    assert card.compressed_weights[0].nbits == (4,)
    assert dict(card.op_histogram)["split"] == 1
    assert any("differs from model.mil" in n for n in card.notes)
    opset, inputs, ops, outputs = parse_mil_text(MIL_ANE_IOS18)
    split = next(op for op in ops if op.type == "split")
    assert [s for _, s in split.outputs] == [(1, 4, 1, 6), (1, 4, 1, 6)]
    assert outputs == [("output", ("FLOAT16", (1, 1, 6, 6)))]


def test_compiled_float16_output_fails_the_contract(tmp_path):
    card = describe_encoder(_compiled(tmp_path, meta=_metadata(out_dtype="Float16")))
    assert card.outputs[0].dtype == "FLOAT16"
    assert contract_check(card, CONTRACT) == [
        f"output: dtype FLOAT16, a Float16 interface: {FLOAT16_IO_REASON}"]


def test_hostile_compiled_models_are_refused_with_a_reason(tmp_path):
    d = _compiled(tmp_path)
    (d / "coremldata.bin").unlink()
    _refused(d, "no coremldata.bin")
    d = _compiled(tmp_path / "b")
    (d / "metadata.json").write_text("[{")
    _refused(d, "metadata.json is not JSON")
    (d / "metadata.json").write_text(json.dumps([{}, {}]))
    _refused(d, "neither one object nor a list of one")
    d = _compiled(tmp_path / "c", mil=None)
    _refused(d, "declares an ML program but there is no model.mil")
    d = _compiled(tmp_path / "d")
    (d / "model.mil").write_bytes(b"\xff\xfe\x00 not utf-8")
    _refused(d, "model.mil is not UTF-8")
    d = _compiled(tmp_path / "e")
    (d / "metadata.json").write_text(json.dumps([{"inputSchema": [{"shape": "[1]"}]}]))
    _refused(d, "a schema entry without a name")
    d = _compiled(tmp_path / "f")
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(_metadata()))
    (d / "metadata.json").unlink()
    os.symlink(target, d / "metadata.json")
    _refused(d, "leads outside the artifact")


def test_simulated_coremlc_output_is_read_honestly(tmp_path):
    """A compiled folder whose model.mil is protobuf text (what an earlier simulated
    compiler wrote) and whose metadata object has no computePrecision: the card says it
    cannot tell."""
    meta = {"platform": "macOS", "specificationVersion": 6, "inputs": ["logmel_data"],
            "outputs": ["output"], "compiler": "verifylib simulated coremlc"}
    d = _compiled(tmp_path, mil='functions {\n  key: "main"\n}\n', meta=meta)
    card = describe_encoder(d)
    assert card.precision == "unknown" and card.model_type == "mlProgram"
    assert "metadata.json is an object" in " ".join(card.notes)
    assert card.inputs == card.outputs == ()
