"""Op-level attribution of numeric drift in a saved Core ML ML program.

Two questions, answered op by op on any OS with the MIL executor
(:mod:`verifylib.numerics.mil_exec`):

- **Conversion drift** -- where does the program stop computing what the Hugging Face
  encoder computes? The program runs in the requested arithmetic while the HF encoder runs
  once with forward hooks; at every program value that *is* the output of an HF module,
  the two are compared in float64 (SNR with the HF value as the signal, and cosine).
- **Precision drift** -- where does the variant's arithmetic lose precision? The same
  program runs twice in lockstep: as the variant executes it (float32 arithmetic, float16
  rounding where the program types a value ``fp16``) and in float64 without any float16
  rounding of values (the program's math, exactly). Every op's output is compared.

Both are reported as the SNR of each op's output and **ΔSNR**, the change in SNR across
the op: its output's SNR minus the worst SNR among its (non-constant) inputs. An op that
adds no error has ΔSNR 0; an op that loses 40 dB has -40. Infinite SNRs (exact values)
and values above :data:`CEILING_DB` are taken as :data:`CEILING_DB` when differencing, so
an op that merely shows float32 rounding is not ranked against an exact input. For
conversion drift an op's inputs are traced back through unmapped ops to the nearest
values that have an HF counterpart (the function input counts as exact: both sides read
the same log-mel), so the ΔSNR of a mapped op is the drift introduced since the previous
comparison point. The worst ops (most negative ΔSNR first) are what :attr:`Attribution.top`
lists; a broken weight shows up first at the op that reads it.

How MIL ops are mapped to torch modules (documented in docs/drift.md): coremltools
names a weight constant after the torch parameter it came from, with dots as underscores
(``encoder_layers_2_fc1_weight``, in an fp16 program ``…_weight_to_fp16``). So

1. an op reading a ``*_weight`` / ``*_bias`` / gamma constant is the op of that module
   (the longest module path whose underscored form ends the constant's name): ``linear``
   -> ``layers.k.fc1``, ``conv`` -> ``conv1``, ``layer_norm`` -> ``layers.k.final_layer_norm``;
   its output is that module's output, except for a weight read by an elementwise op (the
   positional embedding's ``add``), whose output is the ``embeddings`` point (the input of
   ``layers.0``, as the HF encoder feeds it). A constant read by several ops names no
   module: coremltools merges identical constants (a freshly initialized model's layer
   norms all have gamma 1 and beta 0), so its name says nothing about which op is whose;
2. the output of ``layers.k.self_attn.out_proj`` is also ``layers.k.self_attn``'s output;
3. a ``gelu`` applied to ``layers.k.fc1``'s output is ``layers.k.activation_fn``;
4. the ``x`` of the layer norm opening block ``k + 1`` (or of the final ``layer_norm``) is
   block ``k``'s output, ``layers.k``;
5. every other op (reshapes, transposes, the attention's matmuls and softmax, casts) has
   no HF counterpart: it is listed with ``module`` None and its ``scope`` (the region it
   sits in: the common prefix of the weighted ops around it), never dropped.

Why hand-written: coremltools' ``MLModelComparator`` needs the Core ML runtime (macOS) and
compares two Core ML models, not a program with its torch source; nothing else attributes
drift per MIL op.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from verifylib.errors import ParametersInvalid
from verifylib.numerics.memory import release_memory, trimmed

CEILING_DB = 150.0
"""SNR at and above which a value counts as exact when differencing (float32 rounding of a
tensor alone gives about 145-150 dB)."""

TOP_N = 10
"""How many ops :attr:`Attribution.top` and :attr:`Attribution.precision_top` list."""

EMBEDDINGS = "embeddings"
"""The pseudo-module of the encoder's embedded input (the input of ``layers.0``)."""

