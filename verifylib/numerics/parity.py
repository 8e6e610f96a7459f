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
from typing import Any, Mapping, Sequence

import numpy as np

from verifylib.errors import ContractBroken, EvidenceInvalid
from verifylib.evidence.gates import Judgement
from verifylib.numerics.scoring import Policy, PolicyError, load_policy

FP32_POLICY = "fp32-v1"
"""Policy of the required gates (the fp32 variant)."""

FP16_POLICY = "fp16-v1"
"""Policy of the informational fp16 gates."""

POLICY_OF_VARIANT = {"fp32": FP32_POLICY, "fp16": FP16_POLICY}


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
    """What the evidence stores about a policy: id, digest of the resource, its rules."""
    return {"id": policy.id, "sha256": policy.sha256, "rules": policy.rules}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _fmt_db(v: float) -> str:
    return "inf" if v == math.inf else ("-inf" if v == -math.inf else f"{v:.2f}")


def recheck_measurement(m: Mapping[str, Any]) -> tuple[float, float, list[str]]:
    """Recompute SNR and cosine of one stored measurement from its sums.

    Returns
    -------
    (snr_db, cosine, problems)
        ``problems`` names any stored figure that disagrees with its sums.
    """
    met = m["metrics"]
    snr = snr_from_energies(as_float(met["signal_energy"]), as_float(met["noise_energy"]))
    cos = cosine_from_sums(as_float(met["dot"]), as_float(met["signal_energy"]),
                           as_float(met["candidate_energy"]))
    problems = []
    label = f"{m.get('input')}/{m.get('execution')}"
    if not _same(snr, as_float(met["snr_db"])):
        problems.append(f"{label}: stored SNR {met['snr_db']} disagrees with its sums ({snr})")
    if not _same(cos, as_float(met["cosine"])):
        problems.append(f"{label}: stored cosine {met['cosine']} disagrees with its sums ({cos})")
    return snr, cos, problems


def judge_parity(evidence: Mapping[str, Any], policy_id: str, kind: str) -> Judgement:
    """The fp32-v1 / fp16-v1 rule on a stored parity record.

    Parameters
    ----------
    evidence : mapping
        ``policy`` (id, sha256, rules), ``variant``, ``artifact`` (``tree_digest`` measured
        and ``exported_tree_digest`` bound by the export stage) and ``measurements``: a
        list of ``{input, execution, metrics}`` whose metrics hold the float64 sums.
    policy_id : str
        The policy the gate must be judged under (``fp32-v1`` or ``fp16-v1``).
    kind : str
        ``"program"`` (MIL-program executor) or ``"runtime"`` (Core ML).

    Returns
    -------
    Judgement
        PASS or FAIL under the policy, with the figures behind the decision.
    """
    try:
        packaged = load_policy(policy_id)
    except PolicyError as exc:
        return Judgement.failed(str(exc))
    pol = evidence.get("policy") or {}
    if pol.get("id") != policy_id:
        return Judgement.failed(f"evidence was measured under policy {pol.get('id')!r}, not {policy_id}")
    if pol.get("sha256") != packaged.sha256 or pol.get("rules") != packaged.rules:
        return Judgement.failed(f"the stored {policy_id} record differs from the packaged resource "
                                f"(sha256 {pol.get('sha256')} vs {packaged.sha256})")
    rules = packaged.rules
    if evidence.get("variant") != rules["variant"]:
        return Judgement.failed(f"variant {evidence.get('variant')!r} is not {rules['variant']!r}")
    want_input = rules["gated"]["input"]
    want_exec = rules["gated"][f"{kind}_execution"]
    problems: list[str] = []
    art = evidence.get("artifact") or {}
    if not art.get("tree_digest") or art.get("tree_digest") != art.get("exported_tree_digest"):
        problems.append(f"the measured artifact (tree digest {art.get('tree_digest')}) is not "
                        f"the exported one ({art.get('exported_tree_digest')})")
    gated = [m for m in evidence.get("measurements", [])
             if m.get("input") == want_input and m.get("execution") == want_exec]
    if len(gated) != 1:
        return Judgement.failed(f"expected exactly one {want_input}/{want_exec} measurement, found "
                                f"{len(gated)}")
    extra = []
    for m in evidence["measurements"]:
        snr, cos, probs = recheck_measurement(m)
        problems += probs
        if m is not gated[0]:
            extra.append(f"{m['input']}/{m['execution']}: SNR {_fmt_db(snr)} dB, "
                         f"cosine {cos:.9f}")
    snr, cos, _ = recheck_measurement(gated[0])
    smin, cmin = float(rules["pass"]["snr_db_min"]), float(rules["pass"]["cosine_min"])
    met = gated[0]["metrics"]
    figures = (f"{policy_id}, {want_input}/{want_exec}: SNR {_fmt_db(snr)} dB (min {smin:g}), "
               f"cosine {cos:.9f} (min {cmin:g}), max |err| "
               f"{as_float(met['max_abs_error']):.3g}, mean |err| "
               f"{as_float(met['mean_abs_error']):.3g}")
    if extra:
        figures += "; beside it: " + "; ".join(extra)
    if not met.get("finite", False):
        problems.append("the candidate output holds non-finite values")
    if not snr >= smin:
        problems.append(f"SNR {_fmt_db(snr)} dB below {smin:g} dB")
    if not cos >= cmin:
        problems.append(f"cosine {cos:.9f} below {cmin:g}")
    if problems:
        return Judgement.failed("; ".join(problems) + f" — {figures}")
    return Judgement.passed(figures)


