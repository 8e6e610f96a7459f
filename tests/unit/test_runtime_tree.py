"""The runtime source folder a stage reads fixtures from is checked against the tree id that
passed ``build.source_identity``: on the stage's first use, then trusted for that stage."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verifylib.errors import PrerequisiteBroken
from verifylib.stages import artifacts
from verifylib.whispercpp import source

pytestmark = pytest.mark.unit


def _ctx(folder):
    evidence = {"pin": "v1.8.5", "pin_commit": "c" * 40, "pin_tree": "a" * 40,
                "computed_tree": "a" * 40, "origin": None, "path": str(folder), "cached": True}
    return SimpleNamespace(checked_runtime_tree=None,
                           document=lambda gate, name, schema: schema.from_json(evidence, name))


def test_the_tree_is_hashed_once_per_stage_and_a_changed_one_refused(tmp_path, monkeypatch):
    hashed = []
    monkeypatch.setattr(source, "git_tree_id", lambda p: hashed.append(p) or "a" * 40)
    ctx = _ctx(tmp_path)
    assert artifacts.runtime_tree(ctx) == tmp_path
    assert artifacts.runtime_tree(ctx) == tmp_path
    assert hashed == [tmp_path]  # the second use reads the stage's checked folder
    assert artifacts.runtime_tree(_ctx(tmp_path)) == tmp_path  # another stage checks again
    assert len(hashed) == 2
    monkeypatch.setattr(source, "git_tree_id", lambda p: "b" * 40)
    changed = _ctx(tmp_path)
    with pytest.raises(PrerequisiteBroken, match="changed since build.source_identity passed"):
        artifacts.runtime_tree(changed)
    assert changed.checked_runtime_tree is None
    with pytest.raises(PrerequisiteBroken, match="changed since"):
        artifacts.runtime_tree(_ctx(tmp_path / "gone"))
