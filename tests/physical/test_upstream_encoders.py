"""whisper.cpp's own Core ML encoders of the default model, as upstream's scripts make them
(tests/helpers/upstream.py), read and executed by verifylib on Linux.

Physical: the pinned tree's ``convert-whisper-to-coreml.py`` (plain and ``--optimize-ane``)
and ``convert-h5-to-coreml.py`` run for real, with the pinned openai-whisper and
ane_transformers sdists, on tiny.en; the packages are executed op by op in float32 and
float64 and compared with the Hugging Face encoder on jfk.wav's log-mel, and attributed op
by op with the openai-whisper name mapping.

Measured on 2 cores (coremltools 9.0, torch 2.13), jfk.wav:

======  =================  =================  =================  ==============
path    float32 vs HF      float64 vs HF      float32 vs float64 ops mapped
======  =================  =================  =================  ==============
plain   57.98 dB           58.45 dB           59.61 dB           44 of 105
ane     58.48 dB           58.58 dB           60.24 dB           40 of 147
h5      57.98 dB           58.45 dB           59.61 dB           44 of 105
======  =================  =================  =================  ==============

Both programs are fp16 (v1.8.5's converter leaves coremltools' default precision), so
about 58 dB is float16 storage of every activation, not a conversion defect: the same
encoder exported by verifylib in fp32 reaches about 120 dB.
"""

from __future__ import annotations

import pytest

from tests.helpers import ROOT
from tests.helpers.upstream import PACKAGE, SDISTS
from verifylib.cli import main as cli
from verifylib.evidence.parity.rules import attribution_problems
from verifylib.numerics import attribution, drift
from verifylib.numerics.mil_exec import execute, load_program
from verifylib.numerics.parity import compare

PARAMS = ROOT / "parameters" / "tiny-en.yaml"

PLAIN_OPS = {"const": 161, "linear": 24, "transpose": 17, "reshape": 16, "add": 9,
             "layer_norm": 9, "mul": 8, "matmul": 8, "gelu": 6, "softmax": 4, "conv": 2,
             "cast": 2}
"""The plain path's op histogram (docs: FACTS, "Third-party artifacts")."""
ANE_OPS = {"const": 310, "einsum": 48, "conv": 26, "softmax": 24, "split": 12, "add": 9,
           "layer_norm": 9, "gelu": 6, "transpose": 5, "concat": 4, "cast": 2,
           "expand_dims": 1, "squeeze": 1}
"""``--optimize-ane``'s: the linears are 1x1 2-D convs, the attention per-head einsums."""


@pytest.fixture(scope="module")
def reference(tiny_en_info, jfk_wav):
    """The HF encoder, jfk.wav's log-mel and the encoder's output on it."""
    import torch

    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.hf import load_hf_encoder
    from verifylib.numerics.reference import fixture_logmel
    from verifylib.runtime.audio import read_wav_16k

    encoder, fe = load_hf_encoder(tiny_en_info.hf_dir)
    mel = fixture_logmel(fe, read_wav_16k(jfk_wav), contract_of(encoder))
    with torch.inference_mode():
        out = encoder(torch.from_numpy(mel)).last_hidden_state.numpy()
    return encoder, mel, out


@pytest.fixture(scope="module")
def programs(upstream_encoders):
    """Each upstream package's ML program, read by verifylib's loader."""
    return {p: load_program(path) for p, path in upstream_encoders.paths.items()}


def test_upstream_packages_are_made_by_upstream_code_from_the_pinned_inputs(
        upstream_encoders, v185_pin, v185_source):
    ue = upstream_encoders
    assert set(ue.paths) == {"plain", "ane", "h5"}, ue.notes
    assert ue.tree_id == v185_pin.tree
    assert set(ue.sdists.sha256) == {f"{n}=={v}" for n, v in SDISTS.items()}
    for path, pkg in ue.paths.items():
        made = ue.made[path]
        assert pkg.name == PACKAGE and pkg.is_dir()
        assert made["inputs"]["tree"] == v185_pin.tree
        assert made["inputs"]["sdists"] == ue.sdists.sha256
        # The child imported openai-whisper from the pinned sdist and ran the tree's script.
        assert made["child"]["modules"]["whisper"].startswith(
            str(ue.sdists.paths["openai-whisper"]))
        assert made["child"]["modules"]["converter"] == \
            str(v185_source.path / "models" / "convert-whisper-to-coreml.py")
        assert made["child"]["dims"]["n_audio_layer"] == 4
    # The conversions wrote nothing into the cached source tree (no __pycache__, no .pt).
    from verifylib.whispercpp import source
    assert source.git_tree_id(v185_source.path) == v185_pin.tree


