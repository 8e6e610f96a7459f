"""Parity statistics and the fp32-v1 / fp16-v1 pass rule, in float64.

Why the statistic is written here: coremltools' ``compute_snr_and_psnr`` adds ``1e-10`` to
the noise power (and ``1e-5`` to the signal), so its SNR saturates near
``100 + 10*log10(mean signal power)`` dB and treats the second argument as the signal
(docs/facts.md; docs/runtime-contract.md §7.3). A ``SNR >= 100 dB`` policy cannot be
judged with it. Here the reference is the signal, every sum is taken in float64, there is
no epsilon floor, and identical tensors give ``+inf`` (stored as the string ``"inf"`` by
the canonical JSON).

The judgement is kept pure and cheap: a stored measurement carries its sufficient
statistics (the sums), the rule recomputes SNR and cosine from them, refuses stored
figures that disagree, checks that the stored policy is byte-for-byte the packaged
resource of that id, and applies the thresholds. ``verifylib verify`` runs the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from verifylib.errors import ContractBroken, EvidenceInvalid
from verifylib.numerics.scoring import Policy

FP32_POLICY = "fp32-v1"
"""Policy of the required gates (the fp32 variant)."""

FP16_POLICY = "fp16-v1"
"""Policy of the informational fp16 gates."""

POLICY_OF_VARIANT = {"fp32": FP32_POLICY, "fp16": FP16_POLICY}

PAIR_POLICY = "pair-v1"
"""Policy of ``export.pair``, and of ``parity.program`` against a quantized model file."""

FULL_PRECISION_FTYPES = ("f32", "f16")
"""Model-file tensor types that store the weights without quantization."""

QUANTIZED_FTYPES = ("q8_0", "q5_1", "q5_0", "q4_1", "q4_0")
"""Quantized model-file tensor types the reader dequantizes (a lossy source)."""


@dataclass(frozen=True)
class PolicyChoice:
    """Which parity policy applies, chosen before anything is measured.

    Attributes
    ----------
    precision : str
        The encoder's declared compute precision (``fp32``, ``fp16`` or ``mixed``).
    source_ftype : str or None
        The tensor type of the model file the reference is built from; None for a model
        that is not a ggml file (a Hugging Face or CTranslate2 folder).
    policy_id : str
        The policy: ``fp32-v1`` for an fp32 program, ``fp16-v1`` for an fp16 or mixed one,
        ``pair-v1`` (that ftype's floor) for any program against a quantized source.
    why : str
        The rule that chose it, in words.
    """

    precision: str
    source_ftype: str | None
    policy_id: str
    why: str


def choose_parity_policy(precision: str, source_ftype: str | None) -> PolicyChoice:
    """Choose the policy of a program parity gate from what was declared, not measured.

    A verifier calls this again on the recorded precision and ftype; the choice is a pure
    function of the two.

    Parameters
    ----------
    precision : str
        The declared compute precision of the encoder: ``fp32``, ``fp16`` or ``mixed``.
    source_ftype : str or None
        The reference's model-file tensor type, or None for a non-ggml source.

    Returns
    -------
    PolicyChoice

    Raises
    ------
    EvidenceInvalid
        For a precision or ftype outside the known sets.
    """
    if precision not in ("fp32", "fp16", "mixed"):
        raise EvidenceInvalid(f"unknown declared precision {precision!r}")
    if source_ftype is not None and source_ftype not in FULL_PRECISION_FTYPES + QUANTIZED_FTYPES:
        raise EvidenceInvalid(f"unknown model-file tensor type {source_ftype!r}")
    if source_ftype in QUANTIZED_FTYPES:
        return PolicyChoice(precision, source_ftype, PAIR_POLICY,
                            f"the reference is rebuilt from a {source_ftype} (quantized) model "
                            f"file: its quantization error is not the encoder's, so that "
                            f"ftype's floor in {PAIR_POLICY} applies; only a full-precision "
                            f"source bounds the conversion error tightly")
    if precision == "fp32":
        return PolicyChoice(precision, source_ftype, FP32_POLICY,
                            "the encoder declares float32 compute")
    return PolicyChoice(precision, source_ftype, FP16_POLICY,
                        f"the encoder declares {precision} compute (float16 values)")


def pair_floor(rules: dict, ftype: str, precision: str) -> tuple[float, float]:
    """Return ``(snr_db_min, cosine_min)`` of ``pair-v1`` for a model ftype and precision.

    Parameters
    ----------
    rules : dict
        The loaded ``pair-v1`` rules.
    ftype : str
        The model file's tensor type.
    precision : str
        The encoder's declared precision (``mixed`` reads the ``fp16`` row).

    Returns
    -------
    tuple of float

    Raises
    ------
    EvidenceInvalid
        If the policy has no row for them.
    """
    row = rules.get("floors", {}).get(ftype, {}).get("fp16" if precision == "mixed"
                                                     else precision)
    if not isinstance(row, dict):
        raise EvidenceInvalid(f"{rules.get('id')} has no floor for ftype {ftype!r} and "
                              f"precision {precision!r}")
    return float(row["snr_db_min"]), float(row["cosine_min"])


def as_float(value: Any) -> float:
    """Read a number written by the canonical JSON (``"inf"``, ``"-inf"``, ``"nan"`` too)."""
    if isinstance(value, str):
        if value in ("inf", "-inf", "nan"):
            return float(value)
        raise EvidenceInvalid(f"not a number: {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EvidenceInvalid(f"not a number: {value!r}")
    return float(value)


def snr_from_energies(signal_energy: float, noise_energy: float) -> float:
    """SNR in dB from the summed squares of the reference and of the error.

    ``+inf`` when the error is exactly zero (and the reference is not), ``-inf`` when the
    reference is zero and the error is not, NaN when both are zero or either is NaN.
    """
    s, n = float(signal_energy), float(noise_energy)
    if math.isnan(s) or math.isnan(n) or s < 0 or n < 0:
        return math.nan
    if n == 0.0:
        return math.inf if s > 0 else math.nan
    if s == 0.0:
        return -math.inf
    if math.isinf(s) or math.isinf(n):
        return math.nan
    return 10.0 * math.log10(s / n)


def cosine_from_sums(dot: float, signal_energy: float, candidate_energy: float) -> float:
    """Cosine similarity from ``sum(ref*cand)``, ``sum(ref^2)`` and ``sum(cand^2)``."""
    d, s, c = float(dot), float(signal_energy), float(candidate_energy)
    if any(math.isnan(v) or math.isinf(v) for v in (d, s, c)) or s <= 0 or c <= 0:
        return math.nan
    return d / math.sqrt(s * c)


@dataclass(frozen=True)
class Metrics:
    """Agreement of a candidate tensor with a reference tensor (reference = signal).

    Attributes
    ----------
    n : int
        Number of elements.
    signal_energy, noise_energy, dot, candidate_energy : float
        ``sum(ref^2)``, ``sum((cand-ref)^2)``, ``sum(ref*cand)``, ``sum(cand^2)`` in float64.
    snr_db, cosine : float
        Derived from the sums by :func:`snr_from_energies` and :func:`cosine_from_sums`.
    max_abs_error, mean_abs_error : float
        Recorded, not gating.
    finite : bool
        Whether every candidate element is finite.
    """

    n: int
    signal_energy: float
    noise_energy: float
    dot: float
    candidate_energy: float
    snr_db: float
    cosine: float
    max_abs_error: float
    mean_abs_error: float
    finite: bool

    def as_dict(self) -> dict:
        """Return the metrics as a plain dict, one key per field.

        Returns
        -------
        dict
            Field name -> value, as stored in the evidence.
        """
        return {"n": self.n, "signal_energy": self.signal_energy,
                "noise_energy": self.noise_energy, "dot": self.dot,
                "candidate_energy": self.candidate_energy, "snr_db": self.snr_db,
                "cosine": self.cosine, "max_abs_error": self.max_abs_error,
                "mean_abs_error": self.mean_abs_error, "finite": self.finite}


def compare(reference, candidate) -> Metrics:
    """Measure ``candidate`` against ``reference`` in float64.

    Parameters
    ----------
    reference, candidate : array-like
        Tensors of the same shape (numpy arrays or CPU torch tensors).

    Raises
    ------
    verifylib.errors.ContractBroken
        If the shapes differ (a shape mismatch is never silently broadcast).
    """
    r = np.asarray(reference, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if r.shape != c.shape:
        raise ContractBroken(f"shape mismatch: reference {r.shape}, candidate {c.shape}")
    r, c = r.ravel(), c.ravel()
    err = c - r
    signal = float(np.dot(r, r))
    noise = float(np.dot(err, err))
    dot = float(np.dot(r, c))
    cand = float(np.dot(c, c))
    abs_err = np.abs(err)
    return Metrics(n=int(r.size), signal_energy=signal, noise_energy=noise, dot=dot,
                   candidate_energy=cand, snr_db=snr_from_energies(signal, noise),
                   cosine=cosine_from_sums(dot, signal, cand),
                   max_abs_error=float(abs_err.max()) if r.size else 0.0,
                   mean_abs_error=float(abs_err.mean()) if r.size else 0.0,
                   finite=bool(np.isfinite(c).all()))


def frame_snr_db(reference, candidate) -> list[float]:
    """SNR per time frame of an encoder output shaped ``(1, frames, d_model)``.

    Returns
    -------
    list of float
        One SNR (dB, float64, no floor) per frame.
    """
    r = np.asarray(reference, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if r.shape != c.shape or r.ndim != 3:
        raise ContractBroken(f"expected two (1, frames, d) tensors, got {r.shape} and {c.shape}")
    sig = np.einsum("btd,btd->t", r, r)
    err = c - r
    noise = np.einsum("btd,btd->t", err, err)
    return [snr_from_energies(s, n) for s, n in zip(sig.tolist(), noise.tolist())]


def error_histogram(reference, candidate, bins: int = 80, floor: float = 1e-12) -> dict:
    """Histogram of the absolute error ``|candidate - reference|`` on log-spaced bins.

    Exact zeros cannot sit on a log axis, so they are counted apart (``zeros``); errors
    between 0 and ``floor`` fall in the first bin.

    Returns
    -------
    dict
        ``edges`` (bins + 1 floats, from ``floor`` to the largest error), ``counts`` (bins
        ints), ``zeros``, ``nonfinite`` and ``max_abs_error``.
    """
    err = np.abs(np.asarray(candidate, dtype=np.float64)
                 - np.asarray(reference, dtype=np.float64)).ravel()
    finite = np.isfinite(err)
    nonfinite = int((~finite).sum())
    err = err[finite]
    zeros = int((err == 0).sum())
    nz = np.maximum(err[err > 0], floor)
    top = float(err.max()) if err.size else 0.0
    hi = max(top, floor * 10)
    edges = np.logspace(math.log10(floor), math.log10(hi), bins + 1)
    counts, _ = np.histogram(nz, bins=edges)
    return {"edges": edges.tolist(), "counts": counts.astype(int).tolist(), "zeros": zeros,
            "nonfinite": nonfinite, "max_abs_error": top}


def policy_record(policy: Policy) -> dict:
    """Return what the evidence stores about a policy: id, digest of the resource, its rules.

    Parameters
    ----------
    policy : Policy
        A loaded policy.

    Returns
    -------
    dict
        ``id``, ``sha256`` and ``rules``.
    """
    return {"id": policy.id, "sha256": policy.sha256, "rules": policy.rules}


def snr_series(values: Sequence[Any]) -> list[float]:
    """Return stored SNR values (possibly ``"inf"`` strings) as floats, for plotting.

    Parameters
    ----------
    values : sequence
        The stored values.

    Returns
    -------
    list of float
        Each value through :func:`as_float`.
    """
    return [as_float(v) for v in values]
