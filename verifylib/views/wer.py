"""Display of stage 05_wer: transcripts side by side, WER per clip and corpus, a chart."""

from __future__ import annotations

from dataclasses import dataclass

from verifylib.numerics.scoring import RATE_OF, WordCounts, corpus_wer
from verifylib.views import display_html, run_link

SIDE_LABELS = {"source": "HF source", "ggml": "GGML", "hybrid": "hybrid"}



def show(report) -> None:
    """Display the transcripts side by side (escaped), per-clip and corpus WER, and a chart.

    Parameters
    ----------
    report : StageReport
        The result of :func:`verifylib.stages.wer.run`; a note is displayed when the WER
        gates did not run.
    """
    clips = report.result.clips if report.result is not None else []
    if not clips:
        display_html("wer_transcripts.html.j2", style=True, clips=[])
        return
    corpus = report.result.corpus
    has_hybrid = any(c.hybrid is not None for c in clips)
    no_worse = sum(1 for c in clips if c.wer_ggml <= c.wer_source)
    display_html("wer_transcripts.html.j2", style=True, clips=clips, corpus=corpus,
                 corpus_by_unit=report.result.corpus_by_unit, has_hybrid=has_hybrid,
                 no_worse=no_worse, rate_of=RATE_OF, run_link=run_link)
    display_html("wer_counts.html.j2", **counts_table(clips, has_hybrid))
    if any(c.wer_conversion is not None for c in clips):
        display_html("wer_decomposition.html.j2", clips=clips, rate_of=RATE_OF,
                     alignments={c.id: clip_alignments(c) for c in clips})
    _wer_chart(clips, has_hybrid)
    if report.result.seam:
        display_html("wer_seam.html.j2", **seam_table(report.result.seam), rate_of=RATE_OF)
        _seam_chart(report.result.seam)


def seam_table(seam) -> dict:
    """Lay ``wer.seam``'s clips out as one row per fixture, GGML beside each seam variant.

    Parameters
    ----------
    seam : list of SeamClipResult
        :attr:`verifylib.evidence.wer.result.WerResult.seam`.

    Returns
    -------
    dict
        ``variants`` (in measured order) and ``rows``: per fixture its id, unit, GGML's
        rate and text, and per variant the seam's rate, rate against GGML, cause and text.
    """
    variants = list(dict.fromkeys(c.variant for c in seam))
    rows: dict[str, dict] = {}
    for c in seam:
        row = rows.setdefault(c.id, {"id": c.id, "unit": c.unit, "ggml": c.rate_ggml,
                                     "ggml_text": c.ggml, "by": {}})
        row["by"][c.variant] = c
    return {"variants": variants, "rows": list(rows.values())}


def _seam_chart(seam) -> None:
    import matplotlib.pyplot as plt
    variants = list(dict.fromkeys(c.variant for c in seam))
    ids = list(dict.fromkeys(c.id for c in seam))
    by = {(c.id, c.variant): c for c in seam}
    fig, ax = plt.subplots(figsize=(7, 1.0 + 0.35 * len(ids)))
    height = 0.8 / (len(variants) + 1)
    ys = range(len(ids))
    ax.barh([y for y in ys], [by[(i, variants[0])].rate_ggml for i in ids], height,
            label="GGML", color="#546e7a")
    for k, v in enumerate(variants, start=1):
        ax.barh([y + k * height for y in ys], [by[(i, v)].rate for i in ids], height,
                label=f"seam {v}")
    ax.set_yticks([y + height * len(variants) / 2 for y in ys], ids)
    ax.invert_yaxis()
    ax.set_xlabel("rate against the reference (WER, or CER where scored in characters)")
    ax.set_title("What the encoder program costs through whisper.cpp's decoder")
    ax.legend(fontsize="small")
    fig.tight_layout()
    plt.show()


@dataclass(frozen=True)
class AlignedToken:
    """One step of an alignment: ``equal``, ``substitute``, ``delete`` or ``insert``."""

    kind: str
    reference: str
    hypothesis: str


