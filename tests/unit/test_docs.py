"""The documentation's links hold and its gate table is the registry's.

- Every relative Markdown link in ``docs/`` and ``README.md`` resolves to a file, and to
  an anchor in it when the link names one.
- The gate table in ``docs/gates.md`` is the registry's.

tests/fake/test_docs.py checks every file of the repository (it lists them with git)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verifylib.evidence import gates

from tests.helpers import ROOT
from tests.helpers.markdown import anchors, prose

DOCS = ROOT / "docs"


# ----------------------------------------------------------------------------- links

_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _markdown_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]


def test_docs_exist():
    for page in ("README.md", "architecture.md", "gates.md", "runtime-contract.md",
                 "facts.md"):
        assert (DOCS / page).is_file(), page


@pytest.mark.parametrize("page", _markdown_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        try:
            dest.relative_to(ROOT)
        except ValueError:
            broken.append(f"{target}: outside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


# ----------------------------------------------------------------------------- gate table

def _doc_gate_rows() -> dict[str, list[str]]:
    text = (DOCS / "gates.md").read_text(encoding="utf-8")
    section = text.split("## The gate table", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    return rows


def test_gate_table_in_docs_is_the_registry():
    rows = _doc_gate_rows()
    assert list(rows) == [g.id for g in gates.GATES]
    for g in gates.GATES:
        _, stage, required, runs_on, prereq, switch, _rule = rows[g.id]
        assert stage == g.stage, g.id
        assert required == ("yes" if g.required else "no"), g.id
        assert runs_on == g.capability.value, g.id
        assert re.findall(r"`([^`]+)`", prereq) == list(g.prerequisites), g.id
        want = [f"{key}: {str(value).lower()}" for key, value in g.disabled_by]
        assert re.findall(r"`([^`]+)`", switch) == want, g.id
        assert ("not implemented" in _rule) == (not g.implemented), g.id
