"""The audit report: executed notebooks merged into one self-contained HTML file.

nbformat merges the notebooks and nbconvert renders them with the ``audit`` template
(JupyterLab's look without any script tag). The report opens with the verdict, the gate
table and the identity table built from the receipt; every value from a run (paths,
log lines, transcripts) is escaped before it is placed in HTML.
"""

from __future__ import annotations

import html
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from nbconvert.preprocessors.sanitize import SanitizeHTML

from . import canonical, gates
from .receipt import RECEIPT_FILE

TEMPLATES = Path(__file__).resolve().parent / "templates"
REPORT = "report.html"
REPORT_FULL = "report-full.html"


def summary_html(receipt: dict, receipt_sha256: str) -> str:
    """Render the verdict, gate table and identity table of a receipt as escaped HTML.

    Parameters
    ----------
    receipt : dict
        A receipt as written by :func:`verifylib.receipt.build_receipt`.
    receipt_sha256 : str
        Digest of ``receipt.json``, shown so a reader can tie the page to the file.

    Returns
    -------
    str
        An HTML fragment with no script.
    """
    e = lambda v: html.escape(str(v))  # noqa: E731
    v = receipt["verdict"]
    counts: dict[str, int] = {}
    for row in receipt["gates"]:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    count_txt = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    parts = [
        f"<h1>Core ML encoder verification: {e(receipt['name'])}</h1>",
        f"<p><span class='vl-verdict vl-{e(v)}'>Verdict: <b>{e(v)}</b></span></p>",
        f"<p>Run <code>{e(receipt['run_id'])}</code> &middot; gates: {e(count_txt)} &middot; "
        f"receipt SHA-256 <code>{e(receipt_sha256)}</code></p>",
        "<p>ADMISSIBLE only when every required gate PASSed in a physical run made now; "
        "REJECTED when any gate FAILed or ERRORed; otherwise INCOMPLETE. NOT_RUN is never "
        "a pass. Re-check this run with <code>verifylib verify &lt;run dir&gt;</code>.</p>",
        "<h2>Gates</h2><table class='vl'><tr><th>gate</th><th>stage</th><th>required</th>"
        "<th>status</th><th>reason</th><th>detail</th><th>evidence</th></tr>",
    ]
    for row in receipt["gates"]:
        ev = "<br>".join(f"<code title='{e(x['sha256'])}'>{e(x['path'].split('/')[-1])}</code> "
                         f"<small>{e(x['sha256'][:12])}…</small>" for x in row["evidence"])
        detail = row["reason"]["detail"]
        if len(detail) > 4000:
            detail = detail[:4000] + "\n[... cut; full text in receipt.json]"
        parts.append(
            f"<tr><td><code>{e(row['id'])}</code></td><td>{e(row['stage'])}</td>"
            f"<td>{'yes' if row['required'] else 'no'}</td>"
            f"<td class='vl-{e(row['status'])}'><b>{e(row['status'])}</b></td>"
            f"<td>{e(row['reason']['kind'])}</td><td class='vl-detail'>{e(detail)}</td>"
            f"<td>{ev}</td></tr>")
    parts.append("</table><h2>Identities</h2><table class='vl'>")
    for k, val in sorted(receipt["identities"].items()):
        parts.append(f"<tr><td>{e(k)}</td><td><code>{e(val)}</code></td></tr>")
    host = receipt.get("host", {})
    parts.append("</table><h2>Host</h2><table class='vl'>")
    for k in ("system", "machine", "macos_version", "python", "coremlc"):
        parts.append(f"<tr><td>{e(k)}</td><td><code>{e(host.get(k))}</code></td></tr>")
    caps = ", ".join(f"{k}: {'yes' if ok else 'no'}"
                     for k, ok in sorted(host.get("capabilities", {}).items()))
    parts.append(f"<tr><td>capabilities</td><td>{e(caps)}</td></tr></table>")
    pkgs = receipt.get("packages", {})
    if pkgs:
        parts.append("<h2>Package versions</h2><table class='vl'>")
        for k, val in sorted(pkgs.items()):
            parts.append(f"<tr><td>{e(k)}</td><td><code>{e(val)}</code></td></tr>")
        parts.append("</table>")
    return "\n".join(parts)


def _summary_cell(fragment: str):
    cell = nbformat.v4.new_code_cell(source="# verdict, gates and identities (from receipt.json)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": fragment})]
    cell.metadata["tags"] = ["verifylib-summary"]
    return cell


