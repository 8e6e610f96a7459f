"""The audit report: executed notebooks merged into one self-contained HTML file.

nbformat merges the notebooks and nbconvert renders them with the ``audit`` template
(JupyterLab's look without any script tag). The report opens with the verdict, the gate
table and the identity table built from the receipt. All HTML comes from the templates of
:mod:`verifylib.views` (autoescaped, so every value from a run is text), and the page carries
the views' one stylesheet, ``verifylib.css``, included by the nbconvert template.

The reports folder's index page, ``<reports>/index.html`` (:func:`render_index`), lists
every published run and every audit that ended ERROR without one. A batch records such
an audit (its worker died, its task failed, its returned run was refused) as a failure
record, ``<reports>/<name>/.failed/<id>.json`` (:func:`publish_failure`), since there is
no receipt to list it by.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from nbconvert.preprocessors.sanitize import SanitizeHTML

from verifylib import canonical, views
from verifylib.evidence import gates
from verifylib.evidence.failures import FailureRecord, read_failures
from verifylib.evidence.layout import RECEIPT_FILE
from verifylib.views import gates as gate_views
from verifylib.views import index as index_view
from verifylib.views import transcript

REPORT = "report.html"
REPORT_FULL = "report-full.html"


def _summary_cell(fragment: str):
    cell = nbformat.v4.new_code_cell(source="# verdict, gates and identities (from receipt.json)")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": fragment})]
    cell.metadata["tags"] = ["verifylib-summary"]
    return cell


EXPLORE_TAG = "verifylib-explore"
"""Tag of the stage notebooks' Explore cells (scripts/make_notebooks.py)."""


def stage_anchor(stage: str) -> str:
    """Return the id of a stage's heading in the report (``stage-01_build``)."""
    return f"stage-{stage}"


def _heading_of(cell) -> str | None:
    """Return the heading a markdown cell opens with (``01_build: Build``), else None."""
    line = cell.source.split("\n", 1)[0] if cell.cell_type == "markdown" else ""
    return line.lstrip("#").strip() if line.startswith("#") else None


def _stage_title(run_dir: Path, stage: str) -> str:
    """Return the heading a stage's notebook opens with, else the stage."""
    path = run_dir / "notebooks" / f"{stage}.ipynb"
    try:
        first = nbformat.read(path, as_version=4).cells[0]
    except (OSError, ValueError, IndexError):
        return stage
    return _heading_of(first) or stage


def _heading_cell(stage: str, title: str):
    cell = nbformat.v4.new_code_cell(source=f"# {title}")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": views.render("stage_heading.html.j2", anchor=stage_anchor(stage),
                                  title=title)})]
    return cell


def _split_heading(cell, stage: str) -> str:
    # The notebook opens with "## 01_build: Build" and a paragraph: the heading becomes the
    # report's one heading of the stage, the paragraph stays.
    heading = _heading_of(cell)
    if heading is None:
        return stage
    cell.source = cell.source.split("\n", 1)[1].strip("\n") if "\n" in cell.source else ""
    return heading


