"""Core ML export: the contract follows the config, bad packages are refused before placement,
and the macOS-only steps (coremlc, CompiledMLModel) are driven correctly (tested with fakes).

tiny.en is traced once and converted once per variant per session (``tiny_en_export``);
the "contract follows the config" cases use small randomly initialised Whisper encoders.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from verifylib.runtime import contracts
from verifylib.canonical import is_sha256, tree_digest
from verifylib.models.coreml_export import (CompileError, ContractViolation, EncoderContract,
                                            build_facts, compile_mlpackage, contract_of,
                                            contract_problems, convert_traced, describe_mlpackage,
                                            link_or_copy, load_compiled, place_mlpackage,
                                            predict_compiled, trace_encoder)
from verifylib.runtime.runner import RunResult

from tests.test_model import cache_root, jfk_wav, tiny_en_bundle, tiny_en_info  # noqa: F401

PACKAGE = "ggml-model-encoder.mlpackage"


# ----------------------------------------------------------------------------- helpers

def small_encoder(n_mels=40, max_pos=50, d_model=32, layers=1, heads=2, conv2_stride=2, seed=0):
    """A randomly initialised Whisper encoder (eager attention) of the given shape."""
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(seed)
    cfg = WhisperConfig(num_mel_bins=n_mels, max_source_positions=max_pos, d_model=d_model,
                        encoder_layers=layers, encoder_attention_heads=heads,
                        encoder_ffn_dim=2 * d_model, decoder_layers=1,
                        decoder_attention_heads=heads, decoder_ffn_dim=2 * d_model,
                        vocab_size=64, max_target_positions=8, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    cfg._attn_implementation = "eager"
    enc = WhisperEncoder(cfg).eval()
    if conv2_stride != 2:
        enc.conv2.stride = (conv2_stride,)
    return enc


def export_small(encoder, folder: Path, precision="fp32", **overrides):
    """Trace + convert + place a small encoder; returns (contract, placed or exception)."""
    contract = contract_of(encoder)
    traced, _, _ = trace_encoder(encoder, contract)
    conv = convert_traced(traced, contract, precision, **overrides)
    return contract, conv


@dataclass
class TinyExport:
    contract: EncoderContract
    fp32: Path
    fp16: Path
    seconds: dict
    root: Path


@pytest.fixture(scope="session")
def tiny_en_export(tiny_en_bundle, tmp_path_factory) -> TinyExport:
    """tiny.en's encoder traced once, converted and placed as fp32 and fp16 packages."""
    encoder = tiny_en_bundle.model.get_encoder()
    contract = contract_of(encoder)
    root = tmp_path_factory.mktemp("tiny-export")
    traced, _, trace_s = trace_encoder(encoder, contract)
    seconds = {"trace": trace_s}
    paths = {}
    for prec in ("fp32", "fp16"):
        conv = convert_traced(traced, contract, prec)
        seconds[prec] = conv.seconds
        paths[prec] = place_mlpackage(conv.model, root / prec / PACKAGE, contract, prec).final
    return TinyExport(contract, paths["fp32"], paths["fp16"], seconds, root)


# ----------------------------------------------------------------------------- tiny.en

def test_tiny_en_contract_is_derived_from_its_config(tiny_en_bundle):
    c = contract_of(tiny_en_bundle.model.get_encoder())
    assert (c.n_mels, c.max_source_positions, c.d_model) == (80, 1500, 384)
    assert (c.conv1_stride, c.conv2_stride) == (1, 2)
    assert c.mel_width == 3000 and c.input_shape == (1, 80, 3000)
    assert c.output_shape == (1, 1500, 384)
    d = c.as_dict()
    assert d["input"] == {"name": "logmel_data", "dtype": "FLOAT32", "shape": [1, 80, 3000]}
    assert d["output"] == {"name": "output", "dtype": "FLOAT32", "shape": [1, 1500, 384]}
    assert EncoderContract(**d["derived_from"]) == c


