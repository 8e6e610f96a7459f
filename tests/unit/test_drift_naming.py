"""Op-to-module mapping for programs traced from openai-whisper's modules (whisper.cpp's own
converter), by name, by value and in the ANE layout; and the coverage sentences, which never
claim anything about ops that were not compared. Programs are synthesized here (no
coremltools, no subprocess); tests/physical/test_upstream_encoders.py maps upstream's real
packages."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verifylib.cli.drift import format_top
from verifylib.evidence.parity.rules import attribution_problems
from verifylib.numerics import drift
from verifylib.numerics.attribution import (Attribution, OpDrift, empty_ranking_sentence,
                                            mapping_sentence)
from verifylib.numerics.drift import reference_layout
from verifylib.numerics.program_map import (EMBEDDINGS, map_program, module_keys,
                                            openai_module_path, weight_module)
from verifylib.numerics.mil_exec import Op, Program, Value

LEAVES = ("self_attn", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
          "self_attn.out_proj", "self_attn_layer_norm", "activation_fn", "fc1", "fc2",
          "final_layer_norm")


def hf_paths(n_layers: int = 2) -> list[str]:
    """The module paths of an HF WhisperEncoder with ``n_layers`` blocks."""
    paths = ["", "conv1", "conv2", "embed_positions", "layers", "layer_norm"]
    for k in range(n_layers):
        paths += [f"layers.{k}"] + [f"layers.{k}.{leaf}" for leaf in LEAVES]
    return paths


def test_openai_names_alias_the_hf_modules():
    table = {"conv1": "conv1", "conv2": "conv2", "layer_norm": "ln_post",
             "embed_positions": "positional_embedding", "layers.3": "blocks.3",
             "layers.0.self_attn": "blocks.0.attn",
             "layers.0.self_attn.q_proj": "blocks.0.attn.query",
             "layers.0.self_attn.k_proj": "blocks.0.attn.key",
             "layers.0.self_attn.v_proj": "blocks.0.attn.value",
             "layers.0.self_attn.out_proj": "blocks.0.attn.out",
             "layers.1.self_attn_layer_norm": "blocks.1.attn_ln",
             "layers.1.fc1": "blocks.1.mlp.0", "layers.1.activation_fn": "blocks.1.mlp.1",
             "layers.1.fc2": "blocks.1.mlp.2", "layers.1.final_layer_norm": "blocks.1.mlp_ln"}
    for hf, oa in table.items():
        assert openai_module_path(hf) == oa
    assert openai_module_path("layers") is None
    assert openai_module_path("layers.0.dropout") is None


def test_openai_constant_names_map_to_the_same_hf_modules():
    keys = module_keys(hf_paths(11))
    cases = {
        "blocks_0_attn_query_weight_to_fp16": "layers.0.self_attn.q_proj",
        "blocks_0_attn_key_weight": "layers.0.self_attn.k_proj",
        "blocks_2_attn_out_bias_to_fp16": "layers.2.self_attn.out_proj",
        "blocks_1_attn_ln_weight_to_fp16": "layers.1.self_attn_layer_norm",
        "blocks_1_mlp_ln_bias_to_fp16": "layers.1.final_layer_norm",
        "blocks_3_mlp_0_weight_to_fp16": "layers.3.fc1",
        "blocks_10_mlp_2_weight_to_fp16": "layers.10.fc2",   # not layers.1's
        "ln_post_weight_to_fp16": "layer_norm",
        "conv2_bias": "conv2",
        "positional_embedding_to_fp16": "embed_positions",
        "encoder_layers_0_fc1_weight": "layers.0.fc1",       # HF names still map
    }
    for const, module in cases.items():
        assert weight_module(const, keys) == module, const
    for anonymous in ("const_4_to_fp16", "var_119_weight_0_to_fp16", "input_3_gamma_0_to_fp16",
                      "linear_1_bias_0_to_fp16", "var_51_to_fp16"):
        assert weight_module(anonymous, keys) is None, anonymous
    # A bare positional tensor means nothing to an encoder without embed_positions.
    assert weight_module("positional_embedding", module_keys(["conv1"])) is None


class _Builder:
    """A MIL-like program assembled op by op (fp16 values, (1, T, C) layout by default)."""

    def __init__(self):
        self.ops, self.consts, self.dtypes = [], {}, {}
        self.n = 0

    def const(self, name, value, dtype="fp16"):
        self.consts[name] = value
        self.dtypes[name] = dtype
        return name

    def op(self, typ, shape=(1, 6, 4), **inputs):
        self.n += 1
        out = f"v{self.n}_{typ}"
        self.ops.append(Op(typ, {k: (v,) if isinstance(v, str) else tuple(v)
                                 for k, v in inputs.items()},
                           (Value(out, "fp16", shape),)))
        return out

    def program(self, inputs=(Value("logmel_data", "fp32", (1, 3, 12)),)):
        counts = {}
        for o in self.ops:
            counts[o.type] = counts.get(o.type, 0) + 1
        return Program(path=None, function="main", inputs=tuple(inputs),
                       outputs=(self.ops[-1].outputs[0].name,), ops=tuple(self.ops),
                       consts=self.consts, const_dtypes=self.dtypes, op_counts=counts,
                       specification_version=8)


def _plain_block(b, x, k, names):
    """One openai-style block: attn_ln, q/k/v, attention, out, residual; mlp_ln, mlp."""
    w = names
    ln = b.op("layer_norm", x=x, gamma=w(f"blocks_{k}_attn_ln_weight"),
              beta=w(f"blocks_{k}_attn_ln_bias"))
    q = b.op("linear", x=ln, weight=w(f"blocks_{k}_attn_query_weight"))
    kk = b.op("linear", x=ln, weight=w(f"blocks_{k}_attn_key_weight"))
    v = b.op("linear", x=ln, weight=w(f"blocks_{k}_attn_value_weight"))
    qk = b.op("matmul", x=q, y=kk)
    sm = b.op("softmax", x=qk)
    av = b.op("matmul", x=sm, y=v)
    out = b.op("linear", x=av, weight=w(f"blocks_{k}_attn_out_weight"))
    x = b.op("add", x=x, y=out)
    ln2 = b.op("layer_norm", x=x, gamma=w(f"blocks_{k}_mlp_ln_weight"),
               beta=w(f"blocks_{k}_mlp_ln_bias"))
    h = b.op("linear", x=ln2, weight=w(f"blocks_{k}_mlp_0_weight"))
    g = b.op("gelu", x=h)
    o = b.op("linear", x=g, weight=w(f"blocks_{k}_mlp_2_weight"))
    return b.op("add", x=x, y=o)


def _named_program(n_layers=2):
    b = _Builder()
    rng = np.random.default_rng(0)

    def w(name):
        return b.const(name + "_to_fp16", rng.standard_normal(8).astype(np.float16))

    x = b.op("cast", x="logmel_data")
    c1 = b.op("conv", x=x, weight=w("conv1_weight"))
    x = b.op("gelu", x=c1)
    c2 = b.op("conv", x=x, weight=w("conv2_weight"))
    x = b.op("gelu", x=c2)
    x = b.op("transpose", x=x)
    x = b.op("add", x=x, y=b.const("positional_embedding_to_fp16",
                                   rng.standard_normal(8).astype(np.float16)))
    for k in range(n_layers):
        x = _plain_block(b, x, k, w)
    b.op("layer_norm", x=x, gamma=w("ln_post_weight"), beta=w("ln_post_bias"))
    return b.program()


def test_a_program_with_openai_names_maps_every_module_point():
    prog = _named_program()
    mapping = map_program(prog, hf_paths(2))
    points = {p for m in mapping for p in m.points}
    for k in range(2):
        for leaf in LEAVES:
            assert f"layers.{k}.{leaf}" in points, leaf
        assert f"layers.{k}" in points
    assert {EMBEDDINGS, "conv1", "conv2", "layer_norm"} <= points
    by_type = {}
    for op, m in zip(prog.ops, mapping):
        by_type.setdefault(op.type, set()).add(m.module is not None)
    assert by_type["softmax"] == {False} and by_type["matmul"] == {False}
    assert by_type["linear"] == {True} and by_type["layer_norm"] == {True}


def _anonymous_program(weights, dtype="fp16"):
    """conv1 -> gelu -> linear(fc1 of block 0) -> gelu, weights named anonymously."""
    b = _Builder()
    x = b.op("cast", x="logmel_data")
    c = b.op("conv", x=x, weight=b.const("const_0_to_fp16", weights["conv1"], dtype))
    x = b.op("gelu", x=c)
    h = b.op("linear", x=x, weight=b.const("const_4_to_fp16", weights["fc1"], dtype),
             bias=b.const("linear_1_bias_0_to_fp16", np.zeros(4, np.float16), dtype))
    b.op("gelu", x=h)
    return b.program()


def test_anonymous_weights_are_identified_by_their_exact_values():
    rng = np.random.default_rng(1)
    params = {"conv1.weight": torch.tensor(rng.standard_normal((4, 3, 3)), dtype=torch.float32),
              "layers.0.fc1.weight": torch.tensor(rng.standard_normal((4, 4)),
                                                  dtype=torch.float32),
              "layers.0.fc1.bias": torch.zeros(4)}
    fp16 = {"conv1": params["conv1.weight"].numpy().astype(np.float16),
            "fc1": params["layers.0.fc1.weight"].numpy().astype(np.float16)}
    prog = _anonymous_program(fp16)
    named = map_program(prog, hf_paths(1))
    assert all(m.module is None for m in named)          # names alone say nothing
    mapping = map_program(prog, hf_paths(1), parameters=params.items())
    assert [m.module for m in mapping] == [None, "conv1", None, "layers.0.fc1",
                                           "layers.0.activation_fn"]
    # float32 constants are matched as stored.
    fp32 = {"conv1": params["conv1.weight"].numpy(), "fc1": params["layers.0.fc1.weight"].numpy()}
    assert map_program(_anonymous_program(fp32, "fp32"), hf_paths(1),
                       parameters=params.items())[1].module == "conv1"


def test_values_that_are_not_exactly_one_weight_identify_nothing():
    rng = np.random.default_rng(2)
    shared = torch.tensor(rng.standard_normal((4, 4)), dtype=torch.float32)
    conv = torch.tensor(rng.standard_normal((4, 3, 3)), dtype=torch.float32)
    params = {"conv1.weight": conv, "layers.0.fc1.weight": shared,
              "layers.0.fc2.weight": shared.clone()}
    scaled = (conv.numpy() * 0.125).astype(np.float16)    # a weight folded with a scale
    prog = _anonymous_program({"conv1": scaled, "fc1": shared.numpy().astype(np.float16)})
    mapping = map_program(prog, hf_paths(1), parameters=params.items())
    assert all(m.module is None for m in mapping)


def test_ane_convs_replacing_linears_map_and_their_values_are_relaid_out():
    b = _Builder()
    rng = np.random.default_rng(3)
    ane = (1, 4, 1, 6)

    def w(name):
        return b.const(name + "_to_fp16", rng.standard_normal((4, 4, 1, 1)).astype(np.float16))

    x = b.op("expand_dims", ane, x="logmel_data")
    h = b.op("conv", (1, 16, 1, 6), x=x, weight=w("blocks_0_mlp_0_weight"))
    g = b.op("gelu", (1, 16, 1, 6), x=h)
    b.op("conv", ane, x=g, weight=w("blocks_0_mlp_2_weight"))
    mapping = map_program(b.program(), hf_paths(1))
    assert [m.module for m in mapping] == [None, "layers.0.fc1", "layers.0.activation_fn",
                                           "layers.0.fc2"]
    v = torch.arange(24.0).reshape(1, 6, 4)             # HF: (batch, frames, channels)
    as_ane = v.transpose(1, 2).unsqueeze(2)             # ANE: (batch, channels, 1, frames)
    assert torch.equal(reference_layout(as_ane, (1, 6, 4)), v)
    assert reference_layout(v, (1, 6, 4)) is v
    assert reference_layout(as_ane, (1, 4, 6)) is None
    assert reference_layout(torch.zeros(1, 4, 2, 6), (1, 6, 4)) is None


# ----------------------------------------------------------------------------- coverage

def _op(i, module, snr, psnr=140.0, typ="linear"):
    return OpDrift(i, f"v{i}", typ, module, module or "layers.0", (f"v{i - 1}",) if i else ("x",),
                   snr, None if snr is None else 1.0, None, psnr,
                   None if psnr is None else 1.0, None)


def _att(ops) -> Attribution:
    d = drift.derive(ops, ["x"])
    return Attribution(ops=d, top=drift.rank(d, "delta_snr_db"),
                       precision_top=drift.rank(d, "precision_delta_snr_db"),
                       modules=drift.module_summaries(d),
                       unmapped=sum(o.module is None for o in d))


def test_full_mapping_may_say_no_op_loses_anything():
    att = _att([_op(0, "conv1", math.inf, math.inf), _op(1, "conv2", math.inf, math.inf)])
    assert (att.mapped, att.executed) == (2, 2)
    assert mapping_sentence(att) == "all 2 ops mapped to a reference module"
    assert empty_ranking_sentence(att, "conversion") == "no op loses anything"
    assert empty_ranking_sentence(att, "precision") == "no op loses anything"
    text = format_top(att)
    assert text.count("none: no op loses anything") == 2


def test_partial_mapping_says_how_much_was_not_attributed():
    ops = [_op(0, "conv1", math.inf, math.inf), _op(1, None, None, math.inf, "softmax"),
           _op(2, None, None, None, "reshape"), _op(3, "layers.0.fc1", math.inf, math.inf)]
    att = _att(ops)
    assert (att.mapped, att.executed, att.unmapped) == (2, 4, 2)
    assert mapping_sentence(att) == ("2 of 4 ops mapped to a reference module; conversion "
                                     "drift was not attributed for the other 2")
    conv = empty_ranking_sentence(att, "conversion")
    assert "none of the 2 mapped ops" in conv and "not attributed for the other 2" in conv
    prec = empty_ranking_sentence(att, "precision")
    assert "3 ops compared" in prec and "other 1" in prec
    text = format_top(att)
    assert "no op loses anything" not in text
    assert "2 of 4 ops mapped to a reference module" in text
    with pytest.raises(ValueError):
        empty_ranking_sentence(att, "runtime")


def test_nothing_mapped_is_said_as_such():
    att = _att([_op(0, None, None, math.inf, "einsum"), _op(1, None, None, math.inf, "split")])
    assert mapping_sentence(att).startswith("0 of 2 ops mapped")
    assert "not attributed at all" in empty_ranking_sentence(att, "conversion")
    assert "no op loses anything" not in format_top(att).split("precision drift")[0]


def test_a_document_must_not_claim_more_mapped_ops_than_it_compared():
    from verifylib import canonical

    ops = [_op(0, "conv1", 60.0), _op(1, None, None, 120.0, "softmax")]
    doc = canonical.loads(canonical.dumps(_att(ops).as_dict()))
    assert (doc["mapped"], doc["executed"], doc["unmapped"]) == (1, 2, 1)
    assert attribution_problems(doc) == []
    for key, forged in (("mapped", 2), ("unmapped", 0), ("executed", 3)):
        bad = dict(doc, **{key: forged})
        assert any(key in p for p in attribution_problems(bad)), key
    old = {k: v for k, v in doc.items() if k not in ("mapped", "executed")}
    assert attribution_problems(old) == []                    # documents made before the counts


def test_the_attribution_view_repeats_the_honest_sentences():
    from verifylib.views import render

    ops = [_op(0, "conv1", math.inf, math.inf), _op(1, None, None, math.inf, "softmax")]
    att = _att(ops)
    html = render("parity_attribution.html.j2", att=att, gate="parity.program",
                  coverage=mapping_sentence(att),
                  conversion_none=empty_ranking_sentence(att, "conversion"),
                  precision_none=empty_ranking_sentence(att, "precision"))
    assert "1 of 2 ops mapped to a reference module" in html
    assert "none of the 1 mapped ops loses anything" in html
    assert "every mapped op reproduces" not in html


def test_the_comparison_page_says_nothing_loses_only_of_fully_compared_runs():
    from types import SimpleNamespace as N

    from tests.helpers import ROOT
    from verifylib import views

    env = next(getattr(views, n) for n in dir(views)
               if type(getattr(views, n)).__name__ == "Environment")
    src = (ROOT / "verifylib" / "views" / "templates" / "compare_body.html.j2").read_text()
    start = src.index("{% macro worst_table")
    end = src.index("{%- endmacro %}", start) + len("{%- endmacro %}")
    t = env.from_string(src[start:end] + '{{ worst_table([], "conversion", curves, "snr_db") }}')

    def page(*snrs):
        curves = [N(run=chr(65 + i), snr_db=s) for i, s in enumerate(snrs)]
        return " ".join(t.render(curves=curves, cmp=N(runs=[]), db=str).split())

    assert "No run has an op that loses anything here." in page((1.0, 2.0), (3.0, 4.0))
    partial = page((1.0, None, 2.0), (1.0, 2.0, 3.0))
    assert "loses anything" not in partial
    assert "run A, 2 of 3 ops; run B, 3 of 3 ops." in partial
    assert "Conversion drift was not attributed for the others." in partial