def test_op_histograms_are_upstreams(programs):
    assert programs["plain"].op_counts == PLAIN_OPS
    assert programs["ane"].op_counts == ANE_OPS
    assert programs["h5"].op_counts == PLAIN_OPS


def test_the_h5_script_gives_the_plain_paths_weights(upstream_encoders):
    """convert-h5-to-coreml.py renames HF tensors its own way; the plain path uses ours
    (tests.helpers.upstream.openai_state_names). Same weights, byte for byte."""
    from verifylib.canonical import sha256_file

    blobs = {p: sha256_file(upstream_encoders.paths[p] / "Data" / "com.apple.CoreML" /
                            "weights" / "weight.bin") for p in ("plain", "h5")}
    assert blobs["plain"] == blobs["h5"]


@pytest.mark.parametrize("path", ["plain", "ane"])
def test_upstream_programs_are_fp16(programs, path):
    prog = programs[path]
    (inp,) = prog.inputs
    assert (inp.name, inp.dtype, inp.shape) == ("logmel_data", "fp32", (1, 80, 3000))
    first, last = prog.ops[0], prog.ops[-1]
    assert first.type == "cast" and first.inputs["x"] == ("logmel_data",)
    assert first.outputs[0].dtype == "fp16"
    assert last.type == "cast" and last.outputs[0].name == "output"
    assert last.outputs[0].dtype == "fp32"
    inner = {v.dtype for op in prog.ops[1:-1] for v in op.outputs}
    assert inner == {"fp16"}
    weights = {prog.const_dtypes[n] for op in prog.ops if op.type in ("conv", "linear")
               for n in op.inputs["weight"]}
    assert weights == {"fp16"}


@pytest.mark.parametrize("path", ["plain", "ane", "h5"])
def test_upstream_programs_match_the_hf_encoder_within_fp16(programs, reference, path):
    _, mel, ref = reference
    out = {c: execute(programs[path], {"logmel_data": mel}, compute=c).outputs["output"]
           for c in ("float32", "float64")}
    for c, o in out.items():
        m = compare(ref, o)
        # Measured: plain/h5 57.98 (float32) and 58.45 dB (float64); ane 58.48 and 58.58.
        # float16 activations bound it near 58 dB; 50-70 is the plausible fp16 range
        # (an fp32 conversion gives about 120 dB, a broken one far below 50).
        assert 50.0 < m.snr_db < 70.0, (path, c, m.snr_db)
        assert m.cosine > 0.99999, (path, c, m.cosine)
    # The executor's own arithmetic: measured 59.61 dB (plain) and 60.24 dB (ane).
    assert 55.0 < compare(out["float64"], out["float32"]).snr_db < 70.0


def test_plain_path_attribution_maps_openai_modules_and_says_what_it_did_not(programs,
                                                                             reference):
    encoder, mel, _ = reference
    prog = programs["plain"]
    att = drift.attribute(prog, encoder, mel, fixture="jfk")
    assert check_ok(att)
    # Measured: 44 of 105 (every linear and conv, identified by value; the layer norms,
    # ln_post and the positional add by their openai names; the block outputs; the fc1
    # gelus). Reshapes, transposes, the attention's muls/matmuls/softmax, the conv gelus
    # and the casts have no HF module.
    assert (att.mapped, att.executed) == (44, 105)
    mapped = {p["module"] for p in att.points}    # out_proj's value is self_attn's too
    for k in range(4):
        for leaf in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "self_attn.out_proj", "self_attn", "self_attn_layer_norm",
                     "final_layer_norm", "fc1", "activation_fn", "fc2"):
            assert f"layers.{k}.{leaf}" in mapped
        assert f"layers.{k}" in mapped
    assert {"conv1", "conv2", drift.EMBEDDINGS, "layer_norm"} <= mapped
    by_name = {o.name: o for o in att.ops}
    ln = next(op for op in prog.ops if op.type == "layer_norm")
    assert ln.inputs["gamma"] == ("blocks_0_attn_ln_weight_to_fp16",)   # an openai name
    assert by_name[ln.outputs[0].name].module == "layers.0.self_attn_layer_norm"
    # Every compared value is fp16 arithmetic against HF's float32: 50-75 dB, never exact.
    assert all(45 < o.snr_db < 80 for o in att.ops if o.module)
    assert attribution.mapping_sentence(att) == ("44 of 105 ops mapped to a reference module; "
                                           "conversion drift was not attributed for the "
                                           "other 61")


