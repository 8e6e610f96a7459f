"""Stage 04's per-layer taps read through the candidate's layout, never raising.

Tiny pre-norm programs built with coremltools' Builder, in the reference's layout, in
upstream's ANE layout ``(B, C, 1, S)``, and with a block whose stream is in no known layout.
The reference's residual stream is the program's own, executed once and laid out as
``(B, S, C)``: a tap read through the right layout is then exact (+inf dB), a wrong
reading would not be.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from tests.helpers.mil_programs import save_program
from verifylib.numerics.layouts import LAYOUTS, relayout_for, unmapped_record
from verifylib.numerics.mil_exec import execute, load_program
from verifylib.numerics.program_map import residual_taps

pytestmark = pytest.mark.unit

RNG = np.random.default_rng(11)
W = [RNG.normal(scale=0.3, size=(8, 8)).astype(np.float32) for _ in range(4)]
T, C = 6, 8


def _program(tmp_path, build, shape, name):
    return save_program(tmp_path, build, shape, name)


def _plain(mb, x):
    s = mb.add(x=x, y=np.full((1, T, C), 0.1, np.float32))  # a positional embedding
    for i in range(2):
        s = mb.add(x=s, y=mb.linear(x=mb.layer_norm(x=s, axes=[-1]), weight=W[0]))
        s = mb.add(x=s, y=mb.linear(x=mb.layer_norm(x=s, axes=[-1]), weight=W[1]),
                   name=f"block_{i}")
    return mb.layer_norm(x=s, axes=[-1], name="out")


def _ane(mb, x):
    s = mb.add(x=x, y=np.full((1, C, 1, T), 0.1, np.float32))  # (1, C, 1, T), as upstream's
    for i in range(2):
        for k in range(2):
            h = mb.conv(x=mb.layer_norm(x=s, axes=[1]), weight=W[k].reshape(C, C, 1, 1))
            s = mb.add(x=s, y=h, name=f"b{i}_{k}")
    y = mb.layer_norm(x=s, axes=[1])
    return mb.transpose(x=mb.squeeze(x=y, axes=[2]), perm=[0, 2, 1], name="out")


def _odd_block(mb, x):
    # Block 1's stream is (2, 3, 8): the same 48 numbers in no layout the suite knows.
    s = mb.add(x=x, y=np.full((1, T, C), 0.1, np.float32))
    s = mb.add(x=s, y=mb.linear(x=mb.layer_norm(x=s, axes=[-1]), weight=W[0]))
    s = mb.add(x=s, y=mb.linear(x=mb.layer_norm(x=s, axes=[-1]), weight=W[1]), name="block_0")
    h = mb.linear(x=mb.layer_norm(x=s, axes=[-1]), weight=W[2])
    r = mb.add(x=mb.reshape(x=s, shape=(2, 3, C)), y=mb.reshape(x=h, shape=(2, 3, C)))
    r = mb.add(x=r, y=mb.layer_norm(x=r, axes=[-1]), name="block_1")
    return mb.reshape(x=mb.layer_norm(x=r, axes=[-1]), shape=(1, T, C), name="out")


def _reference(path, mel, to_bsc):
    """A ReferenceRun whose residual stream is the program's own, laid out (1, T, C)."""
    program = load_program(path)
    taps = residual_taps(program)
    got = execute(program, {"x": mel}, compute="float64",
                  taps=[v for _, v in taps[:-1]]).taps
    layers = [(label, to_bsc(np.asarray(got[v]))) for label, v in taps[:-1]]
    out = np.asarray(execute(program, {"x": mel}, compute="float64")
                     .outputs[program.outputs[0]])
    layers.append(("output", out))
    contract = SimpleNamespace(input_name="x", output_name=program.outputs[0])
    return SimpleNamespace(contract=contract, inputs={"fixture": mel, "random": mel},
                           input_records={"fixture": {"id": "clip"}},
                           outputs={"fixture": out, "random": out},
                           layers={"fixture": layers}, speech_frames=T, encoder=None)


def _measure(path, ref):
    from verifylib.stages.parity import measure_program

    _, drift, arrays, _ = measure_program(path, ref)
    return drift, arrays


def test_relayout_reads_every_known_layout_and_guesses_none():
    v = np.arange(T * C, dtype=np.float32).reshape(1, T, C)
    cases = {"bsc": v, "bc1s": v.transpose(0, 2, 1)[:, :, None, :],
             "bcs": v.transpose(0, 2, 1), "sc": v[0]}
    for name, value in cases.items():
        layout = relayout_for(value.shape, (1, T, C))
        assert layout is not None and layout.name == name
        np.testing.assert_array_equal(layout.apply(value), v)
        np.testing.assert_array_equal(relayout_for(value.shape, (T, C)).apply(value)[0], v[0])
    square = np.zeros((1, 4, 4))
    assert relayout_for(square.shape, (1, 4, 4)).name == "bsc"  # never transposed
    for shape in ((2, 3, C), (1, C, 2, T), (1, T * C), (2, T, C), (1, 1, T, C)):
        assert relayout_for(shape, (1, T, C)) is None, shape
    assert relayout_for((1, T, C), (1, 1, T, C)) is None
    rec = unmapped_record("block 1", "v", (2, 3, C), (1, T, C))
    assert rec == {"label": "block 1", "value": "v", "shape": [2, 3, C],
                   "reference_shape": [1, T, C],
                   "layouts_tried": [layout.name for layout in LAYOUTS]}


