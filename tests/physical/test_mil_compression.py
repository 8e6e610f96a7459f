"""Compressed encoders through the executor: our tiny.en fp32 package compressed by
coremltools' own weight compression (``coremltools.optimize.coreml``), executed from the
saved package (the ``constexpr_*`` weights decompressed by the executor), agree in float64
with the same program whose weights coremltools decompressed itself
(``decompress_weights``); and each compressed encoder's SNR against the uncompressed one
is measured and reported (a measurement, not a gate: uniform 4-bit per-tensor LUTs leave
tiny.en's encoder near 0 dB, its weights' outliers stretching the 16 levels). Also one
iOS 18 program with ``scaled_dot_product_attention``.

Palettization is ``uniform`` (``kmeans`` needs scikit-learn, which this suite does not
install). The iOS 16 forms come from the package as exported (iOS 15 opset, which
compression raises to iOS 16); the iOS 18 forms (per-block, 4-bit, grouped LUTs, joint
sparse + palettized / quantized) from the same traced encoder converted with
``minimum_deployment_target=iOS18``.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifylib.numerics.mil_exec import execute, load_program
from verifylib.numerics.parity import compare
from verifylib.runtime.audio import read_wav_16k

IOS16_VARIANTS = {
    "palettize-uniform-4bit": ([("palettize_weights", "pal", dict(mode="uniform", nbits=4))],
                               {"constexpr_lut_to_dense"}),
    "palettize-uniform-6bit": ([("palettize_weights", "pal", dict(mode="uniform", nbits=6))],
                               {"constexpr_lut_to_dense"}),
    "palettize-uniform-8bit": ([("palettize_weights", "pal", dict(mode="uniform", nbits=8))],
                               {"constexpr_lut_to_dense"}),
    "quantize-int8-per-channel": ([("linear_quantize_weights", "quant",
                                    dict(mode="linear_symmetric", dtype="int8"))],
                                  {"constexpr_affine_dequantize"}),
    "quantize-uint8-per-tensor": ([("linear_quantize_weights", "quant",
                                    dict(mode="linear", dtype="uint8",
                                         granularity="per_tensor"))],
                                  {"constexpr_affine_dequantize"}),
    "prune-magnitude-50pct": ([("prune_weights", "prune", dict(target_sparsity=0.5))],
                              {"constexpr_sparse_to_dense"}),
}

IOS18_VARIANTS = {
    "quantize-int4-per-block-32": ([("linear_quantize_weights", "quant",
                                     dict(mode="linear", dtype="int4", granularity="per_block",
                                          block_size=32))],
                                   {"constexpr_blockwise_shift_scale"}),
    "quantize-int8-per-block-64": ([("linear_quantize_weights", "quant",
                                     dict(mode="linear_symmetric", dtype="int8",
                                          granularity="per_block", block_size=64))],
                                   {"constexpr_blockwise_shift_scale"}),
    "palettize-4bit-grouped-16": ([("palettize_weights", "pal",
                                    dict(mode="uniform", nbits=4,
                                         granularity="per_grouped_channel", group_size=16))],
                                  {"constexpr_lut_to_dense"}),
    "prune-then-palettize-4bit": ([("prune_weights", "prune", dict(target_sparsity=0.5)),
                                   ("palettize_weights", "pal", dict(mode="uniform", nbits=4))],
                                  {"constexpr_lut_to_sparse", "constexpr_sparse_to_dense"}),
    "prune-then-quantize-int8": ([("prune_weights", "prune", dict(target_sparsity=0.5)),
                                  ("linear_quantize_weights", "quant",
                                   dict(mode="linear_symmetric", dtype="int8"))],
                                 {"constexpr_sparse_blockwise_shift_scale",
                                  "constexpr_sparse_to_dense"}),
}

_CONFIGS = {"pal": "OpPalettizerConfig", "quant": "OpLinearQuantizerConfig",
            "prune": "OpMagnitudePrunerConfig"}

SNR = {}
"""Variant -> SNR (dB) of its float64 output against the uncompressed program's."""


@pytest.fixture(scope="module")
def jfk_logmel(tiny_en_bundle, jfk_wav):
    fe = tiny_en_bundle.feature_extractor
    return fe(read_wav_16k(jfk_wav), sampling_rate=16000,
              return_tensors="np").input_features.astype(np.float32)


@pytest.fixture(scope="module")
def ios18_package(tiny_en_bundle, tmp_path_factory):
    """tiny.en's encoder through our export, at the iOS 18 opset."""
    import coremltools as ct

    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder
    encoder = tiny_en_bundle.model.get_encoder()
    contract = contract_of(encoder)
    traced, _, _ = trace_encoder(encoder, contract)
    conv = convert_traced(traced, contract, "fp32", minimum_deployment_target=ct.target.iOS18)
    path = tmp_path_factory.mktemp("ios18") / "encoder.mlpackage"
    conv.model.save(str(path))
    return path


