"""Gate tables.

A stage's :class:`~verifylib.evidence.stage_report.StageReport` and a receipt's summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifylib.evidence.identities import RUNTIME_MANIFEST
from verifylib.models.converter_precision import neural_engine_warning, planned_from_identities
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
        A stage's records (:attr:`verifylib.evidence.stage_report.StageReport.records`).
    gate_id : str
        The gate.

    Returns
    -------
    str
        ``STATUS (reason kind): detail``, or ``no record`` when the stage holds none.
    """
    rec = next((r for r in records if r.id == gate_id), None)
    return f"{rec.status.value} ({rec.reason.kind}): {rec.reason.detail}" if rec else "no record"


@dataclass(frozen=True)
class RequiredGates:
    """How a receipt's required gates ended, the facts behind every sentence about its verdict.

    Attributes
    ----------
    total, passed : int
        Required gates, and those that PASSed.
    failed : list of str
        Ids of those that FAILed or ERRORed.
    not_run_platform, not_run_other : list of str
        Ids of those NOT_RUN for want of a platform (a Mac), and for any other reason.
    """

    total: int
    passed: int
    failed: list[str]
    not_run_platform: list[str]
    not_run_other: list[str]


def required_gates(receipt: dict) -> RequiredGates:
    """Sort a receipt's required gates by how they ended.

    Parameters
    ----------
    receipt : dict
        A receipt (its ``gates`` rows).

    Returns
    -------
    RequiredGates
    """
    required = [g for g in receipt.get("gates", []) if g.get("required")]
    not_run = [g for g in required if g.get("status") == "NOT_RUN"]
    platform = [g["id"] for g in not_run if (g.get("reason") or {}).get("kind") == "platform"]
    return RequiredGates(
        total=len(required), passed=sum(g.get("status") == "PASS" for g in required),
        failed=[g["id"] for g in required if g.get("status") in ("FAIL", "ERROR")],
        not_run_platform=platform,
        not_run_other=[g["id"] for g in not_run if g["id"] not in platform])


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
    req = required_gates(receipt)
    verdict = receipt.get("verdict")
    if verdict == "ADMISSIBLE":
        return (f"All {req.total} required gates PASSed in physical runs made for this "
                "report; verifylib verify re-checks every one from the stored evidence.")
    if verdict == "REJECTED":
        return (f"Required gate(s) {', '.join(req.failed)} failed or errored; only a new run "
                "in which they PASS can change this verdict (their rows below say why).")
    mac, other = req.not_run_platform, req.not_run_other
    parts = [f"{req.passed} of {req.total} required gates PASSed and none failed, so "
             "nothing here is rejected, but nothing is admitted either."]
    if mac:
        parts.append(f"{len(mac)} need a Mac with Xcode ({', '.join(mac)}) and were NOT_RUN "
                     "on this host; run verifylib doctor on the Mac to see what it lacks, "
                     "then audit there: ADMISSIBLE needs them to PASS.")
    if other:
        parts.append(f"Also NOT_RUN: {', '.join(other)} (their rows say why).")
    return " ".join(parts)


EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
"""The SHA-256 of nothing: an evidence file with this digest is empty, and says so."""


def gate_counts(gates: list[dict], required: bool) -> str:
    """Say how many required (or informational) gates ended how.

    E.g. ``16 required: 9 PASS, 7 NOT_RUN``.

    Parameters
    ----------
    gates : list of dict
        A receipt's gate rows.
    required : bool
        Which kind to count.

    Returns
    -------
    str
        The count and its split by status, in the order PASS, FAIL, ERROR, NOT_RUN.
    """
    rows = [g for g in gates if bool(g.get("required")) == required]
    by: dict[str, int] = {}
    for g in rows:
        by[g["status"]] = by.get(g["status"], 0) + 1
    order = ["PASS", "FAIL", "ERROR", "NOT_RUN"]
    split = ", ".join(f"{by[k]} {k}" for k in sorted(by, key=lambda k: (
        order.index(k) if k in order else len(order), k)))
    kind = "required" if required else "informational"
    return f"{len(rows)} {kind}" + (f": {split}" if split else "")


