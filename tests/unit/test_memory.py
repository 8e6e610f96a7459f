"""verifylib.numerics.memory: the allocator settings a stage kernel starts with."""

from __future__ import annotations

import pytest

from verifylib.numerics import memory


@pytest.mark.skipif(memory._glibc() is None, reason="not a glibc host")
def test_a_glibc_child_gets_huge_pages_unless_the_user_set_tunables():
    assert memory.allocator_environment({"PATH": "/bin"}) == {
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    # A user's own tunables are theirs: nothing is added or merged.
    assert memory.allocator_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == {}


def test_off_glibc_nothing_is_added(monkeypatch):
    monkeypatch.setattr(memory, "_GLIBC", None)
    assert memory.allocator_environment({}) == {}


class _Libc:
    def __init__(self):
        self.trims = []

    def malloc_trim(self, pad):
        self.trims.append(pad)


def test_trim_heap_trims_and_collects_nothing(monkeypatch):
    import gc

    libc = _Libc()
    monkeypatch.setattr(memory, "_glibc", lambda: libc)
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
    memory.trim_heap()
    assert libc.trims == [0] and collections == []
    memory.release_memory()  # the cycles coremltools builds still need a collection
    assert libc.trims == [0, 0] and collections == [()]