_PARAM_SUFFIXES = ("_weight", "_bias")
_REARRANGING = ("transpose", "reshape")
_WEIGHT_PARAMS = ("weight", "gamma", "y", "x", "bias", "beta")


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True)
class OpDrift:
    """One op of the program and the drift it introduces.

    Attributes
    ----------
    index : int
        Position in program order (const ops excluded).
    name : str
        The op's (first) output value.
    type : str
        MIL op type.
    module : str or None
        The HF module whose output this value is (None: no counterpart).
    scope : str
        Region of the encoder the op sits in (``layers.2.self_attn``, ``conv1`` …).
    inputs : tuple of str
        Its non-constant input values (what ΔSNR is taken across).
    snr_db, cosine : float or None
        Conversion drift: against the HF module's output (None when unmapped).
    delta_snr_db : float or None
        Conversion ΔSNR across the op (mapped ops only).
    precision_snr_db, precision_cosine : float or None
        Precision drift: against the same program in float64 (None for non-float values).
    precision_delta_snr_db : float or None
        Precision ΔSNR across the op.
    """

    index: int
    name: str
    type: str
    module: str | None
    scope: str
    inputs: tuple[str, ...]
    snr_db: float | None
    cosine: float | None
    delta_snr_db: float | None
    precision_snr_db: float | None
    precision_cosine: float | None
    precision_delta_snr_db: float | None

    def row(self) -> dict:
        """Return the op as the JSON ``ops`` entry (``inputs`` as a list).

        Returns
        -------
        dict
            Every field of the op, by name.
        """
        d = asdict(self)
        d["inputs"] = list(self.inputs)
        return d


@dataclass(frozen=True)
class ModuleDrift:
    """One region of the encoder (``conv1``, ``embeddings``, ``layers.k``, ``layer_norm``).

    Attributes
    ----------
    module : str
        The region.
    ops : int
        Ops in it.
    mapped : int
        Of those, ops with an HF counterpart.
    snr_db : float or None
        Conversion SNR at the region's last comparison point.
    delta_snr_db : float
        Sum of its mapped ops' conversion ΔSNR (drift introduced inside the region).
    worst_op : str or None
        Its op with the most negative conversion ΔSNR.
    precision_delta_snr_db : float
        Sum of its ops' precision ΔSNR.
    precision_worst_op : str or None
        Its op with the most negative precision ΔSNR.
    """

    module: str
    ops: int
    mapped: int
    snr_db: float | None
    delta_snr_db: float
    worst_op: str | None
    precision_delta_snr_db: float
    precision_worst_op: str | None


