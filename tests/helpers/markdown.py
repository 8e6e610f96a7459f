"""Reading the repository's Markdown as GitHub renders it: prose without code, heading
anchors (tests/unit/test_docs.py and tests/fake/test_docs.py)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


_CODE_SPAN = re.compile(r"`[^`\n]*`")


_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


_EXPLICIT_ID = re.compile(r"""<a\s+(?:[^>]*\s)?(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)


def prose(text: str) -> str:
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