@pytest.fixture(scope="module")
def baselines(tiny_en_export, ios18_package, jfk_logmel):
    """The uncompressed programs' float64 outputs (iOS 15 export, iOS 18 export)."""
    out = {}
    for key, path in (("ios16", tiny_en_export.fp32), ("ios18", ios18_package)):
        run = execute(load_program(path), {"logmel_data": jfk_logmel}, compute="float64")
        out[key] = run.outputs["output"]
    # Both exports are the same encoder: same numbers up to float64 rounding.
    assert compare(out["ios16"], out["ios18"]).snr_db > 200
    return out


def _compress(source, steps, tmp_path):
    import coremltools as ct
    import coremltools.optimize.coreml as cto

    model = ct.models.MLModel(str(source), skip_model_load=True)
    for i, (fn, kind, opts) in enumerate(steps):
        config = cto.OptimizationConfig(global_config=getattr(cto, _CONFIGS[kind])(**opts))
        # A second compression applies to the first one's constexpr weights.
        model = getattr(cto, fn)(model, config, **({"joint_compression": True} if i else {}))
    path = tmp_path / "compressed.mlpackage"
    model.save(str(path))
    decompressed = tmp_path / "decompressed.mlpackage"
    cto.decompress_weights(model).save(str(decompressed))
    return path, decompressed


def _weights_size(pkg) -> int:
    return sum(p.stat().st_size for p in pkg.rglob("weight.bin"))


def _check_variant(name, source, steps, expected, baseline, jfk_logmel, tmp_path):
    path, decompressed = _compress(source, steps, tmp_path)
    program = load_program(path)
    types = {op.type for op in program.constexprs.values()}
    assert types == expected, (name, program.op_counts)
    assert not any(op.type.startswith("constexpr_") for op in program.ops)
    assert _weights_size(path) < _weights_size(source)
    feeds = {"logmel_data": jfk_logmel}
    ours = execute(program, feeds, compute="float64").outputs["output"]
    dense = load_program(decompressed)
    assert not dense.constexprs
    theirs = execute(dense, feeds, compute="float64").outputs["output"]
    # Same dense weights, so the very same float64 arithmetic: equal to the last bit.
    np.testing.assert_array_equal(ours, theirs)
    SNR[name] = compare(baseline, ours).snr_db
    print(f"\n{name}: {SNR[name]:.1f} dB vs the uncompressed encoder, "
          f"{_weights_size(path) / 1e6:.1f} MB of weights")
    return SNR[name]


@pytest.mark.parametrize("name", list(IOS16_VARIANTS))
def test_ios16_compression_executes_as_coremltools_decompresses(name, tiny_en_export,
                                                                baselines, jfk_logmel, tmp_path):
    steps, expected = IOS16_VARIANTS[name]
    snr = _check_variant(name, tiny_en_export.fp32, steps, expected, baselines["ios16"],
                         jfk_logmel, tmp_path)
    assert np.isfinite(snr), (name, snr)


@pytest.mark.parametrize("name", list(IOS18_VARIANTS))
def test_ios18_compression_executes_as_coremltools_decompresses(name, ios18_package,
                                                                baselines, jfk_logmel, tmp_path):
    steps, expected = IOS18_VARIANTS[name]
    snr = _check_variant(name, ios18_package, steps, expected, baselines["ios18"], jfk_logmel,
                         tmp_path)
    assert np.isfinite(snr), (name, snr)


def test_more_bits_mean_higher_snr():
    need = ["palettize-uniform-4bit", "palettize-uniform-6bit", "palettize-uniform-8bit"]
    if not all(n in SNR for n in need):
        pytest.skip("runs after the palettization variants")
    assert SNR[need[0]] < SNR[need[1]] < SNR[need[2]], SNR
    print("\nSNR of each compressed tiny.en encoder vs the uncompressed one (float64):")
    for name, snr in SNR.items():
        print(f"  {name:32s} {snr:6.1f} dB")


def test_an_ios18_attention_program_executes(tmp_path):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(7)
    wq = rng.normal(size=(8, 8)).astype(np.float32) / 3
    mask = rng.normal(size=(5, 5)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 5, 8)),
                             mb.TensorSpec(shape=(5, 5), dtype=types.bool)],
                opset_version=ct.target.iOS18)
    def prog(x, keep):
        q = mb.linear(x=x, weight=wq)
        a = mb.scaled_dot_product_attention(query=q, key=x, value=x, attn_mask=mask)
        b = mb.scaled_dot_product_attention(query=x, key=q, value=q, attn_mask=keep)
        return mb.add(x=a, y=b)

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32, skip_model_load=True)
    path = tmp_path / "sdpa.mlpackage"
    model.save(str(path))
    program = load_program(path)
    assert program.op_counts.get("scaled_dot_product_attention") == 2, program.op_counts
    names = [v.name for v in program.inputs]
    x = rng.normal(size=(1, 2, 5, 8)).astype(np.float32)
    keep = rng.uniform(size=(5, 5)) > 0.3
    keep[:, 0] = True  # every row attends somewhere
    (out,) = execute(program, {names[0]: x, names[1]: keep},
                     compute="float64").outputs.values()

    def attend(q, k, v, m):
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) + m
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v
    x64 = x.astype(np.float64)
    q64 = x64 @ wq.astype(np.float64).T
    want = attend(q64, x64, x64, mask) + attend(x64, q64, q64, np.where(keep, 0.0, -np.inf))
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
