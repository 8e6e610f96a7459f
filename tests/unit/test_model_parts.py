"""A model split across wheels: ``X.part1``, ``X.part2`` … joined into ``X`` on intake."""

from __future__ import annotations

import pytest

from verifylib.models.ct2 import ModelError
from verifylib.models.intake import join_parts

pytestmark = pytest.mark.unit


def test_parts_are_joined_in_numeric_order(tmp_path):
    (tmp_path / "model.bin.part10").write_bytes(b"J")
    for i in range(1, 10):
        (tmp_path / f"model.bin.part{i}").write_bytes(bytes([64 + i]))
    (tmp_path / "config.json").write_text("{}")
    joined = join_parts(tmp_path)
    assert (tmp_path / "model.bin").read_bytes() == b"ABCDEFGHIJ"
    assert joined == [{"file": "model.bin", "parts": [f"model.bin.part{i}" for i in range(1, 11)],
                       "bytes": 10}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.bin"]


def test_a_gap_or_a_clash_is_refused(tmp_path):
    (tmp_path / "model.bin.part1").write_bytes(b"a")
    (tmp_path / "model.bin.part3").write_bytes(b"c")
    with pytest.raises(ModelError, match=r"parts \[1, 3\] do not run from 1"):
        join_parts(tmp_path)
    (tmp_path / "model.bin.part3").rename(tmp_path / "model.bin.part2")
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="exists beside its parts"):
        join_parts(tmp_path)
