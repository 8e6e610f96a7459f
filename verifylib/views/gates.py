"""Gate tables.

A stage's :class:`~verifylib.evidence.records.StageReport` and a receipt's summary.
"""

from __future__ import annotations

from verifylib.views import render

DETAIL_LIMIT = 4000
"""Characters of a gate's detail shown in the report; receipt.json keeps the full text."""


def stage_table(report) -> str:
    """HTML of a stage's gates and identities, opening with the shared stylesheet.

    Parameters
    ----------
    report : StageReport
        What a stage concluded.

    Returns
    -------
    str
        Escaped HTML (the ``_repr_html_`` of a StageReport).
    """
    return render("gates.html.j2", style=True, stage=report.stage, records=report.records,
                  identities=report.identities, seconds=report.seconds)


def status_text(records, gate_id: str) -> str:
    """Say how one gate ended, for a view's note on a gate that has no result to show.

    Parameters
    ----------
    records : sequence of GateRecord
        A stage's records (:attr:`verifylib.evidence.records.StageReport.records`).
    gate_id : str
        The gate.

    Returns
    -------
    str
        ``STATUS (reason kind): detail``, or ``no record`` when the stage holds none.
    """
    rec = next((r for r in records if r.id == gate_id), None)
    return f"{rec.status.value} ({rec.reason.kind}): {rec.reason.detail}" if rec else "no record"


def receipt_summary(receipt: dict, receipt_sha256: str) -> str:
    """HTML of a receipt's verdict, gate table, identities, host and package versions.

    Parameters
    ----------
    receipt : dict
        A receipt as written by :func:`verifylib.evidence.receipt.build_receipt`.
    receipt_sha256 : str
        Digest of ``receipt.json``, shown so a reader can tie the page to the file.

    Returns
    -------
    str
        Escaped HTML with no script and no style block (the report page has the stylesheet).
    """
    counts: dict[str, int] = {}
    for row in receipt["gates"]:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    rows = []
    for row in receipt["gates"]:
        detail = row["reason"]["detail"]
        if len(detail) > DETAIL_LIMIT:
            detail = detail[:DETAIL_LIMIT] + "\n[... cut; full text in receipt.json]"
        rows.append({**row, "detail": detail})
    host = receipt.get("host", {})
    host_rows = [(k, host.get(k)) for k in ("system", "machine", "macos_version", "python",
                                             "coremlc")]
    caps = ", ".join(f"{k}: {'yes' if ok else 'no'}"
                     for k, ok in sorted(host.get("capabilities", {}).items()))
    return render("summary.html.j2", receipt=receipt, receipt_sha256=receipt_sha256,
                  counts=", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
                  gates=rows, host_rows=host_rows, capabilities=caps,
                  packages=receipt.get("packages", {}))
