"""``verifylib drift`` localising a planted single-layer conversion defect, and the mapping of
a clean conversion (physical: the tiny.en encoder is edited, traced and converted for real)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from tests.helpers import ROOT
from verifylib import canonical
from verifylib.cli import main as cli
from verifylib.evidence.parity.rules import attribution_problems
from verifylib.numerics.program_map import EMBEDDINGS, map_program

PARAMS = ROOT / "parameters" / "tiny-en.yaml"
DEFECT_LAYER = 2


@pytest.fixture(scope="module")
def tiny_packages(tiny_en_bundle, tmp_path_factory):
    """tiny.en converted as is, and with layer 2's fc1 weight scaled by 1.01 (fp32)."""
    import torch

    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder

    root = tmp_path_factory.mktemp("drift")
    out = {}
    for label in ("clean", "defect"):
        encoder = copy.deepcopy(tiny_en_bundle.model.get_encoder())
        if label == "defect":
            with torch.no_grad():
                encoder.layers[DEFECT_LAYER].fc1.weight.mul_(1.01)
        contract = contract_of(encoder)
        traced, _, _ = trace_encoder(encoder, contract)
        conv = convert_traced(traced, contract, "fp32")
        path = root / f"{label}.mlpackage"
        conv.model.save(str(path))
        out[label] = path
    return out


