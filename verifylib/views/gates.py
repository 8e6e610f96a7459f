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


def verdict_meaning(receipt: dict) -> str:
    """Say in one or two sentences what a receipt's verdict means and what would move it.

    Parameters
    ----------
    receipt : dict
        A receipt (its ``verdict`` and ``gates`` rows).

    Returns
    -------
    str
        Plain text: for INCOMPLETE, the required gates that did not run, those that need
        a Mac named apart with a pointer to ``verifylib doctor``; for REJECTED, the
        required gates that failed or errored; for ADMISSIBLE, that every required gate
        passed here.
    """
    required = [g for g in receipt.get("gates", []) if g.get("required")]
    verdict = receipt.get("verdict")
    if verdict == "ADMISSIBLE":
        return (f"All {len(required)} required gates PASSed in physical runs made for this "
                "report; verifylib verify re-checks every one from the stored evidence.")
    if verdict == "REJECTED":
        bad = [g["id"] for g in required if g.get("status") in ("FAIL", "ERROR")]
        return (f"Required gate(s) {', '.join(bad)} failed or errored; only a new run in "
                "which they PASS can change this verdict (their rows below say why).")
    not_run = [g for g in required if g.get("status") == "NOT_RUN"]
    mac = [g["id"] for g in not_run if (g.get("reason") or {}).get("kind") == "platform"]
    other = [g["id"] for g in not_run if g["id"] not in mac]
    passed = sum(g.get("status") == "PASS" for g in required)
    parts = [f"{passed} of {len(required)} required gates PASSed and none failed, so "
             "nothing here is rejected, but nothing is admitted either."]
    if mac:
        parts.append(f"{len(mac)} need a Mac with Xcode ({', '.join(mac)}) and were NOT_RUN "
                     "on this host; run verifylib doctor on the Mac to see what it lacks, "
                     "then audit there: ADMISSIBLE needs them to PASS.")
    if other:
        parts.append(f"Also NOT_RUN: {', '.join(other)} (their rows say why).")
    return " ".join(parts)


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
                  meaning=verdict_meaning(receipt),
                  packages=receipt.get("packages", {}))