@dataclass(frozen=True)
class Attribution:
    """Op-level attribution of one program's drift on one input.

    Attributes
    ----------
    ops : tuple of OpDrift
        Every op, in program order.
    top : tuple of OpDrift
        The :data:`TOP_N` ops that introduce the most conversion drift, worst first.
    precision_top : tuple of OpDrift
        The :data:`TOP_N` ops that lose the most precision, worst first.
    modules : tuple of ModuleDrift
        Per-region summary, in program order.
    points : tuple of dict
        Every HF comparison point: ``{module, value, snr_db, cosine}`` (a value may be the
        output of two modules, e.g. ``out_proj`` and ``self_attn``).
    compute : str
        Arithmetic of the candidate execution.
    variant : str or None
        ``fp32`` / ``fp16`` when known.
    fixture : str or None
        The input's fixture id.
    unmapped : int
        Ops without an HF counterpart.
    seconds : float
        Wall time of the attribution.
    ceiling_db : float
        :data:`CEILING_DB` as used.
    input_precision : dict
        Function input -> precision SNR of the input as the candidate read it.
    """

    ops: tuple[OpDrift, ...]
    top: tuple[OpDrift, ...]
    precision_top: tuple[OpDrift, ...]
    modules: tuple[ModuleDrift, ...]
    points: tuple[dict, ...] = ()
    compute: str = "float32"
    variant: str | None = None
    fixture: str | None = None
    unmapped: int = 0
    seconds: float = 0.0
    ceiling_db: float = CEILING_DB
    input_precision: Mapping[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Return the JSON document (``ops``, ``top``, ``modules`` and the rest).

        Returns
        -------
        dict
            ``ops``, ``top`` and ``precision_top`` as :meth:`OpDrift.row` rows,
            ``modules``, ``points``, ``compute``, ``variant``, ``fixture``, ``unmapped``,
            ``seconds`` (rounded to ms), ``ceiling_db`` and ``input_precision``.
        """
        return {"ops": [o.row() for o in self.ops], "top": [o.row() for o in self.top],
                "precision_top": [o.row() for o in self.precision_top],
                "modules": [asdict(m) for m in self.modules], "points": list(self.points),
                "compute": self.compute, "variant": self.variant, "fixture": self.fixture,
                "unmapped": self.unmapped, "seconds": round(self.seconds, 3),
                "ceiling_db": self.ceiling_db, "input_precision": dict(self.input_precision)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "Attribution":
        """Rebuild from :meth:`as_dict`'s document (as stored as evidence).

        Parameters
        ----------
        doc : mapping
            The document; ``top`` and ``precision_top`` are resolved by op name against
            ``ops``, and the optional fields take their defaults when absent.

        Returns
        -------
        Attribution
            The attribution the document describes.

        Raises
        ------
        KeyError, TypeError, ValueError
            If the document lacks a required field, names an op ``ops`` does not hold,
            or holds a value of the wrong type.
        """
        ops = tuple(_op_from(r) for r in doc["ops"])
        by_name = {o.name: o for o in ops}
        return cls(ops=ops, top=tuple(by_name[r["name"]] for r in doc["top"]),
                   precision_top=tuple(by_name[r["name"]] for r in doc["precision_top"]),
                   modules=tuple(ModuleDrift(**{k: _num(v) if k.endswith("_db") else v
                                                for k, v in m.items()})
                                 for m in doc["modules"]),
                   points=tuple(dict(p) for p in doc.get("points", ())),
                   compute=doc.get("compute", "float32"), variant=doc.get("variant"),
                   fixture=doc.get("fixture"), unmapped=int(doc.get("unmapped", 0)),
                   seconds=float(doc.get("seconds", 0.0)),
                   ceiling_db=float(doc.get("ceiling_db", CEILING_DB)),
                   input_precision={k: float(v) for k, v in
                                    doc.get("input_precision", {}).items()})

    def op(self, name: str) -> OpDrift:
        """Find the op whose output is ``name``.

        Parameters
        ----------
        name : str
            An output value name (:attr:`OpDrift.name`).

        Returns
        -------
        OpDrift
            The first op of :attr:`ops` with that name.

        Raises
        ------
        KeyError
            If no op has that name.
        """
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def table(self, ops: Iterable[OpDrift] | None = None) -> list[dict]:
        """List rows ``{name, type, module, snr_db, delta_snr_db, cosine, …}`` for a DataFrame.

        Parameters
        ----------
        ops : iterable of OpDrift, optional
            The ops to list (e.g. :attr:`top`); every op by default.

        Returns
        -------
        list of dict
            One :meth:`OpDrift.row` per op.
        """
        return [o.row() for o in (self.ops if ops is None else ops)]


def _num(v):
    if v is None:
        return None
    if isinstance(v, str):
        return float(v)
    return float(v)


def _op_from(r: Mapping[str, Any]) -> OpDrift:
    return OpDrift(index=int(r["index"]), name=r["name"], type=r["type"], module=r["module"],
                   scope=r["scope"], inputs=tuple(r["inputs"]), snr_db=_num(r["snr_db"]),
                   cosine=_num(r["cosine"]), delta_snr_db=_num(r["delta_snr_db"]),
                   precision_snr_db=_num(r["precision_snr_db"]),
                   precision_cosine=_num(r["precision_cosine"]),
                   precision_delta_snr_db=_num(r["precision_delta_snr_db"]))


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


def module_keys(module_paths: Iterable[str]) -> dict[str, str]:
    """Map underscored forms to dotted HF module paths (``layers_0_fc1`` -> ``layers.0.fc1``).

    Parameters
    ----------
    module_paths : iterable of str
        Dotted module paths; empty ones (the root module) are skipped.

    Returns
    -------
    dict
        Underscored form -> dotted path.
    """
    return {p.replace(".", "_"): p for p in module_paths if p}


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
        ``_bias`` suffix, or None when the name has no such suffix or no key matches.
    """
    name = const_name
    if name.endswith("_to_fp16"):
        name = name[: -len("_to_fp16")]
    for suf in _PARAM_SUFFIXES:
        if name.endswith(suf):
            base = name[: -len(suf)]
            break
    else:
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


def map_program(program, module_paths: Iterable[str]) -> list[OpMapping]:
    """Map every op of ``program`` to the HF encoder's modules (module docstring rules).

    Parameters
    ----------
    program : verifylib.numerics.mil_exec.Program
        The loaded program whose ops (and constants) are mapped.
    module_paths : iterable of str
        The encoder's ``named_modules()`` paths.

    Returns
    -------
    list of OpMapping
        One per op, in program order.
    """
    paths = [p for p in module_paths if p]
    keys = module_keys(paths)
    known = set(paths)
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
                    if found:
                        break
            if found:
                break
        wmods.append(found)
    producer = {v.name: i for i, op in enumerate(program.ops) for v in op.outputs}
    points: list[list[str]] = [[] for _ in program.ops]
    for i, (op, wm) in enumerate(zip(program.ops, wmods)):
        if wm is None:
            continue
        if op.type in ("linear", "conv", "layer_norm"):
            points[i].append(wm)
            if wm.endswith(".self_attn.out_proj"):
                points[i].append(wm[: -len(".out_proj")])
        elif op.type == "add" and wm == "embed_positions":
            points[i].append(EMBEDDINGS)
        if op.type == "layer_norm":
            # The x of the norm opening block k+1 (or of the final norm) is block k's output.
            parts = wm.split(".")
            block = None
            if wm == "layer_norm":
                n_layers = len({p.split(".")[1] for p in paths
                                if p.startswith("layers.") and p.count(".") >= 1})
                block = n_layers - 1
            elif len(parts) == 3 and parts[0] == "layers" and parts[2] == "self_attn_layer_norm":
                block = int(parts[1]) - 1
            if block is not None and block >= 0 and f"layers.{block}" in known:
                src = producer.get(op.inputs["x"][0])
                if src is not None:
                    points[src].append(f"layers.{block}")
    for i, op in enumerate(program.ops):
        if op.type == "gelu":
            src = producer.get(op.inputs["x"][0])
            if src is not None and wmods[src] and wmods[src].endswith(".fc1") \
                    and program.ops[src].type == "linear":
                act = wmods[src][: -len(".fc1")] + ".activation_fn"
                if act in known:
                    points[i].append(act)
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


# ----------------------------------------------------------------------------- reference

def hf_points(encoder, mel: np.ndarray, wanted: Iterable[str]) -> tuple[dict, float]:
    """Run the HF encoder once and keep the outputs of the ``wanted`` modules.

    Parameters
    ----------
    encoder : transformers WhisperEncoder
        The reference encoder; hooks are added for the run and removed afterwards.
    mel : numpy.ndarray
        The log-mel, float32 of the encoder's input shape.
    wanted : iterable of str
        Module paths, and :data:`EMBEDDINGS` for the input of ``layers.0``.

    Returns
    -------
    outputs : dict
        Module path -> float32 numpy array (a wanted module the encoder does not have is
        absent).
    seconds : float
        The forward pass's wall time.
    """
    import torch

    wanted = set(wanted)
    modules = dict(encoder.named_modules())
    seen: dict[str, np.ndarray] = {}
    hooks = []

    def keep(name):
        def fn(_mod, _args, out):
            t = out[0] if isinstance(out, (tuple, list)) else out
            seen[name] = t.detach().float().numpy().copy()
        return fn

    def pre(_mod, args, kwargs=None):
        x = args[0] if args else kwargs["hidden_states"]
        seen[EMBEDDINGS] = x.detach().float().numpy().copy()

    for name in wanted:
        if name == EMBEDDINGS:
            hooks.append(modules["layers.0"].register_forward_pre_hook(pre, with_kwargs=True))
        elif name in modules:
            hooks.append(modules[name].register_forward_hook(keep(name)))
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            encoder(torch.from_numpy(np.ascontiguousarray(mel)))
    finally:
        for h in hooks:
            h.remove()
    return seen, time.perf_counter() - t0


# ----------------------------------------------------------------------------- attribution

class _HfStream:
    """The HF encoder run in a thread, its module outputs handed over as they are needed.

    Why a thread: keeping every hooked module output until the program reaches it would
    hold about four times the encoder's activations per layer (3.9 GB for a
    large-v3-shaped encoder). Here the forward pass waits whenever ``depth`` outputs are
    pending, so only the outputs the program has not reached yet are alive, and each is
    dropped once compared. Outputs arriving out of program order are buffered.
    """

    _END = object()

    def __init__(self, encoder, mel: np.ndarray, wanted: Iterable[str], depth: int = 2):
        import queue
        import threading

        self._q: "queue.Queue" = queue.Queue(maxsize=depth)
        self._buf: dict[str, Any] = {}
        self._done = False
        self.error: BaseException | None = None
        self.seconds = 0.0
        self._encoder, self._mel, self._wanted = encoder, mel, set(wanted)
        self._taken: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="verifylib-hf-points",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import torch

        modules = dict(self._encoder.named_modules())
        hooks = []

        def keep(name):
            def fn(_mod, _args, out):
                t = out[0] if isinstance(out, (tuple, list)) else out
                self._q.put((name, t.detach().float().clone()))
            return fn

        def pre(_mod, args, kwargs=None):
            x = args[0] if args else kwargs["hidden_states"]
            self._q.put((EMBEDDINGS, x.detach().float().clone()))

        try:
            for name in self._wanted:
                if name == EMBEDDINGS:
                    hooks.append(modules["layers.0"].register_forward_pre_hook(
                        pre, with_kwargs=True))
                elif name in modules:
                    hooks.append(modules[name].register_forward_hook(keep(name)))
            t0 = time.perf_counter()
            with torch.inference_mode():
                self._encoder(torch.from_numpy(np.ascontiguousarray(self._mel)))
            self.seconds = time.perf_counter() - t0
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer's thread
            self.error = exc
        finally:
            for h in hooks:
                h.remove()
            self._q.put(self._END)

    def get(self, name: str):
        """Return the output of module ``name`` (None if the forward pass never produced it).

        A module asked for twice, or never hooked, is None at once: waiting for it would
        buffer every remaining output of the forward pass.
        """
        if name in self._taken or name not in self._wanted:
            return None
        self._taken.add(name)
        while name not in self._buf and not self._done:
            item = self._q.get()
            if item is self._END:
                self._done = True
                if self.error is not None:
                    raise self.error
                break
            self._buf[item[0]] = item[1]
        return self._buf.pop(name, None)

    def close(self) -> None:
        """Let the forward pass finish (discarding what is left) and join the thread."""
        while not self._done:
            if self._q.get() is self._END:
                self._done = True
        self._buf.clear()
        self._thread.join()



_CHUNK = 1 << 22
"""Elements per float64 chunk in :func:`_agreement` (32 MiB)."""


def _agreement(reference, candidate) -> tuple[float, float]:
    """Compute SNR (dB, reference as signal) and cosine of two same-shaped tensors, float64.

    The same statistics as :func:`verifylib.numerics.parity.compare` (no epsilon floor),
    computed with torch's float64 dot products because attribution compares every op's
    output and the full :class:`~verifylib.numerics.parity.Metrics` (max and mean error,
    finiteness) would double its cost. The sums run over chunks: a float64 copy of a large
    encoder's attention scores (20 heads x 1500 x 1500) is 360 MB, three of them a gigabyte.
    """
    import torch

    from verifylib.numerics.parity import cosine_from_sums, snr_from_energies

    r_all = torch.as_tensor(reference).reshape(-1)
    c_all = torch.as_tensor(candidate).reshape(-1)
    signal = dot = cand = noise = 0.0
    for start in range(0, r_all.numel(), _CHUNK):
        r = r_all[start:start + _CHUNK].to(torch.float64)
        c = c_all[start:start + _CHUNK].to(torch.float64)
        signal += float(torch.dot(r, r))
        dot += float(torch.dot(r, c))
        cand += float(torch.dot(c, c))
        err = c - r
        noise += float(torch.dot(err, err))
    return snr_from_energies(signal, noise), cosine_from_sums(dot, signal, cand)


def _capped(v: float | None) -> float | None:
    if v is None or math.isnan(v):
        return None
    return min(v, CEILING_DB)


def _delta(out: float | None, ins: Sequence[float | None]) -> float | None:
    o = _capped(out)
    if o is None:
        return None
    caps = [_capped(v) for v in ins]
    if any(c is None for c in caps):
        return None
    base = min(caps) if caps else CEILING_DB
    return o - base


def _rank(ops: Sequence[OpDrift], key: str) -> tuple[OpDrift, ...]:
    # Only ops that lose something are ranked: with an exact conversion nothing is "worst".
    scored = [o for o in ops if getattr(o, key) is not None and getattr(o, key) < 0]
    scored.sort(key=lambda o: (getattr(o, key), o.index))
    return tuple(scored[:TOP_N])


def _summaries(ops: Sequence[OpDrift]) -> tuple[ModuleDrift, ...]:
    order: list[str] = []
    groups: dict[str, list[OpDrift]] = {}
    for o in ops:
        where = region(o.module or o.scope)
        if where not in groups:
            groups[where] = []
            order.append(where)
        groups[where].append(o)
    out = []
    for where in order:
        g = groups[where]
        mapped = [o for o in g if o.module is not None]
        conv = [o for o in mapped if o.delta_snr_db is not None]
        prec = [o for o in g if o.precision_delta_snr_db is not None]
        # A "worst" op is one that loses something; with none, there is no worst.
        conv_loss = [o for o in conv if o.delta_snr_db < 0]
        prec_loss = [o for o in prec if o.precision_delta_snr_db < 0]
        last = next((o.snr_db for o in reversed(mapped) if o.snr_db is not None), None)
        out.append(ModuleDrift(
            module=where, ops=len(g), mapped=len(mapped), snr_db=last,
            delta_snr_db=float(sum(o.delta_snr_db for o in conv)),
            worst_op=(min(conv_loss, key=lambda o: (o.delta_snr_db, o.index)).name
                      if conv_loss else None),
            precision_delta_snr_db=float(sum(o.precision_delta_snr_db for o in prec)),
            precision_worst_op=(min(prec_loss,
                                    key=lambda o: (o.precision_delta_snr_db, o.index)).name
                                if prec_loss else None)))
    return tuple(out)


def derive(ops: Sequence[OpDrift], input_names: Iterable[str],
           input_precision_snr: Mapping[str, float] | None = None) -> tuple[OpDrift, ...]:
    """Recompute every ΔSNR from the ops' SNRs and input lists.

    The attribution and the validator share this: a stored document whose ΔSNR, ``top``
    or ``modules`` do not follow from its SNRs is refused (:func:`check_document`).

    Parameters
    ----------
    ops : sequence of OpDrift
        In program order, with ``snr_db`` and ``precision_snr_db`` measured.
    input_names : iterable of str
        The program's function inputs (exact for conversion drift).
    input_precision_snr : mapping, optional
        Function input -> precision SNR (``inf`` unless the program rounds its input).

    Returns
    -------
    tuple of OpDrift
        The ops with ``delta_snr_db`` (mapped ops with a conversion SNR only) and
        ``precision_delta_snr_db`` (ops with a precision SNR only) recomputed; every other
        field as given.
    """
    eff: dict[str, float] = {n: math.inf for n in input_names}
    prec: dict[str, float] = {n: math.inf for n in input_names}
    prec.update(input_precision_snr or {})
    out = []
    for o in ops:
        ins = [n for n in o.inputs if n in eff]
        conv_in = [eff[n] for n in ins]
        if o.module is not None and o.snr_db is not None:
            d = _delta(o.snr_db, conv_in)
            eff[o.name] = o.snr_db
        else:
            d = None
            eff[o.name] = min(conv_in) if conv_in else math.inf
        p_in = [prec[n] for n in o.inputs if n in prec]
        if o.precision_snr_db is not None:
            pd = _delta(o.precision_snr_db, p_in)
            prec[o.name] = o.precision_snr_db
        else:
            pd = None
            prec[o.name] = min(p_in) if p_in else math.inf
        out.append(OpDrift(o.index, o.name, o.type, o.module, o.scope, o.inputs, o.snr_db,
                           o.cosine, d, o.precision_snr_db, o.precision_cosine, pd))
    return tuple(out)


def attribute(program, encoder, mel: np.ndarray, *, compute: str = "float32",
              variant: str | None = None, fixture: str | None = None,
              hf: Mapping[str, np.ndarray] | None = None,
              progress=None) -> Attribution:
    """Attribute ``program``'s drift on ``mel`` to its ops (conversion and precision).

    Parameters
    ----------
    program : verifylib.numerics.mil_exec.Program
        The saved package's program (:func:`verifylib.numerics.mil_exec.load_program`).
    encoder : transformers WhisperEncoder
        The reference (float32, eval mode).
    mel : numpy.ndarray
        The input log-mel of the program's input shape.
    compute : {"float32", "float64"}
        Arithmetic of the candidate execution (float16 rounding is kept as the program
        declares it).
    variant, fixture : str, optional
        Recorded in the result.
    hf : mapping, optional
        Precomputed :func:`hf_points` outputs (a superset of the points needed); by
        default the HF encoder runs alongside the program (:class:`_HfStream`), so no
        more than a few of its module outputs are alive at once.
    progress : callable, optional
        Receives ``(done, total)`` op counts.

    Returns
    -------
    Attribution
        Every op's drift, the rankings and the per-region summary.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If ``mel`` does not have the program's input shape.
    """
    t0 = time.perf_counter()
    (inp,) = program.inputs[:1]
    want = tuple(inp.shape)
    if all(isinstance(d, int) for d in want) and tuple(np.shape(mel)) != want:
        raise ParametersInvalid(f"the input log-mel has shape {tuple(np.shape(mel))}; the "
                                f"program's input {inp.name!r} is {want}")
    mapping = map_program(program, (n for n, _ in encoder.named_modules()))
    needed = {p for m in mapping for p in m.points}
    if hf is not None and needed <= set(hf):
        fetch, stream = hf.get, None
    else:
        stream = _HfStream(encoder, mel, needed)
        fetch = stream.get
    try:
        return _attribute(program, mapping, mel, fetch, compute=compute, variant=variant,
                          fixture=fixture, progress=progress, t0=t0)
    finally:
        if stream is not None:
            stream.close()
        release_memory()


def _attribute(program, mapping, mel, fetch, *, compute, variant, fixture, progress,
               t0) -> Attribution:
    from verifylib.numerics.mil_exec import Stepper

    inp = program.inputs[0]
    feeds = {inp.name: mel}
    cand = Stepper(program, feeds, compute=compute)
    ref = Stepper(program, feeds, compute="float64", round_fp16=False)
    in_prec = {}
    in_prec[inp.name] = _agreement(ref.env[inp.name], cand.env[inp.name])[0]
    ops: list[OpDrift] = []
    points: list[dict] = []
    moved: dict[str, tuple] = {}
    total = len(program.ops)
    # Both executions and the HF forward free activations out of order (memory.trimmed).
    for (i, op, cvals), (_, _, rvals) in trimmed(zip(cand.steps(), ref.steps())):
        m = mapping[i]
        c, r = cvals[0], rvals[0]
        floating = c.is_floating_point()
        if not floating:
            psnr = pcos = None
        elif op.type in _REARRANGING and op.inputs["x"][0] in moved:
            # A transpose or reshape moves values without arithmetic: its output has
            # exactly its input's sums, so its input's figures are reused.
            psnr, pcos = moved[op.inputs["x"][0]]
        else:
            psnr, pcos = _agreement(r, c)
        snr = cos = None
        module = m.module
        for point in m.points:
            hv = fetch(point)
            if not floating or hv is None or tuple(hv.shape) != tuple(c.shape):
                continue
            psnr_, pcos_ = _agreement(hv, c)
            points.append({"module": point, "value": op.outputs[0].name,
                           "snr_db": psnr_, "cosine": pcos_})
            if point == module:
                snr, cos = psnr_, pcos_
        if snr is None:
            module = None
        moved[op.outputs[0].name] = (psnr, pcos)
        ins = tuple(n for names in op.inputs.values() for n in names
                    if n not in program.consts)
        ops.append(OpDrift(i, op.outputs[0].name, op.type, module, m.scope, ins, snr, cos,
                           None, psnr, pcos, None))
        if progress is not None:
            progress(i + 1, total)
    ops_t = derive(ops, [v.name for v in program.inputs], in_prec)
    return Attribution(ops=ops_t, top=_rank(ops_t, "delta_snr_db"),
                       precision_top=_rank(ops_t, "precision_delta_snr_db"),
                       modules=_summaries(ops_t), points=tuple(points), compute=compute,
                       variant=variant, fixture=fixture,
                       unmapped=sum(1 for o in ops_t if o.module is None),
                       seconds=time.perf_counter() - t0, input_precision=in_prec)


# ----------------------------------------------------------------------------- validation

def check_document(doc: Any) -> list[str]:
    """List the problems of a stored attribution document (empty when it is consistent).

    Every ΔSNR, the ``top`` and ``precision_top`` rankings and the per-module summary are
    recomputed from the ops' SNRs and input lists; a document that disagrees is refused.

    Parameters
    ----------
    doc : Any
        The decoded JSON document (as :meth:`Attribution.as_dict` writes it).

    Returns
    -------
    list of str
        One problem for a document that is not a mapping with an ``ops`` list, is
        malformed, lists an op twice or used another ceiling than :data:`CEILING_DB`;
        otherwise one per inconsistency found (empty when none).
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("ops"), list):
        return ["the attribution is not a mapping with an ops list"]
    try:
        att = Attribution.from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:
        return [f"the attribution is malformed: {exc!r}"]
    names = [o.name for o in att.ops]
    if len(set(names)) != len(names):
        return ["the attribution lists an op twice"]
    produced = set(names)
    inputs = {n for o in att.ops for n in o.inputs if n not in produced}
    if att.ceiling_db != CEILING_DB:
        return [f"the attribution used a ceiling of {att.ceiling_db} dB, not {CEILING_DB}"]
    derived = derive(att.ops, inputs, att.input_precision)
    problems = []
    for a, b in zip(att.ops, derived):
        for key in ("delta_snr_db", "precision_delta_snr_db"):
            x, y = getattr(a, key), getattr(b, key)
            if (x is None) != (y is None) or (x is not None and not _close(x, y)):
                problems.append(f"op {a.name}: stored {key} {x} does not follow from the "
                                f"SNRs ({y})")
                break
    if [o.name for o in att.top] != [o.name for o in _rank(att.ops, "delta_snr_db")]:
        problems.append("top is not the ops ranked by conversion ΔSNR")
    if [o.name for o in att.precision_top] != \
            [o.name for o in _rank(att.ops, "precision_delta_snr_db")]:
        problems.append("precision_top is not the ops ranked by precision ΔSNR")
    if [asdict(m) for m in att.modules] != [asdict(m) for m in _summaries(att.ops)] and \
            not _close_modules(att.modules, _summaries(att.ops)):
        problems.append("the per-module summary does not follow from the ops")
    return problems


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _close_modules(a: Sequence[ModuleDrift], b: Sequence[ModuleDrift]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        dx, dy = asdict(x), asdict(y)
        for k in dx:
            if isinstance(dx[k], float) and isinstance(dy[k], float):
                if not _close(dx[k], dy[k]):
                    return False
            elif dx[k] != dy[k]:
                return False
    return True
