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
(``encoder_layers_2_fc1_weight``, in an fp16 program ``…_weight_to_fp16``). A program
traced from openai-whisper's modules (whisper.cpp's own ``convert-whisper-to-coreml.py``)
carries openai-whisper's names instead (``blocks_2_mlp_0_weight``, ``blocks_2_attn_ln``,
``ln_post``, ``positional_embedding``); each is an alias of the same HF module
(:func:`openai_module_path`), so attribution compares it with the same HF reference
output. So

1. an op reading a ``*_weight`` / ``*_bias`` / gamma constant is the op of that module
   (the longest module path, HF or openai alias, whose underscored form ends the
   constant's name): ``linear`` -> ``layers.k.fc1``, ``conv`` -> ``conv1``, ``layer_norm`` ->
   ``layers.k.final_layer_norm``; its output is that module's output, except for a weight
   read by an elementwise op (the positional embedding's ``add``), whose output is the
   ``embeddings`` point (the input of ``layers.0``, as the HF encoder feeds it). A
   constant read by several ops names no module: coremltools merges identical constants
   (a freshly initialized model's layer norms all have gamma 1 and beta 0), so its name
   says nothing about which op is whose;
2. a weight or gamma constant whose name says nothing (``const_4_to_fp16``: openai-whisper's
   layers cast their weights in ``forward``, and coremltools names the folded result
   anonymously) is identified by its values, when the HF encoder's parameters are given:
   it is that module's when its values are exactly one HF weight's, as stored (float32)
   or rounded to float16. A value two weights share, or none (a weight the converter
   folded with a scale, a bias divided by a gamma), identifies nothing;
3. the output of ``layers.k.self_attn.out_proj`` is also ``layers.k.self_attn``'s output;
4. a ``gelu`` applied to ``layers.k.fc1``'s output (a ``linear``, or the 1x1 ``conv`` the
   ANE-optimized converter puts in its place) is ``layers.k.activation_fn``;
5. the ``x`` of the layer norm opening block ``k + 1`` (or of the final ``layer_norm``) is
   block ``k``'s output, ``layers.k``; the ``x`` of the one opening block 0 is the
   ``embeddings`` point;
6. every other op (reshapes, transposes, the attention's matmuls and softmax, casts) has
   no HF counterpart: it is listed with ``module`` None and its ``scope`` (the region it
   sits in: the common prefix of the weighted ops around it), never dropped.

A value is compared with its HF module's output when it has the same shape, or when it is
that output in the ANE layout (``(batch, channels, 1, frames)`` for HF's
``(batch, frames, channels)``, as the ANE-optimized converter lays out every value between
its 1x1 convs): the same numbers, read in the other order. How many ops were compared is
part of the result (:attr:`Attribution.mapped` of :attr:`Attribution.executed`); drift an
unmapped op introduces is not attributed to it (it shows at the next compared value), and
:func:`mapping_sentence` and :func:`empty_ranking_sentence` say so wherever the result is
printed or displayed.

Why hand-written: coremltools' ``MLModelComparator`` needs the Core ML runtime (macOS) and
compares two Core ML models, not a program with its torch source; nothing else attributes
drift per MIL op.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import numpy as np

from verifylib.errors import ParametersInvalid
from verifylib.numerics.attribution import (
    CEILING_DB,
    Attribution,
    ModuleDrift,
    OpDrift,
    OpFigures,
)
from verifylib.numerics.layouts import relayout_for
from verifylib.numerics.memory import trim_heap, trimmed
from verifylib.numerics.program_map import EMBEDDINGS, map_program, region

TOP_N = 10
"""How many ops :attr:`Attribution.top` and :attr:`Attribution.precision_top` list."""


_REARRANGING = ("transpose", "reshape", "expand_dims", "squeeze", "split")
"""Ops that move values without arithmetic: the output (for ``split``, its outputs taken
together) has exactly the input's sums, so the input's precision figures are reused."""



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


def reference_layout(value, shape: tuple):
    """Return ``value`` laid out as an HF value of ``shape``, or None when it is not.

    The ANE-optimized converter computes every value between its 1x1 convs as
    ``(batch, channels, 1, frames)``; HF's is ``(batch, frames, channels)``. The two hold
    the same numbers in another order, so such a value is compared after the relayout
    (every layout of :mod:`verifylib.numerics.layouts`); any other shape difference means
    the values are not the same quantity.

    Parameters
    ----------
    value : torch.Tensor
        The program's value.
    shape : tuple of int
        The HF module output's shape.

    Returns
    -------
    torch.Tensor or None
        ``value`` itself when the shapes agree, its ``(batch, frames, channels)`` view for
        a known layout, else None.
    """
    if tuple(value.shape) == tuple(shape):
        return value
    layout = relayout_for(tuple(value.shape), shape) if len(shape) == 3 else None
    return None if layout is None else layout.apply(value)


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


_O = TypeVar("_O", bound=OpFigures)


def rank(ops: Sequence[_O], key: str) -> tuple[_O, ...]:
    """Rank the ops that lose something by ``key``, worst first (at most :data:`TOP_N`).

    What :attr:`Attribution.top` and :attr:`Attribution.precision_top` are, and what a
    stored document's rankings are re-derived as.

    Parameters
    ----------
    ops : sequence of OpFigures
        The ops, with their ΔSNRs.
    key : {"delta_snr_db", "precision_delta_snr_db"}
        The ΔSNR ranked.

    Returns
    -------
    tuple
        The ops whose ``key`` is negative, most negative first (ties in program order).
    """
    # Only ops that lose something are ranked: with an exact conversion nothing is "worst".
    scored = [o for o in ops if getattr(o, key) is not None and getattr(o, key) < 0]
    scored.sort(key=lambda o: (getattr(o, key), o.index))
    return tuple(scored[:TOP_N])


def module_summaries(ops: Sequence[OpFigures]) -> tuple[ModuleDrift, ...]:
    """Summarize the ops per region of the encoder, in program order.

    What :attr:`Attribution.modules` is, and what a stored document's summary is
    re-derived as.

    Parameters
    ----------
    ops : sequence of OpFigures
        The ops, with their ΔSNRs.

    Returns
    -------
    tuple of ModuleDrift
        One per region (:func:`verifylib.numerics.program_map.region` of each op's module,
        or of its scope when unmapped), in the order the regions first appear.
    """
    order: list[str] = []
    groups: dict[str, list[OpFigures]] = {}
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


def derive(ops: Sequence[OpFigures], input_names: Iterable[str],
           input_precision_snr: Mapping[str, float] | None = None) -> tuple[OpDrift, ...]:
    """Recompute every ΔSNR from the ops' SNRs and input lists.

    The attribution and the validator share this: a stored document whose ΔSNR, ``top``
    or ``modules`` do not follow from its SNRs is refused
    (:func:`verifylib.evidence.parity.rules.attribution_problems`).

    Parameters
    ----------
    ops : sequence of OpFigures
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


@dataclass
class ExecutionWatch:
    """What a caller wants of the two executions an attribution makes anyway.

    :func:`attribute` executes the program twice on its input, in lockstep: the candidate
    (the compute mode asked for, float16 rounding as the program declares it) and a float64
    reference without that rounding. Stage 04 measures the fixture with the same two
    executions (the second only for a program with no float16 value, where the rounding
    changes nothing), so it watches them here instead of running them again.

    Attributes
    ----------
    taps : frozenset of str
        Value names whose arrays are handed over as they are computed.
    on_candidate, on_reference : callable, optional
        Receive ``(name, array)`` for each tap of that execution (valid during the call);
        None for an execution the caller does not want.
    candidate, reference : Execution or None
        Filled by :func:`attribute`: each wanted execution's outputs and seconds (no taps
        kept), as :func:`verifylib.numerics.mil_exec.execute` with ``on_tap`` returns it.
    """

    taps: frozenset[str] = frozenset()
    on_candidate: Callable[[str, np.ndarray], None] | None = None
    on_reference: Callable[[str, np.ndarray], None] | None = None
    candidate: Any = None
    reference: Any = None


def attribute(program, encoder, mel: np.ndarray, *, compute: str = "float32",
              variant: str | None = None, fixture: str | None = None,
              hf: Mapping[str, np.ndarray] | None = None,
              progress=None, watch: ExecutionWatch | None = None) -> Attribution:
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
    watch : ExecutionWatch, optional
        Taps of the two executions to hand over, and their results to fill in.

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
    mapping = map_program(program, (n for n, _ in encoder.named_modules()),
                          parameters=encoder.named_parameters())
    needed = {p for m in mapping for p in m.points}
    if hf is not None and needed <= set(hf):
        fetch, stream = hf.get, None
    else:
        stream = _HfStream(encoder, mel, needed)
        fetch = stream.get
    try:
        return _attribute(program, mapping, mel, fetch, compute=compute, variant=variant,
                          fixture=fixture, progress=progress, t0=t0,
                          watch=watch if watch is not None else ExecutionWatch())
    finally:
        if stream is not None:
            stream.close()
        trim_heap()


def _attribute(program, mapping, mel, fetch, *, compute, variant, fixture, progress,
               t0, watch: ExecutionWatch) -> Attribution:
    import torch

    from verifylib.numerics.mil_exec import Execution, Stepper

    inp = program.inputs[0]
    feeds = {inp.name: mel}
    cand = Stepper(program, feeds, compute=compute)
    ref = Stepper(program, feeds, compute="float64", round_fp16=False)
    in_prec = {}
    in_prec[inp.name] = _agreement(ref.env[inp.name], cand.env[inp.name])[0]
    ops: list[OpDrift] = []
    points: list[dict] = []
    moved: dict[str, tuple] = {}
    # An op is one row, named by its first output; an op with several outputs (split)
    # is measured on all of them together, and a reader of any of them reads that row.
    row_of: dict[str, str] = {}
    delivered: set[str] = set()
    total = len(program.ops)
    # Both executions and the HF forward free activations out of order (memory.trimmed).
    for (i, op, cvals), (_, _, rvals) in trimmed(zip(cand.steps(), ref.steps())):
        m = mapping[i]
        c, r = cvals[0], rvals[0]
        floating = c.is_floating_point()
        src = row_of.get(op.inputs["x"][0], op.inputs["x"][0]) if op.inputs.get("x") else None
        if not floating:
            psnr = pcos = None
        elif op.type in _REARRANGING and src in moved:
            # Moving values without arithmetic keeps exactly the input's sums, so the
            # input's figures are reused.
            psnr, pcos = moved[src]
        elif len(cvals) > 1:
            psnr, pcos = _agreement(torch.cat([t.reshape(-1) for t in rvals]),
                                    torch.cat([t.reshape(-1) for t in cvals]))
        else:
            psnr, pcos = _agreement(r, c)
        snr = cos = None
        module = m.module
        for point in m.points:
            hv = fetch(point)
            cv = reference_layout(c, tuple(hv.shape)) if floating and hv is not None else None
            if cv is None:
                continue
            psnr_, pcos_ = _agreement(hv, cv)
            points.append({"module": point, "value": op.outputs[0].name,
                           "snr_db": psnr_, "cosine": pcos_})
            if point == module:
                snr, cos = psnr_, pcos_
        if snr is None:
            module = None
        moved[op.outputs[0].name] = (psnr, pcos)
        # By parameter name: a package's op inputs are a protobuf map, whose order varies
        # from one process to the next (two runs of one package differed).
        ins = tuple(row_of.get(n, n) for _, names in sorted(op.inputs.items()) for n in names
                    if n not in program.consts)
        for v in op.outputs[1:]:
            row_of[v.name] = op.outputs[0].name
        ops.append(OpDrift(i, op.outputs[0].name, op.type, module, m.scope, ins, snr, cos,
                           None, psnr, pcos, None))
        _hand_over(watch, op.outputs, cvals, rvals, delivered)
        if progress is not None:
            progress(i + 1, total)
    # A tap that is a function input (no op produces it), as execute() delivers it.
    for name in sorted(watch.taps - delivered):
        for stepper, sink in ((cand, watch.on_candidate), (ref, watch.on_reference)):
            if sink is not None and name in stepper.env:
                sink(name, stepper.env[name].detach().cpu().numpy())
    if watch.on_candidate is not None:
        watch.candidate = Execution(outputs=cand.outputs(), taps={}, seconds=cand.seconds,
                                    compute=compute)
    if watch.on_reference is not None:
        watch.reference = Execution(outputs=ref.outputs(), taps={}, seconds=ref.seconds,
                                    compute="float64")
    ops_t = derive(ops, [v.name for v in program.inputs], in_prec)
    return Attribution(ops=ops_t, top=rank(ops_t, "delta_snr_db"),
                       precision_top=rank(ops_t, "precision_delta_snr_db"),
                       modules=module_summaries(ops_t), points=tuple(points), compute=compute,
                       variant=variant, fixture=fixture,
                       unmapped=sum(1 for o in ops_t if o.module is None),
                       seconds=time.perf_counter() - t0, input_precision=in_prec)


def _hand_over(watch: ExecutionWatch, outputs, cvals, rvals, delivered: set[str]) -> None:
    """Hand the watched values of one step to their sinks (arrays valid during the call)."""
    for out, c, r in zip(outputs, cvals, rvals):
        if out.name not in watch.taps:
            continue
        delivered.add(out.name)
        if watch.on_candidate is not None:
            watch.on_candidate(out.name, c.detach().cpu().numpy())
        if watch.on_reference is not None:
            watch.on_reference(out.name, r.detach().cpu().numpy())

