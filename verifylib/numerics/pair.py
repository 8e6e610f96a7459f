"""The measurement behind ``export.pair``: the encoder against the model file's encoder.

A prebuilt Core ML encoder is only worth auditing beside a ggml model file if both hold
the same encoder. This module measures that, before any threshold is applied: the
encoder's ML program, executed op by op by :mod:`verifylib.numerics.mil_exec`, against a
reference ``transformers`` ``WhisperEncoder`` (float32, eval, eager attention; the stage
builds it from the model file's own weights), on each named log-mel. Per input it gives
the output's SNR, cosine and largest error (:func:`verifylib.numerics.parity.compare`:
float64, no epsilon, ``+inf`` when identical) and the SNR of the residual stream after
every encoder block, so a mismatch is located: :func:`first_divergent_block` names the
first block below a threshold the policy supplies.

Where the blocks are, on the program side, is found from the program's structure, never
from operation names (upstream's converter names operations after openai-whisper's
modules, coremltools after the trace): :func:`block_taps` follows the chain of residual
``add`` operations of a pre-norm encoder. Each block closes two of them (attention, then
feed-forward); an ``add`` closes a residual branch when one operand is the residual stream
and the other is computed from that stream through a ``layer_norm``. The chain works the
same whether the stream is ``[B, T, C]`` (a plain program) or ``[B, C, 1, T]`` (upstream's
``--optimize-ane`` program); :func:`to_frames` reads either as ``[T, C]``. A program
without that structure is measured at its output only, and the result says why.

Memory: program-side block values are reduced to their SNR as they are computed
(``execute``'s ``on_tap``) and dropped; the reference's block outputs (float32) are held
for one input at a time (``reference.reference_encode``), 0.25 GB at large-v3 shape.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from verifylib.errors import ContractBroken, ParametersInvalid
from verifylib.numerics.layouts import LAYOUTS, relayout_for
from verifylib.numerics.parity import Metrics, compare

PASS_THROUGH_OPS = ("cast", "reshape", "transpose", "squeeze", "expand_dims")
"""Operations that move or retype the residual stream without computing with it: the
skip operand of a residual ``add`` may reach the stream through them."""


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True)
class BlockTaps:
    """Where each encoder block's output is in a program, or why that is not known.

    Attributes
    ----------
    values : tuple of str
        Program value closing block ``i`` (the output of its second residual ``add``);
        empty when unavailable.
    adds : int
        Residual ``add`` operations found on the chain (two per block).
    stream_shape : tuple
        The declared shape of the residual stream (``(1, T, C)`` or ``(1, C, 1, T)``),
        empty when unavailable.
    unavailable : str or None
        Why blocks cannot be tapped; None when they can.
    """

    values: tuple[str, ...]
    adds: int
    stream_shape: tuple
    unavailable: str | None


@dataclass(frozen=True)
class InputPair:
    """The program against the reference on one log-mel.

    Attributes
    ----------
    input : str
        The log-mel's name (``fixture``, ``random``).
    metrics : Metrics
        The encoder output, reference as the signal (sums, SNR, cosine, errors).
    block_snr_db : tuple of float
        SNR (dB) of block ``i``'s output, for every tapped block; empty when untapped.
    first_divergent_block : int or None
        :func:`first_divergent_block` of ``block_snr_db`` at the measurement's threshold.
    reference_seconds, program_seconds : float
        Wall time of the reference forward pass and of the program's operations.
    """

    input: str
    metrics: Metrics
    block_snr_db: tuple[float, ...]
    first_divergent_block: int | None
    reference_seconds: float
    program_seconds: float

    @property
    def snr_db(self) -> float:
        """The output's SNR in dB (``+inf`` for identical outputs)."""
        return self.metrics.snr_db

    @property
    def cosine(self) -> float:
        """The output's cosine similarity."""
        return self.metrics.cosine

    @property
    def max_abs_error(self) -> float:
        """The output's largest absolute error."""
        return self.metrics.max_abs_error

    def to_json(self) -> dict:
        """Return the figures as a JSON-ready dict.

        Returns
        -------
        dict
            ``input``, ``metrics`` (:meth:`Metrics.as_dict`), ``block_snr_db``,
            ``first_divergent_block``, ``reference_seconds``, ``program_seconds``.
        """
        return {"input": self.input, "metrics": self.metrics.as_dict(),
                "block_snr_db": list(self.block_snr_db),
                "first_divergent_block": self.first_divergent_block,
                "reference_seconds": self.reference_seconds,
                "program_seconds": self.program_seconds}


