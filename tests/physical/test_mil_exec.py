"""The MIL-program executor: it reads the saved artifact (an edited weight changes its
output), follows MIL semantics op by op, matches the HF encoder on tiny.en and refuses
unknown operations by name."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from verifylib.numerics.mil_exec import MilExecError, UnsupportedOpError, execute, load_program
from verifylib.numerics.program_map import residual_taps
from verifylib.numerics.parity import compare

from tests.helpers.encoders import export_small, small_encoder
import shutil
import struct
from tests.helpers.encoders import edit_weight
from verifylib.canonical import tree_digest
from verifylib.runtime.audio import read_wav_16k


# ----------------------------------------------------------------------------- helpers

def save_mil(tmp_path: Path, build, shape: tuple, name="p.mlpackage"):
    """Convert a one-input pymil program whose body is ``build(x)`` and save it.

    Returns the package and its input feature names."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)])
    def prog(x):
        return build(x)

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                       skip_model_load=True)
    spec_names = [i.name for i in model.get_spec().description.input]
    path = tmp_path / name
    model.save(str(path))
    return path, spec_names


# ----------------------------------------------------------------------------- semantics

def test_small_random_encoders_execute(tmp_path):
    import torch
    from verifylib.models.coreml_package import place_mlpackage
    for i, shape in enumerate([dict(n_mels=40, max_pos=50, d_model=32),
                               dict(n_mels=16, max_pos=30, d_model=32, conv2_stride=1,
                                    layers=2)]):
        enc = small_encoder(**shape)
        contract, conv = export_small(enc, tmp_path)
        pkg = place_mlpackage(conv.model, tmp_path / str(i) / "e.mlpackage", contract,
                              "fp32").final
        x = np.random.default_rng(i).uniform(-1, 1, contract.input_shape).astype(np.float32)
        with torch.inference_mode():
            ref = enc(torch.from_numpy(x)).last_hidden_state.numpy()
        prog = load_program(pkg)
        assert len(residual_taps(prog)) == shape.get("layers", 1) + 2
        assert compare(ref, execute(prog, {"logmel_data": x},
                                    compute="float64").outputs["output"]).snr_db > 110


def _np_gelu(x, mode):
    if mode == "EXACT":
        erf = np.vectorize(math.erf)
        return 0.5 * x * (1 + erf(x / math.sqrt(2)))
    if mode == "TANH_APPROXIMATION":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return x / (1 + np.exp(-1.702 * x))


@pytest.mark.parametrize("mode", ["EXACT", "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION"])
def test_gelu_modes(tmp_path, mode):
    from coremltools.converters.mil import Builder as mb
    path, (name,) = save_mil(tmp_path, lambda x: mb.gelu(x=x, mode=mode), (3, 5))
    x = np.linspace(-3, 3, 15).reshape(3, 5)
    (out,) = execute(load_program(path), {name: x}, compute="float64").outputs.values()
    np.testing.assert_allclose(out, _np_gelu(x, mode), rtol=1e-6, atol=1e-7)


def test_layer_norm_over_leading_axes_softmax_matmul_transpose_reshape(tmp_path):
    from coremltools.converters.mil import Builder as mb
    rng = np.random.default_rng(1)
    gamma = rng.normal(size=(2, 3)).astype(np.float32)
    beta = rng.normal(size=(2, 3)).astype(np.float32)
    w = rng.normal(size=(4, 6)).astype(np.float32)

    def build(x):
        y = mb.layer_norm(x=x, axes=[0, 1], gamma=gamma, beta=beta, epsilon=1e-3)  # (2,3,4)
        s = mb.softmax(x=y, axis=1)
        r = mb.reshape(x=s, shape=[0, -1, 2])                                       # (2,6,2)
        t = mb.transpose(x=r, perm=[0, 2, 1])                                       # (2,2,6)
        return mb.matmul(x=t, y=w, transpose_y=True)                                # (2,2,4)

    path, (name,) = save_mil(tmp_path, build, (2, 3, 4))
    x = rng.normal(size=(2, 3, 4))
    (out,) = execute(load_program(path), {name: x}, compute="float64").outputs.values()
    mean = x.mean(axis=(0, 1), keepdims=True)
    var = x.var(axis=(0, 1), keepdims=True)
    y = (x - mean) / np.sqrt(var + 1e-3) * gamma[:, :, None] + beta[:, :, None]
    s = np.exp(y) / np.exp(y).sum(axis=1, keepdims=True)
    t = s.reshape(2, 6, 2).transpose(0, 2, 1)
    np.testing.assert_allclose(out, t @ w.astype(np.float64).T, rtol=1e-5, atol=1e-6)