def merged_notebook(run_dir: Path, stages: list[str], fragment: str):
    """Merge the executed stage notebooks of a run into one notebook behind a summary."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["title"] = "verifylib audit report"
    nb.cells.append(_summary_cell(fragment))
    for stage in stages:
        path = run_dir / "notebooks" / f"{stage}.ipynb"
        nb.cells.append(nbformat.v4.new_markdown_cell(f"# Stage {stage}"))
        if not path.exists():
            nb.cells.append(nbformat.v4.new_markdown_cell("*This stage's notebook did not run.*"))
            continue
        sub = nbformat.read(path, as_version=4)
        for key in ("kernelspec", "language_info"):
            if key in sub.metadata:
                nb.metadata.setdefault(key, sub.metadata[key])
        for cell in sub.cells:
            # Markdown inside notebooks is ours, but outputs may carry run text: the
            # exporter's sanitizer and the audit template keep both inert.
            nb.cells.append(cell)
    return nb


# Tags our own HTML outputs use; anything else in an output (script, iframe, event
# attributes) is escaped by bleach, and non-HTML active types (JavaScript, widgets) dropped.
_TAGS = ["a", "abbr", "b", "blockquote", "br", "code", "div", "em", "h1", "h2", "h3", "h4",
         "h5", "hr", "i", "li", "ol", "p", "pre", "small", "span", "strong", "sub", "sup",
         "table", "tbody", "td", "th", "thead", "tr", "ul"]
_ATTRS = {"*": ["class", "title", "style"], "a": ["href", "title"]}
_STYLES = ["white-space", "font-family", "font-size", "text-align", "color", "background",
           "background-color", "padding", "margin", "width"]


def _export(nb, exclude_input: bool) -> str:
    exporter = HTMLExporter(template_name="audit", extra_template_basedirs=[str(TEMPLATES)])
    exporter.exclude_input = exclude_input
    exporter.exclude_input_prompt = exclude_input
    exporter.exclude_output_prompt = exclude_input
    exporter.embed_images = True
    exporter.register_preprocessor(
        SanitizeHTML(tags=_TAGS, attributes=_ATTRS, styles=_STYLES, strip=False), enabled=True)
    body, _ = exporter.from_notebook_node(nb)
    return body


def render(run_dir: str | Path, stages: list[str] | None = None) -> tuple[Path, Path]:
    """Render ``report.html`` (code hidden) and ``report-full.html`` (with code).

    Parameters
    ----------
    run_dir : path-like
        A run directory holding ``receipt.json`` and ``notebooks/``.
    stages : list of str, optional
        Stages to include, in order; all by default.

    Returns
    -------
    (Path, Path)
        The two report files, each written atomically.
    """
    run_dir = Path(run_dir)
    raw = (run_dir / RECEIPT_FILE).read_bytes()
    receipt = canonical.loads(raw)
    fragment = summary_html(receipt, canonical.sha256_bytes(raw))
    nb = merged_notebook(run_dir, list(stages or gates.STAGES), fragment)
    short = run_dir / REPORT
    full = run_dir / REPORT_FULL
    canonical.atomic_write_bytes(short, _export(nb, True).encode("utf-8"))
    canonical.atomic_write_bytes(full, _export(nb, False).encode("utf-8"))
    return short, full


INDEX = "index.html"


def render_index(outcomes, reports_root: str | Path) -> Path:
    """Write ``<reports>/index.html``: every model of a batch with its verdict and links.

    Parameters
    ----------
    outcomes : sequence of RunOutcome
        The runs of one ``verifylib run`` invocation.
    reports_root : path-like
        The reports folder (links are relative to it).

    Returns
    -------
    Path
        The index page, written atomically; self-contained and script-free.
    """
    root = Path(reports_root)
    e = lambda v: html.escape(str(v))  # noqa: E731
    worst = gates.worst(o.verdict for o in outcomes)
    rows = []
    for o in outcomes:
        raw = (o.run_dir / RECEIPT_FILE).read_bytes()
        rec = canonical.loads(raw)
        counts: dict[str, int] = {}
        for g in rec["gates"]:
            counts[g["status"]] = counts.get(g["status"], 0) + 1
        rel = o.run_dir.relative_to(root).as_posix()
        rows.append(
            f"<tr><td>{e(o.name)}</td><td class='vl-{e(o.verdict.value)}'><b>"
            f"{e(o.verdict.value)}</b></td>"
            + "".join(f"<td>{counts.get(s, 0)}</td>" for s in ("PASS", "FAIL", "NOT_RUN", "ERROR"))
            + f"<td><a href='{e(rel)}/{REPORT}'>{e(rel)}</a></td>"
              f"<td><code>{e(canonical.sha256_bytes(raw)[:16])}…</code></td></tr>")
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<title>verifylib batch index</title><style>"
        "body{font-family:sans-serif;margin:2em} table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        ".vl-ADMISSIBLE{background:#bfe8bf}.vl-INCOMPLETE{background:#ffe9a8}"
        ".vl-REJECTED{background:#f4b6b6}</style></head><body>"
        f"<h1>verifylib batch: {len(outcomes)} model(s)</h1>"
        f"<p>Worst verdict: <b class='vl-{e(worst.value)}'>{e(worst.value)}</b>. Each run "
        "re-verifies with <code>verifylib verify &lt;run dir&gt;</code>.</p>"
        "<table><tr><th>model</th><th>verdict</th><th>PASS</th><th>FAIL</th><th>NOT_RUN</th>"
        "<th>ERROR</th><th>report</th><th>receipt SHA-256</th></tr>"
        + "".join(rows) + "</table></body></html>\n")
    path = root / INDEX
    canonical.atomic_write_bytes(path, page.encode("utf-8"))
    return path