def test_drift_cli_on_upstreams_plain_package_prints_the_honest_count(upstream_encoders,
                                                                      tiny_en_info, capsys):
    code = cli.main(["drift", str(upstream_encoders.paths["plain"]), "--model", str(PARAMS),
                     "--top", "3"])
    printed = capsys.readouterr().out
    assert code == 0
    assert ("44 of 105 ops mapped to a reference module; conversion drift was not "
            "attributed for the other 61") in printed
    assert "no op loses anything" not in printed


def test_ane_path_attribution_maps_its_convs_and_leaves_the_folded_query(programs,
                                                                         reference):
    encoder, mel, _ = reference
    prog = programs["ane"]
    att = drift.attribute(prog, encoder, mel, fixture="jfk")
    assert check_ok(att)
    # Measured: 40 of 147. Mapped: conv1, conv2, the key/value/out/mlp 1x1 convs (by their
    # openai names), the layer norms (gamma by value; ANE's LayerNorm stores bias/weight),
    # the block outputs, the embeddings (the expand_dims opening block 0), the fc1 gelus;
    # compared in HF's layout. The query conv's weight is folded with the 1/sqrt(d) scale,
    # so it is no HF value and stays unmapped, as do the einsums, splits and softmaxes.
    assert (att.mapped, att.executed) == (40, 147)
    convs = [(op, o) for op, o in zip(prog.ops, att.ops) if op.type == "conv"]
    assert sum(o.module is not None for _, o in convs) == 22
    unmapped = [op.inputs["weight"][0] for op, o in convs if o.module is None]
    assert len(unmapped) == 4 and all(not w.startswith("blocks_") for w in unmapped)
    mapped = {p["module"] for p in att.points}    # out_proj's value is self_attn's too
    for k in range(4):
        for leaf in ("self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                     "self_attn", "fc1", "activation_fn", "fc2", "self_attn_layer_norm",
                     "final_layer_norm"):
            assert f"layers.{k}.{leaf}" in mapped
        assert f"layers.{k}.self_attn.q_proj" not in mapped
    assert {"conv1", "conv2", drift.EMBEDDINGS, "layer_norm"} <= mapped
    assert all(45 < o.snr_db < 80 for o in att.ops if o.module)
    # A split is measured on all its outputs: no einsum reading head 1..5 starts exact.
    assert all(o.precision_delta_snr_db > -30 for o in att.ops if o.type == "einsum")
    assert "of 147 ops mapped" in attribution.mapping_sentence(att)


def check_ok(att) -> bool:
    """The attribution's document re-derives without a problem (as ``verify`` would)."""
    from verifylib import canonical

    problems = attribution_problems(canonical.loads(canonical.dumps(att.as_dict())))
    assert problems == []
    return True


@pytest.mark.parametrize("path", ["plain", "ane", "h5"])
def test_upstream_programs_read_back_from_their_compiled_text(upstream_encoders, programs,
                                                              path, tmp_path):
    """Upstream's encoders as coremlc would write them (docs/facts.md, "The compiled
    model's model.mil"), the ANE path's split, concat, einsum and squeeze included: the
    same program, every weight bit for bit, and the same output bit for bit."""
    import numpy as np

    from tests.helpers.compiled_models import compiled_folder, same_program
    from verifylib.numerics.mil_compiled import load_compiled_program

    folder = compiled_folder(upstream_encoders.paths[path], tmp_path / "encoder.mlmodelc")
    text_program, _ = load_compiled_program(folder)
    same_program(programs[path], text_program)
    (inp,) = text_program.inputs
    x = np.random.default_rng(7).standard_normal(inp.shape).astype(np.float32)
    a = execute(programs[path], {inp.name: x}).outputs
    b = execute(text_program, {inp.name: x}).outputs
    assert all(a[k].tobytes() == b[k].tobytes() for k in a)