def merged_notebook(run_dir: Path, stages: list[str], fragment: str, *,
                    title: str = "verifylib audit report", paths=()):
    """Merge the executed stage notebooks of a run into one document behind a summary.

    Parameters
    ----------
    run_dir : Path
        The run directory.
    stages : list of str
        The stages, in order.
    fragment : str
        The summary's HTML (:func:`verifylib.views.gates.receipt_summary`).
    title : str
        The page's title.
    paths : sequence of (str, str)
        Host paths to write relative (:func:`verifylib.views.transcript.host_paths`).
    """
    nb = nbformat.v4.new_notebook()
    nb.metadata["title"] = title
    nb.cells.append(_summary_cell(fragment))
    for stage in stages:
        path = run_dir / "notebooks" / f"{stage}.ipynb"
        if not path.exists():
            nb.cells.append(_heading_cell(stage, stage))
            nb.cells.append(nbformat.v4.new_markdown_cell("*This stage's notebook did not run.*"))
            continue
        sub = nbformat.read(path, as_version=4)
        for key in ("kernelspec", "language_info"):
            if key in sub.metadata:
                nb.metadata.setdefault(key, sub.metadata[key])
        cells = [c for c in sub.cells
                 # The Explore cells are a researcher's starting points (they repeat the
                 # views in raw form); the executed notebooks keep them, the report does not.
                 if EXPLORE_TAG not in c.get("metadata", {}).get("tags", [])]
        heading = stage
        if cells and cells[0].cell_type == "markdown":
            heading = _split_heading(cells[0], stage)
        nb.cells.append(_heading_cell(stage, heading))
        for cell in cells:
            if cell.cell_type == "markdown" and not cell.source.strip():
                continue
            # Markdown inside notebooks is ours, but outputs may carry run text: the
            # exporter's sanitizer and the audit template keep both inert.
            _drop_view_styles(cell)
            if cell.cell_type == "code":
                transcript.rewrite_outputs(cell, list(paths))
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
_TAGS = ["a", "abbr", "b", "blockquote", "br", "code", "del", "details", "div", "em", "h1",
         "h2", "h3", "h4", "h5", "hr", "i", "ins", "li", "nav", "ol", "p", "pre", "small",
         "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "th", "thead",
         "tr", "ul", "wbr", "audio"]
_ATTRS = {"*": ["class", "title", "style"], "a": ["href", "title"],
          # Our headings carry the ids the table of contents and the gate rows link to.
          "h1": ["class", "id"], "h2": ["class", "id"], "h3": ["class", "id"],
          "nav": ["class", "aria-label"],
          # A public clip's audio, from the run's own evidence (a relative link).
          "audio": ["class", "controls", "preload", "src", "aria-label"]}
_STYLES = ["white-space", "font-family", "font-size", "text-align", "color", "background",
           "background-color", "padding", "margin", "width"]