def test_the_clean_conversion_maps_every_module_point(tiny_packages, tiny_en_bundle):
    from verifylib.numerics.mil_exec import load_program

    encoder = tiny_en_bundle.model.get_encoder()
    prog = load_program(tiny_packages["clean"])
    mapping = map_program(prog, (n for n, _ in encoder.named_modules()))
    points = {p for m in mapping for p in m.points}
    n = len(encoder.layers)
    for k in range(n):
        for leaf in ("self_attn", "self_attn_layer_norm", "self_attn.q_proj",
                     "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                     "final_layer_norm", "fc1", "activation_fn", "fc2"):
            assert f"layers.{k}.{leaf}" in points
        assert f"layers.{k}" in points
    assert {EMBEDDINGS, "conv1", "conv2", "layer_norm"} <= points
    assert len(mapping) == len(prog.ops)
    unmapped = [(op.type, m.scope) for op, m in zip(prog.ops, mapping) if m.module is None]
    assert {t for t, _ in unmapped} >= {"softmax", "matmul", "reshape", "transpose"}
    assert all(s and s != "(program)" for _, s in unmapped)


def test_merged_constants_name_no_module_and_do_not_stall_the_stream(tiny_en_bundle,
                                                                     tmp_path):
    """Layer norms reset to gamma 1, beta 0 (as freshly initialized) are merged by
    coremltools into one constant; no op reading it is given a module, and attribution
    neither compares them with the wrong HF output nor buffers the HF forward pass."""
    import torch

    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder
    from verifylib.numerics import drift
    from verifylib.numerics.mil_exec import load_program

    encoder = copy.deepcopy(tiny_en_bundle.model.get_encoder())
    with torch.no_grad():
        for name, mod in encoder.named_modules():
            if name.endswith("layer_norm"):
                mod.weight.fill_(1.0)
                mod.bias.zero_()
    contract = contract_of(encoder)
    traced, _, _ = trace_encoder(encoder, contract)
    path = tmp_path / "merged.mlpackage"
    convert_traced(traced, contract, "fp32").model.save(str(path))
    prog = load_program(path)
    norms = [op for op in prog.ops if op.type == "layer_norm"]
    gammas = {op.inputs["gamma"][0] for op in norms}
    assert len(norms) == 9 and len(gammas) == 1, "coremltools no longer merges them"
    mapping = map_program(prog, (n for n, _ in encoder.named_modules()))
    for op, m in zip(prog.ops, mapping):
        if op.type == "layer_norm":
            assert m.module is None and m.weight_module is None
    assert any(m.module == "layers.2.fc1" for m in mapping)

    most = [0]
    real_get = drift._HfStream.get

    def watched(self, name):
        out = real_get(self, name)
        most[0] = max(most[0], len(self._buf))
        return out

    mel = np.random.default_rng(3).uniform(-1, 1, tuple(prog.inputs[0].shape)).astype(
        np.float32)
    drift._HfStream.get = watched
    try:
        att = drift.attribute(prog, encoder, mel)
    finally:
        drift._HfStream.get = real_get
    assert most[0] <= 4, f"{most[0]} HF outputs were buffered at once"
    assert att.op(next(op.outputs[0].name for op, m in zip(prog.ops, mapping)
                       if m.module == "layers.2.fc1")).snr_db > 100
    assert all(o.module is None for o in att.ops if o.type == "layer_norm")


def test_drift_cli_localises_a_planted_layer_defect(tiny_packages, tiny_en_info, tmp_path,
                                                   capsys):
    out = tmp_path / "drift.json"
    code = cli.main(["drift", str(tiny_packages["defect"]), "--model", str(PARAMS),
                     "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out.read_text())
    assert attribution_problems(canonical.loads(out.read_bytes())) == []
    first = doc["top"][0]
    assert first["module"].startswith(f"layers.{DEFECT_LAYER}.")
    assert first["module"] == f"layers.{DEFECT_LAYER}.fc1"
    assert float(first["delta_snr_db"]) < -60
    assert {"name", "type", "module", "snr_db", "delta_snr_db", "cosine"} <= set(first)
    # Everything before the defect is the HF encoder's exact computation.
    before = [o for o in doc["ops"] if o["index"] < first["index"] and o["module"]]
    assert before and all(o["snr_db"] == "inf" for o in before)
    assert f"layers.{DEFECT_LAYER}.fc1" in printed
    regions = [m["module"] for m in doc["modules"]]
    worst = min(doc["modules"], key=lambda m: float(m["delta_snr_db"]))
    assert worst["module"] == f"layers.{DEFECT_LAYER}" and regions.index("layers.0") < \
        regions.index(f"layers.{DEFECT_LAYER}")


def test_drift_cli_clean_package_has_no_conversion_drift(tiny_packages, tiny_en_info, capsys):
    code = cli.main(["drift", str(tiny_packages["clean"]), "--model", str(PARAMS),
                     "--compute", "float64", "--top", "3"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "precision drift" in printed and "conversion drift" in printed


@pytest.mark.parametrize("argv, needle", [
    (["drift", "/nonexistent.mlpackage", "--model", str(PARAMS)], "no such .mlpackage"),
    (["drift", "PKG", "--model", str(PARAMS), "--fixture", "nope"], "no fixture 'nope'"),
    (["drift", "PKG", "--model", "/nonexistent.yaml"], "nonexistent.yaml"),
])
def test_drift_cli_bad_input_exits_2(argv, needle, tiny_packages, capsys):
    argv = [str(tiny_packages["clean"]) if a == "PKG" else a for a in argv]
    assert cli.main(argv) == 2
    assert needle in capsys.readouterr().err


def test_drift_cli_refuses_a_package_of_another_shape(tiny_en_info, tmp_path, capsys):
    """A package whose input is not the model's log-mel shape: exit 2, nothing written."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 80, 100))])
    def prog(logmel_data):
        return mb.mul(x=logmel_data, y=np.float32(2.0), name="output")

    model = ct.convert(prog, convert_to="mlprogram", skip_model_load=True)
    pkg = tmp_path / "other.mlpackage"
    model.save(str(pkg))
    out = tmp_path / "never.json"
    assert cli.main(["drift", str(pkg), "--model", str(PARAMS), "--json", str(out)]) == 2
    assert "shape" in capsys.readouterr().err
    assert not out.exists()


def test_the_executions_an_attribution_hands_over_are_execute_s(tiny_packages, tiny_en_bundle):
    """Stage 04 takes the fixture's float32 and float64 measurements from the attribution's
    two executions (drift.ExecutionWatch): they must be bit for bit what execute() gives,
    outputs and taps, for a program with no float16 value."""
    from verifylib.numerics.drift import ExecutionWatch, attribute
    from verifylib.numerics.mil_exec import execute, load_program
    from verifylib.numerics.program_map import residual_taps

    encoder = tiny_en_bundle.model.get_encoder()
    prog = load_program(tiny_packages["clean"])
    assert all(v.dtype != "fp16" for v in prog.value_types().values())
    (inp,) = prog.inputs
    mel = np.random.default_rng(7).uniform(-1, 1, tuple(inp.shape)).astype(np.float32)
    names = [v for _, v in residual_taps(prog)[:-1]]
    got: dict = {"float32": {}, "float64": {}}
    watch = ExecutionWatch(
        taps=frozenset(names),
        on_candidate=lambda n, a: got["float32"].__setitem__(n, a.copy()),
        on_reference=lambda n, a: got["float64"].__setitem__(n, a.copy()))
    attribute(prog, encoder, mel, compute="float32", watch=watch)
    for mode, watched in (("float32", watch.candidate), ("float64", watch.reference)):
        run = execute(prog, {inp.name: mel}, compute=mode, taps=names)
        assert watched.compute == mode and watched.seconds > 0
        assert watched.outputs.keys() == run.outputs.keys()
        for name, value in run.outputs.items():
            assert np.array_equal(watched.outputs[name], value), (mode, name)
        assert got[mode].keys() == run.taps.keys() == set(names)
        for name, value in run.taps.items():
            assert np.array_equal(got[mode][name], value), (mode, name)