def test_conv_custom_padding_order_strides_dilations_groups(tmp_path):
    import torch
    import torch.nn.functional as F
    from coremltools.converters.mil import Builder as mb
    rng = np.random.default_rng(2)
    w = rng.normal(size=(4, 2, 3, 2)).astype(np.float32)
    b = rng.normal(size=(4,)).astype(np.float32)

    def build(x):
        return mb.conv(x=x, weight=w, bias=b, strides=[2, 1], pad_type="custom",
                       pad=[1, 0, 0, 2], dilations=[1, 2], groups=2)

    path, (name,) = save_mil(tmp_path, build, (1, 4, 7, 5))
    x = rng.normal(size=(1, 4, 7, 5))
    (out,) = execute(load_program(path), {name: x}, compute="float64").outputs.values()
    # MIL pad = [H begin, H end, W begin, W end]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 2)))
    want = F.conv2d(torch.from_numpy(xp), torch.from_numpy(w.astype(np.float64)),
                    torch.from_numpy(b.astype(np.float64)), stride=(2, 1), dilation=(1, 2),
                    groups=2).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_unknown_op_stops_with_its_name(tmp_path):
    from coremltools.converters.mil import Builder as mb
    path, (name,) = save_mil(tmp_path, lambda x: mb.cumsum(x=mb.add(x=x, y=1.0), axis=0),
                             (2, 2))
    prog = load_program(path)
    with pytest.raises(UnsupportedOpError, match="'cumsum'") as ei:
        execute(prog, {name: np.zeros((2, 2))})
    assert ei.value.op_type == "cumsum"


def test_residual_taps_refuse_other_structures(tmp_path):
    from coremltools.converters.mil import Builder as mb
    path, _ = save_mil(tmp_path, lambda x: mb.layer_norm(x=x, axes=[-1]), (2, 3))
    with pytest.raises(MilExecError, match="2L\\+1"):
        residual_taps(load_program(path))


FACTS_OP_TYPES = {"const", "linear", "transpose", "reshape", "add", "layer_norm", "matmul",
                  "gelu", "mul", "softmax", "conv"}


@pytest.fixture(scope="session")
def jfk_logmel(tiny_en_bundle, jfk_wav):
    fe = tiny_en_bundle.feature_extractor
    return fe(read_wav_16k(jfk_wav), sampling_rate=16000,
              return_tensors="np").input_features.astype(np.float32)


@pytest.fixture(scope="session")
def jfk_reference(tiny_en_bundle, jfk_logmel):
    import torch
    with torch.inference_mode():
        return tiny_en_bundle.model.get_encoder()(
            torch.from_numpy(jfk_logmel)).last_hidden_state.numpy()


# ----------------------------------------------------------------------------- tiny.en

def test_tiny_en_program_has_the_facts_op_types(tiny_en_export):
    p = load_program(tiny_en_export.fp32)
    assert set(p.op_counts) == FACTS_OP_TYPES
    assert p.op_counts["layer_norm"] == 9 and p.op_counts["conv"] == 2
    assert [v.name for v in p.inputs] == ["logmel_data"] and p.outputs == ("output",)
    assert load_program(tiny_en_export.fp16).op_counts["cast"] == 2


