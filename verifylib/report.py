"""The audit report: executed notebooks merged into one self-contained HTML file.

nbformat merges the notebooks and nbconvert renders them with the ``audit`` template
(JupyterLab's look without any script tag). The report opens with the verdict, the gate
table and the identity table built from the receipt. All HTML comes from the templates of
:mod:`verifylib.views` (autoescaped, so every value from a run is text), and the page carries
the views' one stylesheet, ``verifylib.css``, included by the nbconvert template.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from nbconvert.preprocessors.sanitize import SanitizeHTML

from . import canonical, gates, views
from .receipt import RECEIPT_FILE
from .views import gates as gate_views
from .views import index as index_view

TEMPLATES = Path(__file__).resolve().parent / "templates"
REPORT = "report.html"
REPORT_FULL = "report-full.html"


def _summary_cell(fragment: str):
    cell = nbformat.v4.new_code_cell(source="# verdict, gates and identities (from receipt.json)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": fragment})]
    cell.metadata["tags"] = ["verifylib-summary"]
    return cell


EXPLORE_TAG = "verifylib-explore"
"""Tag of the stage notebooks' Explore cells (scripts/make_notebooks.py)."""


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
            # The Explore cells are a researcher's starting points (they repeat the views
            # in raw form); the executed notebooks keep them, the report does not.
            if EXPLORE_TAG in cell.get("metadata", {}).get("tags", []):
                continue
            # Markdown inside notebooks is ours, but outputs may carry run text: the
            # exporter's sanitizer and the audit template keep both inert.
            _drop_view_styles(cell)
            nb.cells.append(cell)
    return nb


def _drop_view_styles(cell) -> None:
    # Each view output opens with the stylesheet for JupyterLab; the report's head has it
    # already, and the sanitizer (which allows no <style>) would print it as text.
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "text/html" in data:
            text = data["text/html"]
            data["text/html"] = views.strip_style(text if isinstance(text, str) else "".join(text))


# Tags our own HTML outputs use; anything else in an output (script, iframe, event
# attributes) is escaped by bleach, and non-HTML active types (JavaScript, widgets) dropped.
_TAGS = ["a", "abbr", "b", "blockquote", "br", "code", "details", "div", "em", "h1", "h2",
         "h3", "h4", "h5", "hr", "i", "li", "ol", "p", "pre", "small", "span", "strong", "sub",
         "summary", "sup", "table", "tbody", "td", "th", "thead", "tr", "ul"]
_ATTRS = {"*": ["class", "title", "style"], "a": ["href", "title"]}
_STYLES = ["white-space", "font-family", "font-size", "text-align", "color", "background",
           "background-color", "padding", "margin", "width"]


def _export(nb, exclude_input: bool) -> str:
    # The views' folder goes last on the search path: the audit template includes
    # verifylib.css from it, and nbconvert's own templates keep precedence for every other name.
    exporter = HTMLExporter(template_name="audit", extra_template_basedirs=[str(TEMPLATES)],
                            extra_template_paths=[str(views.TEMPLATES)])
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
    fragment = gate_views.receipt_summary(receipt, canonical.sha256_bytes(raw))
    nb = merged_notebook(run_dir, list(stages or gates.STAGES), fragment)
    short = run_dir / REPORT
    full = run_dir / REPORT_FULL
    canonical.atomic_write_bytes(short, _export(nb, True).encode("utf-8"))
    canonical.atomic_write_bytes(full, _export(nb, False).encode("utf-8"))
    return short, full


INDEX = "index.html"


INDEX_LOCKS = ".locks"
"""Folder of the reports folder's lock files (the index page's lock)."""


def _index_row(root: Path, name: str, run_dir: Path) -> dict:
    raw = (run_dir / RECEIPT_FILE).read_bytes()
    rec = canonical.loads(raw)
    counts: dict[str, int] = {}
    for g in rec["gates"]:
        counts[g["status"]] = counts.get(g["status"], 0) + 1
    return {"name": name, "verdict": gates.Verdict(rec["verdict"]).value, "counts": counts,
            "rel": run_dir.relative_to(root).as_posix(), "sha256": canonical.sha256_bytes(raw)}


def _index_rows(root: Path, outcomes) -> list[dict]:
    """One row per published run under ``root`` (``<name>/<run-id>/receipt.json``)."""
    rows: dict[Path, dict] = {}
    # This invocation's runs must be listed; an unreadable receipt of theirs is an error.
    for o in outcomes:
        rows[Path(o.run_dir).resolve()] = _index_row(root, o.name, Path(o.run_dir))
    for receipt in root.glob(f"*/*/{RECEIPT_FILE}"):
        run_dir = receipt.parent
        if run_dir.parent.name.startswith(".") or run_dir.name.startswith(".") \
                or run_dir.resolve() in rows:
            continue
        try:
            rows[run_dir.resolve()] = _index_row(root, run_dir.parent.name, run_dir)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # another run's damage is `verifylib verify`'s to report, not the index's
    return sorted(rows.values(), key=lambda r: (r["name"], r["rel"]))


def render_index(outcomes, reports_root: str | Path) -> Path:
    """Write ``<reports>/index.html``: every published run in the reports folder.

    Several ``verifylib run`` processes may share one reports folder and finish in any
    order, so the page is rebuilt from what is published on disk (every
    ``<name>/<run-id>/receipt.json``, this invocation's runs included) under the folder's
    index lock (``<reports>/.locks/index-page.lock``) and replaced atomically: the last
    writer lists every run, and no process's entry is lost to another's write.

    Parameters
    ----------
    outcomes : sequence of RunOutcome
        The runs of this ``verifylib run`` invocation (listed even if they were
        published outside the usual layout).
    reports_root : path-like
        The reports folder (links are relative to it).

    Returns
    -------
    Path
        The index page, written atomically; self-contained and script-free.
    """
    from .locks import held

    root = Path(reports_root)
    with held(root / INDEX_LOCKS, "index", "page", what="the reports index page"):
        rows = _index_rows(root, outcomes)
        worst = gates.worst(r["verdict"] for r in rows)
        page = index_view.page(rows, worst.value, REPORT) + "\n"
        path = root / INDEX
        canonical.atomic_write_bytes(path, page.encode("utf-8"))
    return path