def aligned(reference: str, hypothesis: str, unit: str) -> list[AlignedToken]:
    """Align two normalized texts with jiwer, word by word or character by character.

    Parameters
    ----------
    reference, hypothesis : str
        Normalized texts.
    unit : {"words", "characters"}
        As the clip was scored (characters with whitespace removed).

    Returns
    -------
    list of AlignedToken
        In order; ``reference`` is empty for an insertion, ``hypothesis`` for a deletion.
    """
    import jiwer

    if unit == "characters":
        ref, hyp = list("".join(reference.split())), list("".join(hypothesis.split()))
    else:
        ref, hyp = reference.split(), hypothesis.split()
    if not ref or not hyp:
        return ([AlignedToken("delete", r, "") for r in ref]
                + [AlignedToken("insert", "", h) for h in hyp])
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    r_words, h_words = out.references[0], out.hypotheses[0]
    tokens = []
    for chunk in out.alignments[0]:
        rs = r_words[chunk.ref_start_idx:chunk.ref_end_idx]
        hs = h_words[chunk.hyp_start_idx:chunk.hyp_end_idx]
        if chunk.type in ("equal", "substitute"):
            tokens += [AlignedToken(chunk.type, r, h) for r, h in zip(rs, hs)]
        elif chunk.type == "delete":
            tokens += [AlignedToken("delete", r, "") for r in rs]
        else:
            tokens += [AlignedToken("insert", "", h) for h in hs]
    return tokens


def clip_alignments(clip) -> dict[str, list[AlignedToken]]:
    """Align the texts a public clip's row shows (nothing for a private clip).

    Parameters
    ----------
    clip : verifylib.evidence.wer.result.ClipResult
        A clip with its normalized texts.

    Returns
    -------
    dict
        ``whisper-cli vs reference``, ``conversion`` (source vs HF-from-ggml) and
        ``implementation`` (HF-from-ggml vs whisper-cli), each a list of tokens.
    """
    n = clip.normalized
    if not n or None in (n.get("reference"), n.get("ggml")):
        return {}
    out = {"whisper-cli vs reference": aligned(n["reference"], n["ggml"], clip.unit)}
    if n.get("from_ggml") is not None and n.get("source") is not None:
        out["conversion: HF source vs HF-from-ggml"] = aligned(n["source"], n["from_ggml"],
                                                              clip.unit)
        out["implementation: HF-from-ggml vs whisper-cli"] = aligned(n["from_ggml"], n["ggml"],
                                                                    clip.unit)
    return out


def counts_table(clips: list, has_hybrid: bool) -> dict:
    """Template variables of the per-clip and corpus edit-count table.

    Parameters
    ----------
    clips : list of ClipResult
        The clips of a WER stage result.
    has_hybrid : bool
        Whether a hybrid (Core ML) column is shown.

    Returns
    -------
    dict
        ``sides`` (key, label), ``rows`` (id, language, unit, reference units, per-side
        counts with ``wer`` or None), ``corpora`` (one per unit: ``unit``, ``rate``
        (WER or CER), ``units`` and per-side summed counts with the corpus rate).
    """
    sides = ["source", "ggml"] + (["hybrid"] if has_hybrid else [])
    totals: dict[str, dict[str, list]] = {}
    units: dict[str, int] = {}
    rows = []
    for c in clips:
        cells = []
        unit_totals = totals.setdefault(c.unit, {k: [] for k in sides})
        units[c.unit] = units.get(c.unit, 0) + c.words
        for k in sides:
            n = c.counts[k]
            if n is not None:
                unit_totals[k].append(n)
                n = {**n, "wer": WordCounts(**n).wer}
            cells.append(n)
        rows.append({"id": c.id, "language": c.language or "", "unit": c.unit,
                     "words": c.words, "cells": cells})
    corpora = []
    for unit, per_side in totals.items():
        corpus = []
        for k in sides:
            t = per_side[k]
            summed = {x: sum(n[x] for n in t)
                      for x in ("substitutions", "deletions", "insertions")}
            corpus.append({**summed, "wer": corpus_wer(t)})
        corpora.append({"unit": unit, "rate": RATE_OF.get(unit, unit), "units": units[unit],
                        "cells": corpus})
    return {"sides": [(k, SIDE_LABELS[k]) for k in sides], "rows": rows, "corpora": corpora}


def _wer_chart(clips: list, has_hybrid: bool) -> None:
    import matplotlib.pyplot as plt
    import numpy as np
    ids = [c.id for c in clips]
    x = np.arange(len(ids))
    series = [("HF source", "wer_source"), ("GGML whisper-cli", "wer_ggml")]
    if has_hybrid:
        series.append(("hybrid (Core ML)", "wer_hybrid"))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(ids) + 2), 3.2))
    for i, (label, key) in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width,
               [getattr(c, key) or 0 for c in clips], width, label=label)
    ax.set_xticks(x, ids, rotation=30, ha="right")
    rates = sorted({RATE_OF.get(c.unit, c.unit) for c in clips})
    ax.set_ylabel(f"{' / '.join(rates)} vs reference")
    ax.set_title(f"Per-clip {' / '.join(rates)} (normalized; CER for languages written "
                 "without spaces)" if len(rates) > 1 else f"Per-clip {rates[0]} (normalized)")
    ax.legend()
    fig.tight_layout()
    plt.show()