def _card(receipt: dict, run_dir, stages: list[str]) -> dict:
    from pathlib import Path

    ids = receipt.get("identities", {})
    host = receipt.get("host", {})
    from verifylib.views.formats import run_date

    run_id = str(receipt.get("run_id") or "")
    date = run_date(run_id) or run_id
    model = ids.get("model.source_digest")
    ftype = ids.get("model.ggml.ftype")
    pin = ids.get("runtime.pin") or "?"
    commit = ids.get("runtime.commit")
    user_manifest = ids.get(RUNTIME_MANIFEST)
    notebooks = [s for s in stages if run_dir is not None
                 and (Path(run_dir) / "notebooks" / f"{s}.ipynb").is_file()]
    att = "attestation.intoto.jsonl"
    return {
        "model": f"{receipt.get('name')}"
                 + (f" (source digest {str(model)[:12]}…" if model else "")
                 + (f", ggml {ftype})" if ftype and model else ")" if model else ""),
        "pin": f"{pin}" + (f", commit {str(commit)[:12]}" if commit else "")
               + (f"; USER-DECLARED pin, not one packaged with verifylib: declared by the "
                  f"parameter file's own manifest (sha256 {str(user_manifest)[:16]}…), which "
                  f"the run carries and verify judges the pin against"
                  if user_manifest else ""),
        "host": ", ".join(str(host[k]) for k in ("system", "machine", "macos_version")
                          if host.get(k)) + (f", Python {host['python']}"
                                             if host.get("python") else ""),
        "date": date,
        "required": gate_counts(receipt.get("gates", []), True),
        "informational": gate_counts(receipt.get("gates", []), False),
        "notebooks": notebooks,
        "attestation": att if run_dir is not None and (Path(run_dir) / att).is_file() else None,
        "neural_engine": neural_engine_warning(planned_from_identities(ids),
                                               ids.get("runtime.pin")),
    }


def receipt_summary(receipt: dict, receipt_sha256: str, *, run_dir=None,
                    stages: list[str] | None = None, sections: list | None = None,
                    host_paths: list | None = None,
                    sibling: tuple[str, str] = ("report-full.html", "the report with its code"),
                    ) -> str:
    """HTML of a receipt's first screen, gate tables, identities, host and package versions.

    Parameters
    ----------
    receipt : dict
        A receipt as written by :func:`verifylib.evidence.receipt.build_receipt`.
    receipt_sha256 : str
        Digest of ``receipt.json``, shown so a reader can tie the page to the file.
    run_dir : path-like, optional
        The run, to link the notebooks and an attestation that exist.
    stages : list of str, optional
        The stages the report shows, in order (default: the receipt's).
    sections : list of (str, str), optional
        ``(anchor, title)`` of each stage's heading, for the contents.
    host_paths : list of (str, str), optional
        ``(name, absolute path)`` the report writes by name (``$CACHE`` …), listed in the
        host facts.
    sibling : (str, str)
        The other rendering of the report, ``(file, words)``, linked from the files row
        (each page links to the other, never to itself).

    Returns
    -------
    str
        Escaped HTML with no script and no style block (the report page has the stylesheet).
    """
    from verifylib.evidence.gates import BY_ID

    stages = list(stages or dict.fromkeys(g.get("stage") for g in receipt["gates"]))
    rows = []
    for row in receipt["gates"]:
        detail = row["reason"]["detail"]
        if len(detail) > DETAIL_LIMIT:
            detail = detail[:DETAIL_LIMIT] + "\n[... cut; full text in receipt.json]"
        gate = BY_ID.get(row["id"])
        rows.append({**row, "detail": detail, "anchor": f"stage-{row['stage']}",
                     "proves": gate.proves if gate else "",
                     "evidence": [{**ev, "empty": ev.get("sha256") == EMPTY_SHA256}
                                  for ev in row.get("evidence", [])]})
    host = receipt.get("host", {})
    host_rows = [(k, host.get(k)) for k in ("system", "machine", "macos_version", "python",
                                             "coremlc")]
    caps = ", ".join(f"{k}: {'yes' if ok else 'no'}"
                     for k, ok in sorted(host.get("capabilities", {}).items()))
    return render("summary.html.j2", receipt=receipt, receipt_sha256=receipt_sha256,
                  card=_card(receipt, run_dir, stages),
                  required=[r for r in rows if r.get("required")],
                  informational=[r for r in rows if not r.get("required")],
                  sections=sections or [(f"stage-{s}", s) for s in stages],
                  host_rows=host_rows, capabilities=caps, host_paths=host_paths or [],
                  meaning=verdict_meaning(receipt),
                  packages=receipt.get("packages", {}), sibling=sibling)