def test_tiny_en_packages_meet_the_contract(tiny_en_export):
    t = tiny_en_export
    for prec, path in (("fp32", t.fp32), ("fp16", t.fp16)):
        assert path.name == PACKAGE and path.is_dir()
        desc = describe_mlpackage(path)
        assert contract_problems(desc, t.contract, prec) == []
        assert desc["model_type"] == "mlProgram"
        assert [f["name"] for f in desc["inputs"]] == [contracts.COREML_INPUT_NAME]
        assert [f["name"] for f in desc["outputs"]] == [contracts.COREML_OUTPUT_NAME]
        assert desc["inputs"][0]["dtype"] == desc["outputs"][0]["dtype"] == "FLOAT32"
        assert is_sha256(tree_digest(path))
        # Nothing but the package is left in the variant folder (no staging debris).
        assert [p.name for p in path.parent.iterdir()] == [PACKAGE]
    assert describe_mlpackage(t.fp32)["compute_dtypes"] == ["FLOAT32"]
    assert "FLOAT16" in describe_mlpackage(t.fp16)["compute_dtypes"]
    # docs/facts.md: the tiny.en program has 11 op types.
    ops = set(describe_mlpackage(t.fp32)["op_types"])
    assert ops == {"const", "linear", "transpose", "reshape", "add", "layer_norm", "matmul",
                   "gelu", "mul", "softmax", "conv"}


def test_build_facts_record_versions_and_the_torch_warning():
    f = build_facts()
    assert f["coremltools"] == "9.0" and f["torch"].startswith("2.13")
    assert f["torch_max_tested_by_coremltools"] == "2.7.0"
    assert f["torch_above_tested"] is True
    (warning,) = f["torch_version_warning"]
    assert "has not been tested with coremltools" in warning and "2.7.0" in warning


# ----------------------------------------------------------------------------- other configs

@pytest.mark.parametrize("shape", [
    dict(n_mels=40, max_pos=50, d_model=32),
    dict(n_mels=128, max_pos=24, d_model=48, layers=2),
    dict(n_mels=16, max_pos=30, d_model=32, conv2_stride=1),   # strides come from the modules
])
def test_contract_follows_the_config(shape, tmp_path):
    enc = small_encoder(**shape)
    contract, conv = export_small(enc, tmp_path)
    stride = shape.get("conv2_stride", 2)
    assert contract.input_shape == (1, shape["n_mels"], shape["max_pos"] * stride)
    assert contract.output_shape == (1, shape["max_pos"], shape["d_model"])
    placed = place_mlpackage(conv.model, tmp_path / "fp32" / PACKAGE, contract, "fp32")
    desc = placed.description
    assert desc["inputs"][0]["shape"] == list(contract.input_shape)
    assert desc["outputs"][0]["shape"] == list(contract.output_shape)
    assert placed.tree_digest == tree_digest(tmp_path / "fp32" / PACKAGE)


def _assert_refused(exc_info, final: Path, needle: str):
    assert any(needle in p for p in exc_info.value.problems), exc_info.value.problems
    assert not final.exists()
    assert list(final.parent.iterdir()) == [], "staging left behind"


def test_renamed_output_is_refused_before_placement(tmp_path):
    contract, conv = export_small(small_encoder(), tmp_path, output_name="encoder_out")
    final = tmp_path / "fp32" / PACKAGE
    with pytest.raises(ContractViolation) as ei:
        place_mlpackage(conv.model, final, contract, "fp32")
    _assert_refused(ei, final, "runtime needs exactly ['output']")


def test_float16_io_is_refused_before_placement(tmp_path):
    import coremltools as ct
    contract, conv = export_small(small_encoder(), tmp_path, "fp16", io_dtype=np.float16,
                                  minimum_deployment_target=ct.target.iOS16)
    final = tmp_path / "fp16" / PACKAGE
    with pytest.raises(ContractViolation) as ei:
        place_mlpackage(conv.model, final, contract, "fp16")
    _assert_refused(ei, final, "dtype FLOAT16")


