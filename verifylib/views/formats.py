"""Number formatters of the cross-run comparison, for its sentences and its page alike.

:mod:`verifylib.compare.summary` writes SNRs, their changes and WERs into the *what
changed* lines with these functions, and :mod:`verifylib.views.compare` into the page's
tables (as ``db`` and ``pct`` in ``compare_body.html.j2``), so a figure reads the same
wherever it appears. They take numbers and return text: nothing here reads a run or
compares one.
"""

from __future__ import annotations

import math
from typing import Any

from verifylib.numerics.attribution import CEILING_DB

__all__ = ["snr_cell", "snr_text", "snr_change", "capped_snr", "wer_text", "run_date"]


def snr_cell(value: Any) -> str:
    """Format an SNR for a table cell: ``inf`` for exact, two decimals, a dash for nothing.

    Parameters
    ----------
    value : float or None
        The SNR in dB.

    Returns
    -------
    str
    """
    if value is None:
        return "—"
    v = float(value)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.2f}"


def snr_text(v: float | None) -> str:
    """Format an SNR for a sentence: one decimal and ``dB``.

    ``inf dB`` for exact, a dash for nothing.

    Parameters
    ----------
    v : float or None
        The SNR in dB.

    Returns
    -------
    str
    """
    if v is None:
        return "—"
    if math.isinf(v):
        return "inf dB" if v > 0 else "-inf dB"
    return f"{v:.1f} dB"


def capped_snr(v: float | None) -> float | None:
    """Cap an SNR for differencing at :data:`verifylib.numerics.attribution.CEILING_DB`.

    At or above the ceiling an SNR counts as exact (float32 rounding alone gives about
    145-150 dB), so an exact run and one off by rounding do not read as a change.

    Parameters
    ----------
    v : float or None
        The SNR in dB.

    Returns
    -------
    float or None
        None for nothing measured or NaN.
    """
    if v is None or math.isnan(v):
        return None
    return min(v, CEILING_DB)


def snr_change(a: float | None, b: float | None) -> str:
    """Say how an SNR changed from ``a`` to ``b``, for a sentence.

    Parameters
    ----------
    a, b : float or None
        The baseline's SNR and another run's, in dB.

    Returns
    -------
    str
        ``unchanged``, ``within 0.1 dB``, a signed change such as ``−3.2 dB`` (both capped
        by :func:`capped_snr`), or ``not comparable`` when either is missing.
    """
    ca, cb = capped_snr(a), capped_snr(b)
    if ca is None or cb is None:
        return "not comparable"
    if a == b:
        return "unchanged"
    d = cb - ca
    if abs(d) < 0.05:
        return "within 0.1 dB"
    return f"{'+' if d > 0 else '−'}{abs(d):.1f} dB"


def wer_text(value: Any) -> str:
    """Format a WER (or CER) as the report does: a fraction to three decimals, or a dash.

    One unit everywhere: the report, the compare page and its sentences all write 0.250
    for a quarter of the words wrong.

    Parameters
    ----------
    value : float or None
        The rate as a fraction.

    Returns
    -------
    str
    """
    return "—" if value is None else f"{float(value):.3f}"


def delta_text(value: Any, unit: str) -> str:
    """Format a difference from a baseline with its sign (``+0.050``, ``-3.21 dB``).

    Parameters
    ----------
    value : float or None
        The difference: a rate fraction, or dB (``unit == "dB"``).
    unit : str
        ``dB`` or ``rate``.

    Returns
    -------
    str
        A dash for nothing; ``±inf dB`` where one side is exact.
    """
    if value is None:
        return "—"
    v = float(value)
    if unit != "dB":
        return f"{v:+.3f}"
    if math.isinf(v):
        return ("+inf" if v > 0 else "-inf") + " dB"
    return f"{v:+.2f} dB"


def run_date(run_id: str) -> str:
    """Format the UTC minute a run id was made (``2026-12-04 04:59 UTC``), or "" if none.

    Parameters
    ----------
    run_id : str
        A run id (:func:`verifylib.evidence.layout.run_id_time` reads its stamp).

    Returns
    -------
    str
    """
    from verifylib.evidence.layout import run_id_time

    try:
        return run_id_time(run_id).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return ""