def test_relayout_reads_torch_tensors_too():
    import torch

    v = torch.arange(float(T * C)).reshape(1, T, C)
    ane = v.transpose(1, 2).unsqueeze(2)
    assert torch.equal(relayout_for(tuple(ane.shape), (1, T, C)).apply(ane), v)


def test_plain_taps_are_exact_and_named_bsc(tmp_path):
    mel = RNG.normal(size=(1, T, C)).astype(np.float32)
    path = _program(tmp_path, _plain, (1, T, C), "plain")
    drift, arrays = _measure(path, _reference(path, mel, lambda a: a))
    rows = drift["layers"]["float64"]
    assert [r["label"] for r in rows] == ["embeddings", "block 0", "block 1", "output"]
    assert all(r["snr_db"] == math.inf for r in rows), rows
    assert drift["tap_layouts"] == {"block 0": "bsc", "block 1": "bsc",
                                    "embeddings": "bsc", "output": "bsc"}
    assert drift["unmapped_taps"] == []
    assert arrays["layer_frame_snr_db"].shape == (4, T)


def test_ane_taps_are_read_through_the_ane_layout(tmp_path):
    """The defect: an ANE program's (B, C, 1, S) taps against the reference's (B, S, C)."""
    mel = RNG.normal(size=(1, C, 1, T)).astype(np.float32)
    path = _program(tmp_path, _ane, (1, C, 1, T), "ane")
    ref = _reference(path, mel, lambda a: a[:, :, 0, :].transpose(0, 2, 1))
    drift, arrays = _measure(path, ref)
    for mode in ("float32", "float64"):
        rows = drift["layers"][mode]
        assert [r["label"] for r in rows] == ["embeddings", "block 0", "block 1", "output"]
        assert not any(r.get("unmapped") for r in rows)
    assert all(r["snr_db"] == math.inf for r in drift["layers"]["float64"])
    assert all(r["snr_db"] > 100 for r in drift["layers"]["float32"])
    assert drift["tap_layouts"] == {"block 0": "bc1s", "block 1": "bc1s",
                                    "embeddings": "bc1s", "output": "bsc"}
    assert drift["unmapped_taps"] == []
    frames = arrays["layer_frame_snr_db"]
    assert frames.shape == (4, T) and not np.isnan(frames).any()


def test_a_tap_in_no_known_layout_is_recorded_and_shown_not_raised(tmp_path):
    mel = RNG.normal(size=(1, T, C)).astype(np.float32)
    path = _program(tmp_path, _odd_block, (1, T, C), "odd")
    ref = _reference(path, mel, lambda a: a.reshape(1, T, C))
    drift, arrays = _measure(path, ref)
    (u,) = drift["unmapped_taps"]
    assert (u["label"], u["shape"], u["reference_shape"]) == ("block 1", [2, 3, C], [1, T, C])
    rows = {r["label"]: r for r in drift["layers"]["float32"]}
    assert rows["block 1"]["unmapped"] is True and math.isnan(rows["block 1"]["snr_db"])
    assert rows["block 0"]["snr_db"] > 100 and "unmapped" not in rows["block 0"]
    assert "block 1" not in drift["tap_layouts"]
    frames = arrays["layer_frame_snr_db"]
    assert frames.shape == (4, T) and np.isnan(frames[2]).all() and not np.isnan(frames[1]).any()


def test_unmapped_taps_reach_the_typed_result_and_the_page(tmp_path):
    from verifylib.canonical import dumps, loads
    from verifylib.evidence.parity.result import Drift
    from verifylib.views import render

    mel = RNG.normal(size=(1, T, C)).astype(np.float32)
    path = _program(tmp_path, _odd_block, (1, T, C), "odd")
    drift, _ = _measure(path, _reference(path, mel, lambda a: a.reshape(1, T, C)))
    typed = Drift.from_evidence(loads(dumps(drift)))
    assert typed.unmapped_taps[0]["shape"] == [2, 3, C]
    assert typed.tap_layouts["block 0"] == "bsc"
    cand = SimpleNamespace(drift=typed, status=SimpleNamespace(value="PASS"), detail="d",
                           measurements=(), variant="fp32", kind="program")
    page = render("parity.html.j2", candidates={"parity.program": cand}, runtime=[],
                       policies=[], layouts={x.name: x.description for x in LAYOUTS},
                       reference={}, inputs={}, reference_seconds={})
    assert "in no known layout" in page and "2 × 3 × 8" in page and "1 × 6 × 8" in page
    assert "read as the reference" in page and "own order" in page