@dataclass(frozen=True)
class PairMeasurement:
    """The audited encoder's program against the reference encoder, per input.

    Attributes
    ----------
    compute : str
        The program's execution mode (``float32`` or ``float64``).
    threshold_db : float or None
        The block SNR below which a block diverges; None when none was given (then no
        block is named).
    inputs : tuple of InputPair
        One per log-mel, in the order given.
    reference_blocks : int
        Encoder layers of the reference.
    blocks_tapped : int
        Program blocks whose output was compared (0 when untapped).
    tap_values : tuple of str
        The program values tapped, block by block.
    taps_unavailable : str or None
        Why no block was tapped; None when every block was.
    seconds : float
        Wall time of the whole measurement.
    """

    compute: str
    threshold_db: float | None
    inputs: tuple[InputPair, ...]
    reference_blocks: int
    blocks_tapped: int
    tap_values: tuple[str, ...]
    taps_unavailable: str | None
    seconds: float

    def input(self, name: str) -> InputPair:
        """Return the measurement of one named log-mel.

        Raises
        ------
        KeyError
            For a name that was not measured.
        """
        for p in self.inputs:
            if p.input == name:
                return p
        raise KeyError(name)

    def to_json(self) -> dict:
        """Return the measurement as a JSON-ready dict (floats stay floats: ``inf`` too).

        Returns
        -------
        dict
            One key per field; ``inputs`` as :meth:`InputPair.to_json`.
        """
        return {"compute": self.compute, "threshold_db": self.threshold_db,
                "inputs": [p.to_json() for p in self.inputs],
                "reference_blocks": self.reference_blocks,
                "blocks_tapped": self.blocks_tapped, "tap_values": list(self.tap_values),
                "taps_unavailable": self.taps_unavailable, "seconds": self.seconds}


# ----------------------------------------------------------------------------- pure parts

def first_divergent_block(block_snr_db: Sequence[float], threshold_db: float | None
                          ) -> int | None:
    """Return the first block whose SNR is below ``threshold_db`` (NaN counts as below).

    Pure, so a verifier re-derives it from stored SNRs.

    Parameters
    ----------
    block_snr_db : sequence of float
        SNR per block, block 0 first.
    threshold_db : float or None
        The threshold; None names no block.

    Returns
    -------
    int or None
        The block index, or None when every block reaches the threshold.
    """
    if threshold_db is None:
        return None
    for i, s in enumerate(block_snr_db):
        if not float(s) >= float(threshold_db):
            return i
    return None


def to_frames(value, frames: int, channels: int) -> np.ndarray:
    """Read a residual-stream (or output) tensor as ``[T, C]``.

    Parameters
    ----------
    value : array-like
        In any layout of :mod:`verifylib.numerics.layouts`: ``[1, T, C]`` (Hugging Face, a
        plain program), ``[1, C, 1, T]`` (upstream's ANE layout), ``[1, C, T]`` or
        ``[T, C]``.
    frames, channels : int
        ``T`` and ``C``, from the reference.

    Returns
    -------
    numpy.ndarray
        A ``[T, C]`` view (no copy).

    Raises
    ------
    verifylib.errors.ContractBroken
        For any other shape (a layout is never guessed).
    """
    a = np.asarray(value)
    layout = relayout_for(a.shape, (frames, channels))
    if layout is None:
        raise ContractBroken(f"a residual stream of shape {a.shape} is in none of the known "
                             f"layouts ({', '.join(x.name for x in LAYOUTS)}) for "
                             f"T={frames}, C={channels}")
    return layout.apply(a)[0]


def _through(name: str, producer: Mapping[str, tuple[int, Any]]) -> str:
    """Follow ``name`` back through pass-through operations to the value they move."""
    seen = 0
    while name in producer and producer[name][1].type in PASS_THROUGH_OPS and seen < 64:
        xs = producer[name][1].inputs.get("x", ())
        if len(xs) != 1:
            break
        name, seen = xs[0], seen + 1
    return name