def test_wrong_shape_is_refused_before_placement(tmp_path):
    # A package converted from one model, placed for another model's contract.
    _, conv = export_small(small_encoder(n_mels=40, max_pos=50), tmp_path)
    other = contract_of(small_encoder(n_mels=80, max_pos=50))
    final = tmp_path / "fp32" / PACKAGE
    with pytest.raises(ContractViolation) as ei:
        place_mlpackage(conv.model, final, other, "fp32")
    _assert_refused(ei, final, "shape [1, 40, 100], the contract is [1, 80, 100]")


def test_fp16_compute_is_refused_as_the_fp32_variant(tmp_path):
    contract, conv = export_small(small_encoder(), tmp_path, "fp16")
    final = tmp_path / "fp32" / PACKAGE
    with pytest.raises(ContractViolation) as ei:
        place_mlpackage(conv.model, final, contract, "fp32")
    _assert_refused(ei, final, "expected FLOAT32 only")


def test_contract_problems_is_pure_and_complete():
    c = EncoderContract(80, 1500, 384, 1, 2)
    good = {"model_type": "mlProgram", "compute_dtypes": ["FLOAT32"],
            "inputs": [{"name": "logmel_data", "type": "multiArrayType", "dtype": "FLOAT32",
                        "shape": [1, 80, 3000], "flexible_shape": None}],
            "outputs": [{"name": "output", "type": "multiArrayType", "dtype": "FLOAT32",
                         "shape": [1, 1500, 384], "flexible_shape": None}]}
    assert contract_problems(good, c, "fp32") == []
    bad = {**good, "model_type": "neuralNetwork"}
    assert "not an ML program" in contract_problems(bad, c, "fp32")[0]
    flex = {**good, "inputs": [{**good["inputs"][0], "flexible_shape": "shapeRange"}]}
    assert "flexible shape" in contract_problems(flex, c, "fp32")[0]
    extra = {**good, "outputs": good["outputs"] + [{**good["outputs"][0], "name": "x"}]}
    assert "exactly ['output']" in contract_problems(extra, c, "fp32")[0]
    wide = {**good, "outputs": [{**good["outputs"][0], "shape": [1, 1500, 512]}]}
    assert "shape [1, 1500, 512]" in contract_problems(wide, c, "fp32")[0]
    assert contract_problems(good, c, "fp16") == ["fp16 variant computes in ['FLOAT32'], "
                                                  "expected FLOAT16"]
    with pytest.raises(ValueError):
        EncoderContract(80, 0, 384, 1, 2)


def test_link_or_copy_publishes_the_same_bytes(tmp_path):
    src = tmp_path / "fp32" / "ggml-model.bin"
    src.parent.mkdir()
    src.write_bytes(b"ggml" * 100)
    how = link_or_copy(src, tmp_path / "fp16" / "ggml-model.bin")
    assert how in ("hardlink", "copy")
    assert (tmp_path / "fp16" / "ggml-model.bin").read_bytes() == src.read_bytes()
    assert [p.name for p in (tmp_path / "fp16").iterdir()] == ["ggml-model.bin"]


# ----------------------------------------------------------------------------- macOS steps, faked

def _result(argv, rc=0, stderr=b""):
    return RunResult(argv=[str(a) for a in argv], returncode=rc,
                     signal=contracts.decode_signal(rc), timed_out=False, stdout=b"",
                     stderr=stderr, wall_s=0.1)


def _fake_coremlc(produce=True, rc=0, name=None):
    calls = []

    def runner(argv, timeout=None):
        calls.append(list(argv))
        assert argv[:3] == ["xcrun", "coremlc", "compile"]
        pkg, out = Path(argv[3]), Path(argv[4])
        if produce and rc == 0:
            d = out / (name or pkg.stem + ".mlmodelc")
            (d / "weights").mkdir(parents=True)
            (d / "model.mil").write_text("program(1.0)")
            (d / "weights" / "weight.bin").write_bytes(b"\0" * 64)
        return _result(argv, rc, b"coremlc: error: boom\n" if rc else b"")
    return runner, calls


