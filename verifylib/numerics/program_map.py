"""A Core ML program's ops mapped onto the Hugging Face encoder's modules.

Each op of the program is named by the module that computes it (``encoder.layers.1.fc2``),
from the weights it reads and the values it consumes, so the attribution of
:mod:`verifylib.numerics.drift` can compare it with the reference's stream at that point.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from verifylib.canonical import sha256_bytes
from verifylib.numerics.mil_ops import MilExecError

if TYPE_CHECKING:
    from verifylib.numerics.mil_exec import Program

EMBEDDINGS = "embeddings"
"""The pseudo-module of the encoder's embedded input (the input of ``layers.0``)."""

_PARAM_SUFFIXES = ("_weight", "_bias")

_WEIGHT_PARAMS = ("weight", "gamma", "y", "x", "bias", "beta")
_VALUE_PARAMS = ("weight", "gamma")
"""The parameters whose anonymous constants are identified by value: a module's own
weights. Biases and elementwise operands are not (zero biases and scalars are shared)."""

# openai-whisper's AudioEncoder names, per HF WhisperEncoder module (whisper/model.py:
# ``blocks.N.attn.{query,key,value,out}``, ``attn_ln``, ``mlp`` = Linear, GELU, Linear,
# ``mlp_ln``, ``ln_post``; the positions are a bare tensor, ``positional_embedding``).
_OPENAI_TOP = {"conv1": "conv1", "conv2": "conv2", "layer_norm": "ln_post",
               "embed_positions": "positional_embedding"}
_OPENAI_LEAVES = {"self_attn": "attn", "self_attn.q_proj": "attn.query",
                  "self_attn.k_proj": "attn.key", "self_attn.v_proj": "attn.value",
                  "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_ln",
                  "fc1": "mlp.0", "activation_fn": "mlp.1", "fc2": "mlp.2",
                  "final_layer_norm": "mlp_ln"}
_BARE_TENSORS = ("embed_positions",)
"""HF modules whose openai-whisper counterpart is a tensor, not a module (its constant
has no ``_weight`` suffix)."""


# ----------------------------------------------------------------------------- mapping

@dataclass(frozen=True)
class OpMapping:
    """What :func:`map_program` found for one op.

    Attributes
    ----------
    module : str or None
        The most specific HF point the op's output is.
    points : tuple of str
        Every HF point the output is (``out_proj`` and ``self_attn``, say).
    scope : str
        The region the op sits in.
    weight_module : str or None
        The module whose parameter the op reads.
    """

    module: str | None
    points: tuple[str, ...]
    scope: str
    weight_module: str | None


def openai_module_path(hf_path: str) -> str | None:
    """Name an HF WhisperEncoder module as openai-whisper's AudioEncoder names it.

    Parameters
    ----------
    hf_path : str
        Dotted HF encoder module path (``layers.2.self_attn.q_proj``).

    Returns
    -------
    str or None
        The openai-whisper path (``blocks.2.attn.query``; ``layer_norm`` -> ``ln_post``,
        ``layers.k.fc1`` -> ``blocks.k.mlp.0``, ``embed_positions`` ->
        ``positional_embedding``), or None for a module openai-whisper does not have.
    """
    if hf_path in _OPENAI_TOP:
        return _OPENAI_TOP[hf_path]
    parts = hf_path.split(".")
    if len(parts) >= 2 and parts[0] == "layers" and parts[1].isdigit():
        if len(parts) == 2:
            return f"blocks.{parts[1]}"
        leaf = _OPENAI_LEAVES.get(".".join(parts[2:]))
        if leaf is not None:
            return f"blocks.{parts[1]}.{leaf}"
    return None


def module_keys(module_paths: Iterable[str]) -> dict[str, str]:
    """Map underscored forms to dotted HF module paths (``layers_0_fc1`` -> ``layers.0.fc1``).

    Each module's openai-whisper name (:func:`openai_module_path`) is a key too, to the
    same HF path (``blocks_0_mlp_0`` -> ``layers.0.fc1``), so a program traced from
    openai-whisper's modules maps onto the same reference modules.

    Parameters
    ----------
    module_paths : iterable of str
        Dotted module paths; empty ones (the root module) are skipped.

    Returns
    -------
    dict
        Underscored form -> dotted HF path.
    """
    keys = {}
    for p in module_paths:
        if not p:
            continue
        keys[p.replace(".", "_")] = p
        alias = openai_module_path(p)
        if alias is not None:
            keys.setdefault(alias.replace(".", "_"), p)
    return keys


