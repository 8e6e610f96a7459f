import math
import os

import pytest

from verifylib import canonical


def test_canonical_is_sorted_strict_and_stable():
    a = canonical.dumps({"b": 1, "a": [1.5, float("inf"), -math.inf, math.nan], "c": "é"})
    assert a == '{"a":[1.5,"inf","-inf","nan"],"b":1,"c":"é"}\n'.encode("utf-8")
    assert canonical.dumps({"c": "é", "a": [1.5, math.inf, -math.inf, math.nan], "b": 1}) == a
    assert canonical.loads(a)["a"][1] == "inf"


def test_loads_refuses_non_strict_tokens():
    for bad in ('{"x": NaN}', '{"x": Infinity}', '[-Infinity]'):
        with pytest.raises(ValueError):
            canonical.loads(bad)


def test_atomic_write_leaves_no_staging_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    canonical.write_json(target, {"v": 1})
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        canonical.write_json(target, {"v": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert canonical.read_json(target) == {"v": 1}


def test_tree_digest_changes_with_content_and_path(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x")
    d1 = canonical.tree_digest(tmp_path)
    (tmp_path / "d" / "f").write_bytes(b"y")
    d2 = canonical.tree_digest(tmp_path)
    (tmp_path / "d" / "f").rename(tmp_path / "d" / "g")
    d3 = canonical.tree_digest(tmp_path)
    assert len({d1, d2, d3}) == 3
    assert canonical.is_sha256(d1) and not canonical.is_sha256(d1.upper())