def _branch_through_norm(branch: str, stream: str, producer: Mapping[str, tuple[int, Any]]
                         ) -> bool:
    """Whether ``branch`` is computed from ``stream`` along a path through a layer_norm."""
    start = producer[stream][0] if stream in producer else -1
    if branch not in producer:
        return False
    # The backward cone of the branch, limited to operations after the stream's producer
    # (nothing earlier can depend on the stream).
    cone: dict[int, Any] = {}
    todo = [branch]
    while todo:
        n = todo.pop()
        if n == stream or n not in producer:
            continue
        i, op = producer[n]
        if i <= start or i in cone:
            continue
        cone[i] = op
        todo.extend(x for names in op.inputs.values() for x in names)
    # Forward over the cone in program order: which ops depend on the stream, and
    # whether a layer_norm lies on such a path.
    reaches: dict[int, bool] = {}
    normed: dict[int, bool] = {}
    for i in sorted(cone):
        op = cone[i]
        r = n_ = False
        for names in op.inputs.values():
            for x in names:
                if x == stream:
                    r = True
                elif x in producer and producer[x][0] in reaches and reaches[producer[x][0]]:
                    r = True
                    n_ = n_ or normed[producer[x][0]]
        reaches[i] = r
        normed[i] = r and (n_ or op.type == "layer_norm")
    last = producer[branch][0]
    return bool(reaches.get(last) and normed.get(last))


def block_taps(program) -> BlockTaps:
    """Find each encoder block's output in a program from its structure alone.

    A pre-norm encoder's residual stream runs through a chain of ``add`` operations: each
    adds, to the stream, a branch computed from it through a ``layer_norm`` (attention,
    then feed-forward). Those residual adds are found by that property, checked to form
    one chain (each one's stream operand is the previous one's output, possibly through
    :data:`PASS_THROUGH_OPS`), and taken two per block.

    Parameters
    ----------
    program : verifylib.numerics.mil_exec.Program
        The loaded program.

    Returns
    -------
    BlockTaps
        The value closing each block, or the reason none can be named.
    """
    producer = {v.name: (i, op) for i, op in enumerate(program.ops) for v in op.outputs}
    closers: list[tuple[str, str]] = []  # (output, stream operand)
    for op in program.ops:
        if op.type != "add" or len(op.outputs) != 1:
            continue
        xs, ys = op.inputs.get("x", ()), op.inputs.get("y", ())
        if len(xs) != 1 or len(ys) != 1:
            continue
        a, b = xs[0], ys[0]
        weights = getattr(program, "constexprs", {})  # decompressed weights are constants
        if a in program.consts or b in program.consts or a in weights or b in weights:
            continue
        for skip, branch in ((a, b), (b, a)):
            stream = _through(skip, producer)
            if _branch_through_norm(branch, stream, producer):
                closers.append((op.outputs[0].name, stream))
                break
    if not closers:
        return BlockTaps((), 0, (), "no residual add: no add operation sums a value with a "
                                    "branch computed from it through a layer_norm (not a "
                                    "pre-norm encoder as written)")
    for k in range(1, len(closers)):
        if closers[k][1] != _through(closers[k - 1][0], producer) \
                and closers[k][1] != closers[k - 1][0]:
            return BlockTaps((), len(closers), (),
                             f"the residual adds do not form one chain: add #{k} "
                             f"({closers[k][0]!r}) does not continue {closers[k - 1][0]!r}")
    if len(closers) % 2:
        return BlockTaps((), len(closers), (),
                         f"{len(closers)} residual adds: not two per block")
    values = tuple(out for out, _ in closers[1::2])
    shape = tuple(program.value_types()[values[0]].shape)
    return BlockTaps(values, len(closers), shape, None)


# ----------------------------------------------------------------------------- measuring

