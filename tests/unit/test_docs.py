"""The documentation is self-contained and its links hold.

- No file of the repository points at documents outside it (the leads' design notes or
  the upstream study and its measurements): the repository's own words are in ``docs/``.
  The one exception is test code that reads such a file as optional test data.
- Every relative Markdown link in ``docs/`` and ``README.md`` resolves to a file, and to
  an anchor in it when the link names one.
- Every ``docs/<page>.md §N`` citation in code, tests and docs names a section that exists.
- The gate table in ``docs/gates.md`` is the registry's.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

from verifylib.evidence import gates

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Spelled in pieces so that this file does not mention what it looks for.
FORBIDDEN = ("DESIGN" + ".md", "FACTS" + ".md", ".." + "/shared", "spec/" + "000")

# Tests that read an outside file as optional data (and are skipped without it).
READS_OUTSIDE_DATA = {"tests/test_gates.py"}


def _repo_files() -> list[str]:
    """Tracked files plus new files not ignored (what the next commit would hold)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    names = sorted({n for n in out.decode("utf-8").split("\0") if n})
    return [n for n in names if (ROOT / n).is_file()]


def test_no_file_points_outside_the_repository():
    offenders = []
    for name in _repo_files():
        if name in READS_OUTSIDE_DATA:
            continue
        data = (ROOT / name).read_bytes()
        for needle in FORBIDDEN:
            if needle.encode() in data:
                text = data.decode("utf-8", "replace")
                lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
                offenders.append(f"{name}:{lines[0] if lines else '?'}: {needle}")
    assert not offenders, ("point these at docs/ instead:\n" + "\n".join(offenders))


# ----------------------------------------------------------------------------- links

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_EXPLICIT_ID = re.compile(r"""<a\s+(?:[^>]*\s)?(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)


def _prose(text: str) -> str:
    """Markdown without fenced blocks and inline code, where links are not links."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = _CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file defines: heading slugs (numbered when repeated) and
    explicit ``<a id=...>`` targets."""
    text = path.read_text(encoding="utf-8")
    out: set[str] = set(_EXPLICIT_ID.findall(text))
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        base = _slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _markdown_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]


def test_docs_exist():
    for page in ("README.md", "architecture.md", "gates.md", "runtime-contract.md",
                 "facts.md"):
        assert (DOCS / page).is_file(), page


@pytest.mark.parametrize("page", _markdown_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
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


_SECTION_CITE = re.compile(r"docs/([a-z-]+\.md)((?:,?\s*§\d+(?:\.\d+)?)+)")


def test_section_citations_exist():
    """``docs/runtime-contract.md §6.4`` must name a section with anchor ``#s6-4``."""
    missing = []
    for name in _repo_files():
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".yaml", ".yml", ".toml", ".j2", ".ipynb"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for page, sections in _SECTION_CITE.findall(text.replace("\n", " ")):
            target = DOCS / page
            if not target.is_file():
                missing.append(f"{name}: docs/{page} does not exist")
                continue
            have = anchors(target)
            for sec in re.findall(r"§(\d+(?:\.\d+)?)", sections):
                if "s" + sec.replace(".", "-") not in have:
                    missing.append(f"{name}: docs/{page} has no §{sec}")
    assert not missing, "\n".join(sorted(set(missing)))


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