def _agree(a: Any, b: float) -> bool:
    try:
        x = as_float(a)
    except EvidenceInvalid:
        return False
    if math.isnan(x) or math.isnan(b) or math.isinf(x) or math.isinf(b):
        return (math.isnan(x) and math.isnan(b)) or x == b
    # The sums are re-taken on another machine's BLAS: agree to 1e-9 relative.
    return abs(x - b) <= 1e-9 * max(abs(x), abs(b)) + 1e-300


def stored_outputs_problems(doc: Mapping[str, Any], ev) -> list[str]:
    """Check the stored output arrays against the measurements that cite them.

    When a parity gate cites its candidate's outputs and the reference's outputs
    (``outputs`` / ``reference_outputs`` ``.npz`` evidence), every stored measurement of
    the gated execution is re-taken from those arrays: its sums must agree. So the
    arrays a researcher opens are the ones the gate was judged on.

    Parameters
    ----------
    doc : mapping
        The parity record (``measurements``, ``kind``).
    ev : verifylib.evidence.records.EvidenceView
        The gate's evidence.

    Returns
    -------
    list of str
        Problems (empty when the arrays agree, or when the gate cites none).
    """
    has_out, has_ref = ev.has("outputs"), ev.has("reference_outputs")
    if not has_out and not has_ref:
        return []
    if has_out != has_ref:
        return ["the gate cites only one of its candidate's and the reference's outputs"]
    out, ref = ev.arrays("outputs"), ev.arrays("reference_outputs")
    execution = "float32" if doc.get("kind") == "program" else "coreml-all"
    problems = []
    seen = 0
    for m in doc.get("measurements", []):
        if m.get("execution") != execution:
            continue
        kind = m.get("input")
        if kind not in out or kind not in ref:
            problems.append(f"no stored {kind} output for the {kind}/{execution} measurement")
            continue
        seen += 1
        try:
            again = compare(ref[kind], out[kind])
        except ContractBroken as exc:
            problems.append(f"stored {kind} outputs: {exc}")
            continue
        met = m.get("metrics") or {}
        for key in ("signal_energy", "noise_energy", "dot", "candidate_energy"):
            if not _agree(met.get(key), getattr(again, key)):
                problems.append(f"{kind}/{execution}: stored {key} {met.get(key)} is not what "
                                f"the stored outputs give ({getattr(again, key)!r})")
                break
    if not seen:
        problems.append(f"the stored outputs back no {execution} measurement")
    return problems


def snr_series(values: Sequence[Any]) -> list[float]:
    """Stored SNR values (possibly ``"inf"`` strings) as floats, for plotting."""
    return [as_float(v) for v in values]