def test_tiny_en_program_matches_the_hf_encoder(tiny_en_export, jfk_logmel, jfk_reference):
    p = load_program(tiny_en_export.fp32)
    m32 = compare(jfk_reference, execute(p, {"logmel_data": jfk_logmel}).outputs["output"])
    m64 = compare(jfk_reference, execute(p, {"logmel_data": jfk_logmel},
                                         compute="float64").outputs["output"])
    # float32: the program is op for op what the eager encoder computes (same CPU kernels),
    # so the output is bit-identical; float64 is the independent-arithmetic check. Its
    # figure is the float32 reference's own rounding, which depends on the host's CPU
    # kernels (docs/facts.md: 121.4 dB on one host, 114.0 dB on an AMD EPYC without
    # AVX-512), hence the wide lower bound; a wrong op costs tens of dB.
    assert m32.snr_db >= 120 and m32.cosine >= 0.9999
    assert 105 <= m64.snr_db < 140 and m64.cosine >= 0.9999


def test_fp16_program_keeps_float16_storage(tiny_en_export, jfk_logmel, jfk_reference):
    p = load_program(tiny_en_export.fp16)
    m = compare(jfk_reference, execute(p, {"logmel_data": jfk_logmel}).outputs["output"])
    assert 40 <= m.snr_db <= 80, m.snr_db


def _pymil_view(path):
    """The same package read by coremltools' own program loader (which copies weights)."""
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load as load_milproto
    from coremltools.converters.mil.mil import types

    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    fn = load_milproto(spec, spec.specificationVersion, model.weights_dir).functions["main"]
    consts, ops = {}, []
    for op in fn.operations:
        out = op.outputs[0]
        if op.op_type == "const":
            consts[out.name] = (np.asarray(out.val), types.builtin_to_string(out.dtype))
        else:
            ins = {k: tuple(v.name for v in (a if isinstance(a, (list, tuple)) else (a,)))
                   for k, a in op.inputs.items()}
            ops.append((op.op_type, ins, tuple((v.name, types.builtin_to_string(v.dtype),
                                               tuple(v.shape)) for v in op.outputs)))
    return consts, ops


@pytest.mark.parametrize("variant", ["fp32", "fp16"])
def test_mapped_weights_equal_what_coremltools_reads(tiny_en_export, variant):
    path = getattr(tiny_en_export, variant)
    prog = load_program(path)
    consts, ops = _pymil_view(path)
    assert set(prog.consts) == set(consts)
    big = 0
    for name, (val, dtype) in consts.items():
        ours = np.asarray(prog.consts[name])
        assert prog.const_dtypes[name] == dtype, name
        assert ours.dtype == val.dtype and ours.shape == val.shape, name
        assert np.array_equal(ours, val), name
        if ours.nbytes > 1 << 16:
            big += 1
            # A view into the mapped weight file, not a copy.
            assert not ours.flags["OWNDATA"], name
    assert big >= 20
    assert [(op.type, dict(op.inputs), tuple((v.name, v.dtype, v.shape) for v in op.outputs))
            for op in prog.ops] == ops


def test_a_corrupt_blob_header_is_refused(tiny_en_export, tmp_path):
    pkg = shutil.copytree(tiny_en_export.fp32, tmp_path / "ggml-model-encoder.mlpackage")
    weights = next(pkg.rglob("weight.bin"))
    data = bytearray(weights.read_bytes())
    assert struct.unpack_from("<I", data, 64)[0] == 0xDEADBEEF
    struct.pack_into("<I", data, 64, 0)
    weights.write_bytes(bytes(data))
    with pytest.raises(MilExecError, match="no blob metadata"):
        load_program(pkg)


