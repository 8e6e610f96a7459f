"""A finished run travelling back from a Ray node: the streamed tar and its receiver.

Fast and without a cluster: the archive is checked byte for byte against :mod:`tarfile`,
and :class:`verifylib.batch.run_stream.RunReceiver` is fed what a task yields (header,
chunks, trailer) for a synthetic run that verifies. The real tasks are in
``tests/notebooks/test_ray.py``.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from tests.helpers import synthetic
from verifylib import canonical, params
from verifylib.batch import audit as orchestrate
from verifylib.batch.archive import RunImportRefused, import_run, plan_run_archive
from verifylib.batch.run_stream import RunReceiver, StreamHeader, StreamTrailer
from verifylib.evidence.receipt import verify
from verifylib.stages.context import init_run_dir
from verifylib.evidence import layout

from tests.helpers import ROOT

RUN_ID = "20990101T000000Z-0000abcd"


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """A synthetic published run of ``tiny-en`` with a proper run id, that verifies."""
    synthetic.install_rules(monkeypatch)
    folder = tmp_path / "node" / "run"
    init_run_dir(folder, params.load(ROOT / "parameters" / "tiny-en.yaml"), RUN_ID)
    made = synthetic.make_run(tmp_path / "node")
    (made / "weights.bin").write_bytes(os.urandom(300_000))  # a few chunks' worth
    assert verify(made).ok
    return made


def pack_run(run_dir):
    """The whole archive in memory, for small runs (production streams its chunks)."""
    plan = plan_run_archive(run_dir)
    return b"".join(plan.chunks(max(plan.size, 1)))


def _tarfile_bytes(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    return buf.getvalue()


def test_the_streamed_archive_is_what_tarfile_writes(tmp_path):
    folder = tmp_path / "run"
    (folder / "sub" / "empty").mkdir(parents=True)
    (folder / "a.bin").write_bytes(os.urandom(70_001))
    (folder / "sub" / "zero").write_bytes(b"")
    (folder / "sub" / ("long-" * 40 + ".txt")).write_text("x" * 513)
    expected = _tarfile_bytes(folder)
    plan = plan_run_archive(folder)
    assert plan.size == len(expected)
    for chunk_bytes in (1, 511, 512, 4096, 10**7):
        chunks = list(plan.chunks(chunk_bytes))
        assert b"".join(chunks) == expected
        assert all(len(c) == chunk_bytes for c in chunks[:-1])
        assert 0 < len(chunks[-1]) <= chunk_bytes
    assert pack_run(folder) == expected
    with pytest.raises(ValueError):
        next(plan.chunks(0))


def test_links_are_refused_and_a_file_that_changed_stops_the_stream(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "a").write_bytes(b"x" * 1000)
    (folder / "link").symlink_to(folder / "a")
    with pytest.raises(RunImportRefused, match="not a regular file"):
        plan_run_archive(folder)
    (folder / "link").unlink()
    plan = plan_run_archive(folder)
    (folder / "a").write_bytes(b"x" * 10)
    with pytest.raises(RunImportRefused, match="shorter than when it was packed"):
        list(plan.chunks(64))
    plan = plan_run_archive(folder)
    (folder / "a").write_bytes(b"x" * 20)
    with pytest.raises(RunImportRefused, match="longer than when it was packed"):
        list(plan.chunks(64))


def _stream(run_dir: Path, chunk_bytes: int, name: str = "tiny-en") -> list:
    """What audit_task yields for a published run."""
    plan = plan_run_archive(run_dir)
    chunks = list(plan.chunks(chunk_bytes))
    header = StreamHeader(name, RUN_ID, "INCOMPLETE", {"kind": "ray", "node": "node-1"},
                          plan.size, chunk_bytes)
    data = b"".join(chunks)
    trailer = StreamTrailer(len(chunks), len(data), hashlib.sha256(data).hexdigest())
    return [header.to_json(), *chunks, trailer.to_json()]


def _leftovers(reports: Path) -> list[str]:
    return sorted(str(p.relative_to(reports)) for p in reports.rglob("*")
                  if ".staging" in p.parts)


def test_a_run_received_in_chunks_is_verified_and_published(run_dir, tmp_path):
    reports = tmp_path / "reports"
    items = _stream(run_dir, 64 * 1024)
    assert len(items) > 2 + 4  # header, several chunks, trailer
    receiver = RunReceiver("tiny-en", reports, allow_simulated=True)
    outcomes = [receiver.take(item) for item in items]
    receiver.discard()
    assert outcomes[:-1] == [None] * (len(items) - 1)
    out = outcomes[-1]
    assert out.run_dir == reports / "tiny-en" / RUN_ID and out.verdict.value == "INCOMPLETE"
    assert receiver.chunks == len(items) - 2 and receiver.node == "node-1"
    assert verify(out.run_dir).ok
    assert (out.run_dir / "weights.bin").read_bytes() == (run_dir / "weights.bin").read_bytes()
    assert _leftovers(reports) == []
    # The same run again is refused: a published run is never replaced.
    again = RunReceiver("tiny-en", reports, allow_simulated=True)
    with pytest.raises(RunImportRefused, match="already here; not replaced"):
        for item in items:
            again.take(item)
    again.discard()
    assert _leftovers(reports) == []


@pytest.mark.parametrize("damage", ["flipped", "dropped", "extra", "short", "wrong-model",
                                    "no-header"])
def test_a_damaged_stream_publishes_nothing(run_dir, tmp_path, damage):
    reports = tmp_path / "reports"
    items = _stream(run_dir, 64 * 1024)
    if damage == "flipped":
        items[2] = bytes([items[2][0] ^ 1]) + items[2][1:]
        words = "arrived damaged"
    elif damage == "dropped":
        del items[2]
        words = "arrived damaged"
    elif damage == "extra":
        items.insert(-1, b"\0" * 512)
        words = "more than the"
    elif damage == "short":
        items = items[:-2]
        words = None
    elif damage == "wrong-model":
        words = "the task returned 'tiny-en''s run"
    else:
        items = items[1:]
        words = "does not start with a run header"
    receiver = RunReceiver("other" if damage == "wrong-model" else "tiny-en", reports,
                           allow_simulated=True)
    try:
        if words is None:
            for item in items:
                assert receiver.take(item) is None
            assert receiver.unfinished().startswith(
                "tiny-en: the task's stream ended before the whole run arrived")
        else:
            with pytest.raises(RunImportRefused, match=words):
                for item in items:
                    receiver.take(item)
    finally:
        receiver.discard()
    assert not (reports / "tiny-en" / RUN_ID).exists()
    assert _leftovers(reports) == []


def test_import_reads_an_archive_file_and_refuses_a_run_that_does_not_verify(run_dir,
                                                                             tmp_path):
    reports = tmp_path / "reports"
    archive = tmp_path / "run.tar"
    archive.write_bytes(pack_run(run_dir))
    # A receipt that no longer matches its run: refused, nothing published or left.
    with tarfile.open(archive, "a") as tar:
        data = b"tampered"
        info = tarfile.TarInfo("evidence/extra.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(RunImportRefused, match="does not verify"):
        import_run(archive, "tiny-en", reports, allow_simulated=True)
    assert not (reports / "tiny-en" / RUN_ID).exists() and _leftovers(reports) == []
    archive.write_bytes(pack_run(run_dir))
    out = import_run(archive, "tiny-en", reports, allow_simulated=True)
    assert out.run_dir.is_dir() and canonical.read_json(out.run_dir / "run.json")[
        "run_id"] == RUN_ID


def test_stream_items_are_checked_field_by_field():
    good = StreamHeader("m", RUN_ID, "INCOMPLETE", {"node": "n"}, 10, 4).to_json()
    assert StreamHeader.from_json(good).size == 10
    for bad in (dict(good, run_id="../x"), dict(good, size=-1), dict(good, chunk_bytes=0),
                dict(good, size=True), dict(good, kind="other"), "header", None):
        with pytest.raises(RunImportRefused):
            StreamHeader.from_json(bad)
    trailer = StreamTrailer(1, 10, "0" * 64).to_json()
    assert StreamTrailer.from_json(trailer).chunks == 1
    with pytest.raises(RunImportRefused):
        StreamTrailer.from_json(dict(trailer, chunks="1"))
    assert layout.RUN_ID_RE.match(RUN_ID)