def test_compile_publishes_the_named_mlmodelc(tmp_path):
    pkg = tmp_path / "fp32" / PACKAGE
    pkg.mkdir(parents=True)
    dest = tmp_path / "fp32" / "ggml-model-encoder.mlmodelc"
    runner, calls = _fake_coremlc()
    res = compile_mlpackage(pkg, dest, runner=runner)
    (argv,) = calls
    assert argv[3] == str(pkg) and Path(argv[4]).parent == dest.parent
    assert res.path == dest and res.tree_digest == tree_digest(dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == sorted([PACKAGE, dest.name])
    # The runtime derives exactly this folder from the model file beside it.
    assert contracts.coreml_encoder_path(str(tmp_path / "fp32" / "ggml-model.bin")) == str(dest)


@pytest.mark.parametrize("produce,rc,name,err", [
    (True, 1, None, "coremlc failed (exit 1)"),
    (False, 0, None, "wrote no ggml-model-encoder.mlmodelc"),
    (True, 0, "other.mlmodelc", "found ['other.mlmodelc']"),
])
def test_compile_failures_place_nothing(tmp_path, produce, rc, name, err):
    pkg = tmp_path / "fp32" / PACKAGE
    pkg.mkdir(parents=True)
    dest = tmp_path / "fp32" / "ggml-model-encoder.mlmodelc"
    runner, _ = _fake_coremlc(produce, rc, name)
    with pytest.raises(CompileError, match=err.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        compile_mlpackage(pkg, dest, runner=runner)
    assert [p.name for p in dest.parent.iterdir()] == [PACKAGE]


def test_compile_refuses_a_package_named_otherwise(tmp_path):
    with pytest.raises(ValueError, match="name the .mlpackage after the .mlmodelc"):
        compile_mlpackage(tmp_path / "encoder.mlpackage",
                          tmp_path / "ggml-model-encoder.mlmodelc", runner=_fake_coremlc()[0])


class FakeCompiled:
    """Stands in for coremltools.models.CompiledMLModel (macOS only)."""

    def __init__(self, path, compute_units=None, output=None):
        self.path, self.compute_units, self._output = path, compute_units, output
        self.fed = None

    def predict(self, feeds):
        self.fed = feeds
        return self._output(feeds)


def test_runtime_loads_with_compute_units_all_and_checks_the_output():
    import coremltools as ct
    c = EncoderContract(8, 5, 4, 1, 2)
    made = []

    def loader(path, compute_units=None):
        m = FakeCompiled(path, compute_units,
                         lambda f: {"output": np.ones(c.output_shape, np.float32)})
        made.append(m)
        return m

    model = load_compiled("/x/ggml-model-encoder.mlmodelc", loader=loader)
    assert model.compute_units == ct.ComputeUnit.ALL
    assert model.path == "/x/ggml-model-encoder.mlmodelc"
    mel = np.zeros(c.input_shape, np.float64)
    y = predict_compiled(model, mel, c)
    assert y.shape == c.output_shape
    assert list(model.fed) == ["logmel_data"] and model.fed["logmel_data"].dtype == np.float32
    for out, needle in (({"encoder_output": np.ones(c.output_shape, np.float32)}, "outputs"),
                        ({"output": np.ones(c.output_shape, np.float16)}, "dtype"),
                        ({"output": np.ones((1, 6, 4), np.float32)}, "shape")):
        bad = FakeCompiled("p", None, lambda f, out=out: out)
        with pytest.raises(ContractViolation, match=needle):
            predict_compiled(bad, mel, c)
    with pytest.raises(ValueError):
        predict_compiled(model, np.zeros((1, 8, 9), np.float32), c)
