"""The documentation is self-contained: every file of the repository (tracked, or new and
not ignored, as ``git ls-files`` lists them) is checked.

- No file of the repository points at documents outside it (the leads' design notes or
  the upstream study and its measurements): the repository's own words are in ``docs/``.
  The one exception is test code that reads such a file as optional test data.
- Every ``docs/<page>.md §N`` citation in code, tests and docs names a section that exists."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.helpers import ROOT
from tests.helpers.markdown import anchors

DOCS = ROOT / "docs"

# Spelled in pieces so that this file does not mention what it looks for.
FORBIDDEN = ("DESIGN" + ".md", "FACTS" + ".md", ".." + "/shared", "spec/" + "000")

# Tests that read an outside file as optional data (and are skipped without it).
READS_OUTSIDE_DATA = {"tests/unit/test_gates.py"}


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