def _export(nb, exclude_input: bool) -> str:
    # The views' folder goes last on the search path: the audit template includes
    # verifylib.css from it, and nbconvert's own templates keep precedence for every other name.
    exporter = HTMLExporter(template_name="audit", extra_template_basedirs=[str(views.TEMPLATES)],
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
    from verifylib.resources import cache_dir

    run_dir = Path(run_dir)
    raw = (run_dir / RECEIPT_FILE).read_bytes()
    receipt = canonical.loads(raw)
    stages = list(stages or gates.STAGES)
    cache = cache_dir()
    paths = transcript.host_paths(run_dir, cache)
    def fragment(sibling: tuple[str, str]) -> str:
        return gate_views.receipt_summary(
            receipt, canonical.sha256_bytes(raw), run_dir=run_dir, stages=stages,
            sections=[(stage_anchor(s), _stage_title(run_dir, s)) for s in stages],
            host_paths=[(name, absolute) for absolute, name in paths if name != "."],
            sibling=sibling)

    nb = merged_notebook(run_dir, stages, fragment((REPORT_FULL, "the report with its code")),
                         paths=paths,
                         title=f"{receipt.get('name')}: {receipt.get('verdict')} · "
                               f"verifylib audit {receipt.get('run_id')}")
    short = run_dir / REPORT
    full = run_dir / REPORT_FULL
    canonical.atomic_write_bytes(short, _export(nb, True).encode("utf-8"))
    # The full page is the same document; its first screen links back to the short one.
    nb.cells[0] = _summary_cell(fragment((REPORT, "the report without code")))
    canonical.atomic_write_bytes(full, _export(nb, False).encode("utf-8"))
    return short, full


INDEX = "index.html"


INDEX_LOCKS = ".locks"
"""Folder of the reports folder's lock files (the index page's lock)."""


# A reason is one human-readable account (a worker's last stderr lines, a refusal); the
# whole log belongs in the terminal, not in a record every index rebuild reads.


def _index_row(root: Path, name: str, run_dir: Path) -> dict:
    raw = (run_dir / RECEIPT_FILE).read_bytes()
    rec = canonical.loads(raw)
    counts: dict[str, int] = {}
    for g in rec["gates"]:
        counts[g["status"]] = counts.get(g["status"], 0) + 1
    from verifylib.views.formats import run_date

    host = rec.get("host") or {}
    date = run_date(run_dir.name)
    return {"kind": "run", "name": name, "verdict": gates.Verdict(rec["verdict"]).value,
            "counts": counts, "rel": run_dir.relative_to(root).as_posix(),
            "sha256": canonical.sha256_bytes(raw), "key": run_dir.name, "date": date,
            "host": " ".join(str(host[k]) for k in ("system", "machine", "macos_version")
                             if host.get(k))}


def _failure_row(root: Path, path: Path, rec: FailureRecord | str) -> dict:
    row = {"kind": "failed", "name": path.parent.parent.name, "verdict": "ERROR",
           "rel": path.relative_to(root).as_posix(), "key": path.stem, "later": None}
    try:
        row["sha256"] = canonical.sha256_file(path)
    except OSError:
        row["sha256"] = None
    if isinstance(rec, str):
        return dict(row, reason=rec, time=None, parameters=None, executor=None, node=None)
    node = rec.executor.get("node")
    return dict(row, reason=rec.reason, time=rec.time, parameters=rec.parameters,
                executor=str(rec.executor.get("kind", "?")),
                node=None if node is None else str(node))


def _index_rows(root: Path, outcomes) -> list[dict]:
    """Return one row per published run and per failure record under ``root``.

    Runs are ``<name>/<run-id>/receipt.json``, failure records ``<name>/.failed/<id>.json``;
    each model's rows are ordered by time.
    """
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
    runs = list(rows.values())
    failed = [_failure_row(root, path, rec) for path, rec in read_failures(root)]
    # A failure stays listed after a later run of its model: the page then says which
    # run came later, so a retried model's history is visible rather than overwritten.
    for row in failed:
        later = [r for r in runs if r["name"] == row["name"] and r["key"] > row["key"]]
        if later:
            row["later"] = min(later, key=lambda r: r["key"])["rel"]
    return sorted(runs + failed, key=lambda r: (r["name"], r["key"], r["rel"]))


def render_index(outcomes, reports_root: str | Path) -> Path:
    """Write ``<reports>/index.html``: every published run and every failed audit.

    Several ``verifylib run`` processes may share one reports folder and finish in any
    order, so the page is rebuilt from what is on disk (every
    ``<name>/<run-id>/receipt.json``, this invocation's runs included, and every failure
    record ``<name>/.failed/<id>.json`` of :func:`publish_failure`) under the folder's
    index lock (``<reports>/.locks/index-page.lock``) and replaced atomically: the last
    writer lists every entry, and no process's entry is lost to another's write.

    Each model's entries are listed oldest first. A failed audit is marked ERROR with its
    reason, where it ran and when, and stays listed when a later run of the model is
    published (the row names that run). The worst verdict is that of the published
    runs; the failed audits are counted beside it.

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
    from verifylib.locks import held

    root = Path(reports_root)
    with held(root / INDEX_LOCKS, "index", "page", what="the reports index page"):
        rows = _index_rows(root, outcomes)
        runs = [r for r in rows if r["kind"] == "run"]
        failed = [r for r in rows if r["kind"] == "failed"]
        worst = gates.worst(r["verdict"] for r in runs).value if runs else None
        page = index_view.page(rows, worst, REPORT, failed=len(failed),
                               unresolved=sum(r["later"] is None for r in failed)) + "\n"
        path = root / INDEX
        canonical.atomic_write_bytes(path, page.encode("utf-8"))
    return path