def weight_module(const_name: str, keys: Mapping[str, str]) -> str | None:
    """Find the HF module a weight constant came from, by coremltools' naming.

    Parameters
    ----------
    const_name : str
        The constant's name (``encoder_layers_2_fc1_weight``, optionally ``…_to_fp16``).
    keys : mapping
        Underscored form -> dotted path, as :func:`module_keys` builds it.

    Returns
    -------
    str or None
        The dotted path of the longest key that ends the name before its ``_weight`` or
        ``_bias`` suffix; for a name without a suffix, the HF module of an openai-whisper
        bare tensor the name ends with (``positional_embedding`` -> ``embed_positions``);
        None when nothing matches.
    """
    name = const_name
    if name.endswith("_to_fp16"):
        name = name[: -len("_to_fp16")]
    for suf in _PARAM_SUFFIXES:
        if name.endswith(suf):
            base = name[: -len(suf)]
            break
    else:
        for path in _BARE_TENSORS:
            bare = _OPENAI_TOP[path]
            if keys.get(bare) == path and (name == bare or name.endswith("_" + bare)):
                return path
        return None
    best = None
    for k, path in keys.items():
        if (base == k or base.endswith("_" + k)) and (best is None or len(k) > len(best[0])):
            best = (k, path)
    return best[1] if best else None


def _common_scope(a: str | None, b: str | None) -> str:
    if a is None and b is None:
        return "(program)"
    if a is None or b is None:
        return region(a or b)
    pa, pb = a.split("."), b.split(".")
    common = []
    for x, y in zip(pa, pb):
        if x != y:
            break
        common.append(x)
    if len(common) >= 2 or (common and common[0] != "layers"):
        return ".".join(common)
    return region(a)


def region(path: str) -> str:
    """Return the per-module summary's region of a module path or scope.

    Parameters
    ----------
    path : str
        A dotted module path or scope.

    Returns
    -------
    str
        ``layers.k`` for anything inside block ``k``, else the top-level module
        (``conv1``, ``embeddings``, ``layer_norm``).
    """
    parts = path.split(".")
    if parts[0] == "layers" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


class _ValueIndex:
    """The HF weights by exact value, for constants whose name identifies no module.

    Built on first use only: a program whose weights are all named (any program traced
    from the HF modules) never pays for digesting the encoder's parameters.
    """

    def __init__(self, parameters):
        self._parameters = parameters
        self._index: dict[tuple, set[str]] | None = None

    def _build(self) -> dict[tuple, set[str]]:
        index: dict[tuple, set[str]] = {}
        for pname, value in self._parameters:
            module, _, leaf = pname.rpartition(".")
            if leaf != "weight" or not module:
                continue
            arr = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
            arr = np.ascontiguousarray(arr, dtype=np.float32)
            # The program holds the weight as stored, or rounded to float16 by an fp16
            # conversion (round to nearest even, as numpy rounds).
            for dtype, rendered in (("fp32", arr), ("fp16", arr.astype(np.float16))):
                key = (dtype, rendered.size, sha256_bytes(rendered.tobytes()))
                index.setdefault(key, set()).add(module)
        return index

    def module_of(self, value, dtype: str) -> str | None:
        if dtype not in ("fp16", "fp32"):
            return None
        arr = np.asarray(value)
        if arr.size < 2:
            return None
        if self._index is None:
            self._index = self._build()
        arr = np.ascontiguousarray(arr, dtype=np.float16 if dtype == "fp16" else np.float32)
        found = self._index.get((dtype, arr.size, sha256_bytes(arr.tobytes())), set())
        # A value two weights share identifies neither.
        return next(iter(found)) if len(found) == 1 else None


def map_program(program, module_paths: Iterable[str],
                parameters: Iterable[tuple[str, Any]] | None = None) -> list[OpMapping]:
    """Map every op of ``program`` to the HF encoder's modules (module docstring rules).

    Parameters
    ----------
    program : verifylib.numerics.mil_exec.Program
        The loaded program whose ops (and constants) are mapped.
    module_paths : iterable of str
        The encoder's ``named_modules()`` paths.
    parameters : iterable of (str, tensor), optional
        The encoder's ``named_parameters()``: a weight or gamma constant whose name names
        no module is then identified by its values (rule 2). Without them such a
        constant identifies nothing.

    Returns
    -------
    list of OpMapping
        One per op, in program order.
    """
    paths = [p for p in module_paths if p]
    keys = module_keys(paths)
    by_value = _ValueIndex(parameters) if parameters is not None else None
    wmods = _weight_modules(program, keys, by_value)
    points = _module_points(program, wmods, paths)
    prev, nxt = _nearest_weights(wmods)
    out = []
    for i, op in enumerate(program.ops):
        pts = tuple(points[i])
        module = pts[0] if pts else None
        if module is not None:
            scope = module
        elif wmods[i] is not None:
            scope = wmods[i]
        else:
            scope = _common_scope(prev[i], nxt[i])
        out.append(OpMapping(module, pts, scope, wmods[i]))
    return out


