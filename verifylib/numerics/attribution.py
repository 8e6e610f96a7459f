"""The typed attribution of drift: per op, per module, the rankings, and their sentences.

What :func:`verifylib.numerics.drift.attribute` returns; :meth:`Attribution.as_dict` is the
evidence document ``<gate>-attribution.json``, which the evidence layer reads back typed
(:class:`verifylib.evidence.parity.schema.AttributionEvidence`). The sentences take either,
through the read-only views :class:`OpFigures` and :class:`OpCounts` they share.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping, Protocol, Sequence

from verifylib.numerics.program_map import EMBEDDINGS, map_program, region  # noqa: F401

CEILING_DB = 150.0
"""SNR at and above which a value counts as exact when differencing (float32 rounding of a
tensor alone gives about 145-150 dB)."""


# ----------------------------------------------------------------------------- read-only views

class OpFigures(Protocol):
    """What the derivation reads of an op: an :class:`OpDrift`, or a stored op row.

    The re-derivation of a stored document (:func:`verifylib.numerics.drift.derive`,
    :func:`~verifylib.numerics.drift.rank`, :func:`~verifylib.numerics.drift.module_summaries`)
    runs on the evidence layer's typed rows as on the measurement's own ops.
    """

    @property
    def index(self) -> int:
        """Position in program order."""
        ...

    @property
    def name(self) -> str:
        """The op's (first) output value."""
        ...

    @property
    def type(self) -> str:
        """MIL op type."""
        ...

    @property
    def module(self) -> str | None:
        """The HF module whose output this value is."""
        ...

    @property
    def scope(self) -> str:
        """Region of the encoder the op sits in."""
        ...

    @property
    def inputs(self) -> Sequence[str]:
        """Its non-constant input values."""
        ...

    @property
    def snr_db(self) -> float | None:
        """Conversion SNR."""
        ...

    @property
    def cosine(self) -> float | None:
        """Conversion cosine."""
        ...

    @property
    def delta_snr_db(self) -> float | None:
        """Conversion ΔSNR across the op."""
        ...

    @property
    def precision_snr_db(self) -> float | None:
        """Precision SNR."""
        ...

    @property
    def precision_cosine(self) -> float | None:
        """Precision cosine."""
        ...

    @property
    def precision_delta_snr_db(self) -> float | None:
        """Precision ΔSNR across the op."""
        ...


class OpCounts(Protocol):
    """What the sentences read: an :class:`Attribution`, or the stored document."""

    @property
    def executed(self) -> int:
        """Ops executed."""
        ...

    @property
    def mapped(self) -> int:
        """Ops compared with an HF module's output."""
        ...

    @property
    def precision_compared(self) -> int:
        """Ops compared with the float64 execution."""
        ...


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
        Ops without an HF counterpart (:attr:`mapped` and :attr:`executed` count the
        others and all of them).
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

    @property
    def executed(self) -> int:
        """Ops executed (every op of the program but its constants)."""
        return len(self.ops)

    @property
    def mapped(self) -> int:
        """Ops compared with an HF module's output (the ones conversion drift covers)."""
        return sum(1 for o in self.ops if o.module is not None)

    @property
    def precision_compared(self) -> int:
        """Ops whose output was compared with the float64 execution (floating values)."""
        return sum(1 for o in self.ops if o.precision_snr_db is not None)

    def as_dict(self) -> dict:
        """Return the JSON document (``ops``, ``top``, ``modules`` and the rest).

        Returns
        -------
        dict
            ``ops``, ``top`` and ``precision_top`` as :meth:`OpDrift.row` rows,
            ``modules``, ``points``, ``compute``, ``variant``, ``fixture``, ``unmapped``,
            ``mapped``, ``executed``, ``seconds`` (rounded to ms), ``ceiling_db`` and
            ``input_precision``.
        """
        return {"ops": [o.row() for o in self.ops], "top": [o.row() for o in self.top],
                "precision_top": [o.row() for o in self.precision_top],
                "modules": [asdict(m) for m in self.modules], "points": list(self.points),
                "compute": self.compute, "variant": self.variant, "fixture": self.fixture,
                "unmapped": self.unmapped, "mapped": self.mapped, "executed": self.executed,
                "seconds": round(self.seconds, 3),
                "ceiling_db": self.ceiling_db, "input_precision": dict(self.input_precision)}

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


def mapping_sentence(att: OpCounts) -> str:
    """Say how much of the program conversion drift covers.

    Parameters
    ----------
    att : OpCounts
        The attribution (:class:`Attribution`, or the stored document).

    Returns
    -------
    str
        ``"N of M ops mapped to a reference module; conversion drift was not attributed
        for the other M-N"`` (``"all M ops mapped to a reference module"`` when every op
        was compared).
    """
    m, n = att.mapped, att.executed
    if n and m == n:
        return f"all {n} ops mapped to a reference module"
    return (f"{m} of {n} ops mapped to a reference module; conversion drift was not "
            f"attributed for the other {n - m}")


def empty_ranking_sentence(att: OpCounts, kind: str) -> str:
    """Say what an empty ranking means, claiming nothing about ops that were not compared.

    Parameters
    ----------
    att : OpCounts
        The attribution (:class:`Attribution`, or the stored document).
    kind : {"conversion", "precision"}
        Which ranking is empty (:attr:`Attribution.top` or
        :attr:`Attribution.precision_top`).

    Returns
    -------
    str
        ``"no op loses anything"`` only when every op was compared; otherwise how many
        were compared, and that the others were not.

    Raises
    ------
    ValueError
        For another ``kind``.
    """
    n = att.executed
    if kind == "conversion":
        m = att.mapped
        if n and m == n:
            return "no op loses anything"
        if m == 0:
            return (f"nothing to rank: none of the {n} ops was mapped to a reference "
                    f"module, so conversion drift was not attributed at all")
        return (f"none of the {m} mapped ops loses anything against its reference "
                f"module; conversion drift was not attributed for the other {n - m}")
    if kind == "precision":
        k = att.precision_compared
        if n and k == n:
            return "no op loses anything"
        return (f"none of the {k} ops compared loses anything; the other {n - k} (values "
                f"that are not floating point) were not compared")
    raise ValueError(f"kind must be 'conversion' or 'precision', got {kind!r}")