def measure_pair(program, reference_encoder, mels: Mapping[str, np.ndarray], *,
                 compute: str = "float32", threshold_db: float | None = None
                 ) -> PairMeasurement:
    """Measure an encoder's ML program against a reference encoder on named log-mels.

    Parameters
    ----------
    program : Program or path-like
        A :class:`verifylib.numerics.mil_exec.Program`, or a ``.mlpackage`` to load.
    reference_encoder : transformers WhisperEncoder
        The reference (float32, eval, eager attention, CPU).
    mels : mapping
        Name -> log-mel of the program's input shape (``fixture``: a real log-mel,
        ``random``: a seeded random one).
    compute : {"float32", "float64"}
        The program's arithmetic.
    threshold_db : float, optional
        Block SNR below which a block diverges (the policy supplies it); without one,
        no block is named.

    Returns
    -------
    PairMeasurement
        Per input: output SNR, cosine, largest error, SNR per block, the first divergent
        block, timings; and how many blocks were tapped, or why none was.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        With no log-mel, or a program that has not exactly one input and one output.
    verifylib.numerics.mil_exec.MilExecError
        If the program cannot be loaded or executed (an unsupported operation included).
    verifylib.errors.ContractBroken
        If the output cannot be read as the reference's ``[T, C]``.
    """
    from verifylib.numerics.memory import trim_heap
    from verifylib.numerics.mil_exec import Program, load_program
    from verifylib.numerics.reference import reference_encode

    t_start = time.perf_counter()
    if not isinstance(program, Program):
        program = load_program(os.fspath(program))
    if not mels:
        raise ParametersInvalid("measure_pair needs at least one named log-mel")
    if len(program.inputs) != 1 or len(program.outputs) != 1:
        raise ParametersInvalid(f"{program.path}: the program has {len(program.inputs)} "
                                f"inputs and {len(program.outputs)} outputs; an encoder has "
                                "one of each")
    in_name, out_name = program.inputs[0].name, program.outputs[0]
    n_blocks = len(reference_encoder.layers)
    tap_values, unavailable = _block_tap_values(program, n_blocks)
    pairs = []
    for name, mel in mels.items():
        mel = np.ascontiguousarray(np.asarray(mel, dtype=np.float32))
        ref_out, ref_layers, ref_s = reference_encode(reference_encoder, mel)
        frames, channels = ref_out.shape[-2], ref_out.shape[-1]
        ref_blocks = [a for label, a in ref_layers if label.startswith("block ")]
        del ref_layers
        if tap_values and unavailable is None:
            # A block stream in no known layout is named, never compared (nor raised on).
            unavailable = _layout_problem(program, tap_values, frames, channels)
            if unavailable is not None:
                tap_values = ()
        run, snr = _execute_tapped(program, {in_name: mel}, compute, tap_values, ref_blocks,
                                   frames, channels)
        out = run.outputs[out_name]
        metrics = compare(to_frames(ref_out, frames, channels),
                          to_frames(out, frames, channels))
        pairs.append(InputPair(name, metrics, tuple(snr),
                               first_divergent_block(snr, threshold_db), ref_s, run.seconds))
        del ref_blocks, run, out, ref_out
        # Freed activations of a large encoder stay resident in glibc's heaps otherwise.
        trim_heap()
    return PairMeasurement(compute=compute, threshold_db=threshold_db, inputs=tuple(pairs),
                           reference_blocks=n_blocks, blocks_tapped=len(tap_values),
                           tap_values=tuple(tap_values), taps_unavailable=unavailable,
                           seconds=time.perf_counter() - t_start)


def _block_tap_values(program, n_blocks: int) -> tuple[Sequence[str], str | None]:
    """Return the values closing each block, or none and why they cannot be compared."""
    taps = block_taps(program)
    unavailable = taps.unavailable
    if unavailable is None and len(taps.values) != n_blocks:
        unavailable = (f"the program closes {len(taps.values)} blocks, the reference has "
                       f"{n_blocks}")
    return (taps.values if unavailable is None else ()), unavailable


def _layout_problem(program, tap_values: Sequence[str], frames: int,
                    channels: int) -> str | None:
    """Say which block's stream is in none of the known layouts for ``[T, C]``, if one is."""
    types = program.value_types()
    odd = [(i, v, tuple(types[v].shape)) for i, v in enumerate(tap_values)
           if relayout_for(tuple(types[v].shape), (frames, channels)) is None]
    if not odd:
        return None
    i, v, shape = odd[0]
    return (f"block {i}'s stream {v!r} has shape {list(shape)}, in none of "
            f"the known layouts ({', '.join(x.name for x in LAYOUTS)}) "
            f"for T={frames}, C={channels}")


def _execute_tapped(program, feeds: Mapping[str, np.ndarray], compute: str,
                    tap_values: Sequence[str], ref_blocks: list, frames: int,
                    channels: int) -> tuple[Any, list[float]]:
    """Execute the program; each tapped block's SNR is taken as its value is computed."""
    from verifylib.numerics.mil_exec import execute

    index_of = {v: i for i, v in enumerate(tap_values)}
    snr = [math.nan] * len(tap_values)

    def on_tap(value_name, value):
        i = index_of[value_name]
        snr[i] = compare(ref_blocks[i][0], to_frames(value, frames, channels)).snr_db

    run = execute(program, feeds, compute=compute, taps=tap_values, on_tap=on_tap)
    return run, snr