def _weight_modules(program, keys: Mapping[str, str],
                    by_value: _ValueIndex | None) -> list[str | None]:
    """Return, per op, the module its weight constants name (by name, else by value)."""
    readers: Counter = Counter(n for op in program.ops for names in op.inputs.values()
                               for n in set(names) if n in program.consts)
    wmods: list[str | None] = []
    for op in program.ops:
        found = None
        for pname in _WEIGHT_PARAMS:
            for n in op.inputs.get(pname, ()):
                # A constant several ops read names one module but serves them all:
                # coremltools merges identical constants (the untouched layer norms and
                # zero biases of a freshly initialized model), so it identifies none.
                if n in program.consts and readers[n] == 1:
                    found = weight_module(n, keys)
                    if found is None and by_value is not None and pname in _VALUE_PARAMS:
                        found = by_value.module_of(program.consts[n],
                                                   program.const_dtypes.get(n, ""))
                    if found:
                        break
            if found:
                break
        wmods.append(found)
    return wmods


def _module_points(program, wmods: list[str | None], paths: list[str]) -> list[list[str]]:
    """Return, per op, the reference points (module outputs) its output is."""
    known = set(paths)
    producer = {v.name: i for i, op in enumerate(program.ops) for v in op.outputs}
    points: list[list[str]] = [[] for _ in program.ops]

    def add_point(i: int, point: str) -> None:
        if point not in points[i]:
            points[i].append(point)

    n_layers = len({p.split(".")[1] for p in paths if p.startswith("layers.")})
    for i, (op, wm) in enumerate(zip(program.ops, wmods)):
        if wm is None:
            continue
        if op.type in ("linear", "conv", "layer_norm"):
            add_point(i, wm)
            if wm.endswith(".self_attn.out_proj"):
                add_point(i, wm[: -len(".out_proj")])
        elif op.type == "add" and wm == "embed_positions":
            add_point(i, EMBEDDINGS)
        if op.type == "layer_norm":
            # The x of the norm opening block k+1 (or of the final norm) is block k's
            # output; the x of the norm opening block 0 is the embedded input.
            parts = wm.split(".")
            block = None
            if wm == "layer_norm":
                block = n_layers - 1
            elif len(parts) == 3 and parts[0] == "layers" and parts[2] == "self_attn_layer_norm":
                block = int(parts[1]) - 1
            src = producer.get(op.inputs["x"][0]) if "x" in op.inputs else None
            if src is None or block is None:
                continue
            if block >= 0 and f"layers.{block}" in known:
                add_point(src, f"layers.{block}")
            elif block == -1 and "layers.0" in known:
                add_point(src, EMBEDDINGS)
    for i, op in enumerate(program.ops):
        if op.type == "gelu":
            src = producer.get(op.inputs["x"][0])
            if src is not None and wmods[src] and wmods[src].endswith(".fc1") \
                    and program.ops[src].type in ("linear", "conv"):
                act = wmods[src][: -len(".fc1")] + ".activation_fn"
                if act in known:
                    add_point(i, act)
    return points


def _nearest_weights(wmods: list[str | None]) -> tuple[list[str | None], list[str | None]]:
    """Return, per op, the module of the nearest weight-reading op before it and after it."""
    prev: list[str | None] = []
    last = None
    for wm in wmods:
        prev.append(last)
        last = wm or last
    nxt: list[str | None] = [None] * len(wmods)
    last = None
    for i in range(len(wmods) - 1, -1, -1):
        nxt[i] = last
        last = wmods[i] or last
    return prev, nxt


# ----------------------------------------------------------------------------- per-layer taps

def residual_taps(program: "Program") -> list[tuple[str, str]]:
    """Locate the residual stream between encoder blocks of a Whisper-style program.

    The Whisper encoder is pre-norm: block ``i`` opens with a ``layer_norm`` of the
    residual stream and closes with a residual ``add``; one final ``layer_norm`` follows
    the last block. So with ``L`` blocks the program holds ``2L + 1`` layer norms, the
    ``x`` of layer norm ``0`` is the embedded input and the ``x`` of layer norm ``2i + 2``
    is the output of block ``i``.

    Parameters
    ----------
    program : Program
        The loaded program.

    Returns
    -------
    list of (label, value name)
        ``("embeddings", ...)``, ``("block 0", ...)`` ... ``("block L-1", ...)`` and
        ``("output", ...)``.

    Raises
    ------
    MilExecError
        If the program does not have that structure (then no per-layer drift is shown).
    """
    lns = [op for op in program.ops if op.type == "layer_norm"]
    if len(lns) < 3 or len(lns) % 2 != 1:
        raise MilExecError(f"{len(lns)} layer_norm ops: not the 2L+1 of a pre-norm encoder")
    prod = program.producer()
    n_blocks = (len(lns) - 1) // 2
    out = [("embeddings", lns[0].inputs["x"][0])]
    for i in range(n_blocks):
        name = lns[2 * i + 2].inputs["x"][0]
        src = prod.get(name)
        if src is None or src.type != "add":
            raise MilExecError(f"block {i}: the residual stream {name!r} is not an add's output")
        out.append((f"block {i}", name))
    out.append(("output", program.outputs[0]))
    return out