def test_an_edited_weight_inside_the_package_changes_the_output(tiny_en_export, tmp_path,
                                                                jfk_logmel, jfk_reference):
    pkg = shutil.copytree(tiny_en_export.fp32, tmp_path / "ggml-model-encoder.mlpackage")
    before = tree_digest(pkg)
    name = edit_weight(pkg, "layers_2_fc2_weight", 1000, 0.5)
    assert tree_digest(pkg) != before
    edited = load_program(pkg)
    original = load_program(tiny_en_export.fp32)
    diff = np.argwhere(edited.consts[name] != original.consts[name])
    assert diff.shape[0] == 1
    m = compare(jfk_reference, execute(edited, {"logmel_data": jfk_logmel}).outputs["output"])
    assert m.snr_db < 100, m.snr_db


def test_residual_taps_follow_the_blocks(tiny_en_export, tiny_en_bundle, jfk_logmel):
    from verifylib.numerics.reference import reference_encode
    p = load_program(tiny_en_export.fp32)
    taps = residual_taps(p)
    assert [t[0] for t in taps] == ["embeddings", "block 0", "block 1", "block 2", "block 3",
                                    "output"]
    run = execute(p, {"logmel_data": jfk_logmel}, compute="float64",
                  taps=[v for _, v in taps[:-1]])
    _, layers, _ = reference_encode(tiny_en_bundle.model.get_encoder(), jfk_logmel)
    ref = dict(layers)
    for label, v in taps[:-1]:
        # The float32 reference's rounding, host-dependent (109.5 dB at block 3 on an AMD
        # EPYC without AVX-512): see test_tiny_en_program_matches_the_hf_encoder.
        assert compare(ref[label], run.taps[v]).snr_db > 100, label
    # Handed over as produced instead of kept: the same values, none retained.
    seen = {}
    streamed = execute(p, {"logmel_data": jfk_logmel}, compute="float64",
                       taps=[v for _, v in taps[:-1]],
                       on_tap=lambda name, val: seen.__setitem__(name, val.copy()))
    assert streamed.taps == {} and list(seen) == [v for _, v in taps[:-1]]
    for _label, v in taps[:-1]:
        assert np.array_equal(seen[v], run.taps[v])


def test_feeds_and_modes_are_checked(tiny_en_export):
    p = load_program(tiny_en_export.fp32)
    with pytest.raises(MilExecError, match="missing feed"):
        execute(p, {})
    with pytest.raises(MilExecError, match="shape"):
        execute(p, {"logmel_data": np.zeros((1, 80, 1500), np.float32)})
    with pytest.raises(ValueError):
        execute(p, {"logmel_data": np.zeros((1, 80, 3000), np.float32)}, compute="float16")
    with pytest.raises(MilExecError, match="unknown tap"):
        execute(p, {"logmel_data": np.zeros((1, 80, 3000), np.float32)}, taps=["nope"])
    with pytest.raises(MilExecError, match="not a saved .mlpackage"):
        load_program(tiny_en_export.root / "missing.mlpackage")


@pytest.mark.parametrize("variant", ["fp32", "fp16"])
def test_tiny_en_reads_back_from_its_compiled_text(tiny_en_export, jfk_logmel, variant,
                                                   tmp_path):
    """The suite's tiny.en package as coremlc would write it (docs/facts.md, "The compiled
    model's model.mil"): the same program, constants and outputs bit for bit."""
    from tests.helpers.compiled_models import compiled_folder, same_program
    from verifylib.numerics.mil_compiled import load_compiled_program

    package = getattr(tiny_en_export, variant)
    folder = compiled_folder(package, tmp_path / "ggml-model-encoder.mlmodelc")
    text_program, source = load_compiled_program(folder)
    package_program = load_program(package)
    same_program(package_program, text_program)
    assert source.opset == "ios15" and source.weight_bin_sha256 is not None
    feeds = {"logmel_data": jfk_logmel}
    a = execute(package_program, feeds).outputs["output"]
    b = execute(text_program, feeds).outputs["output"]
    assert a.tobytes() == b.tobytes()
