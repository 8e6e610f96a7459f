"""A careful forger's tools: edit a run's evidence, then make every digest consistent.

A forgery made with these helpers leaves nothing for a byte-level check to find: each
edited file's digest is refreshed in its gate records, and the receipt is rebuilt from the
edited stage files (so its rows, identity table, verdict and file list agree). Only the
validator's own knowledge can catch what is left.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from verifylib import canonical
from verifylib.evidence import gates, receipt


def clone(run_dir: Path, dest: Path) -> Path:
    """Copy a run directory cheaply (hard links; every edit here replaces files whole)."""
    out = Path(shutil.copytree(run_dir, dest, copy_function=os.link))
    # A published run is sealed read-only (folders 0555); the clone's folders are the
    # forger's, writable, so its edits (files replaced whole) work for any user.
    for folder in (out, *(p for p in out.rglob("*") if p.is_dir() and not p.is_symlink())):
        folder.chmod(0o755)
    return out


def _stage_files(run_dir: Path):
    for stage in gates.STAGES:
        path = run_dir / "gates" / f"{stage}.json"
        if path.exists():
            yield stage, path


def refresh_refs(run_dir: Path) -> None:
    """Recompute every evidence digest the gate records cite."""
    for _, path in _stage_files(run_dir):
        data = canonical.read_json(path)
        for rec in data["gates"]:
            for ref in rec["evidence"]:
                f = run_dir / ref["path"]
                if f.is_file():
                    ref["sha256"] = canonical.sha256_file(f)
        canonical.write_json(path, data)


def reseal(run_dir: Path) -> dict:
    """Refresh every digest and rebuild the receipt from the (edited) stage files.

    Returns the receipt document as written (``receipt.json``'s JSON)."""
    refresh_refs(run_dir)
    (run_dir / "receipt.json").unlink(missing_ok=True)
    return receipt.build_receipt(run_dir).to_json()


def edit_json(run_dir: Path, rel: str, fn: Callable[[Any], Any]) -> None:
    """Apply ``fn`` to a JSON file of the run (in place on the parsed value, or returned)."""
    path = run_dir / rel
    data = canonical.read_json(path)
    out = fn(data)
    canonical.write_json(path, data if out is None else out)


def edit_gate(run_dir: Path, gate_id: str, fn: Callable[[dict], None]) -> None:
    """Edit one gate's record in its stage file."""
    g = gates.gate(gate_id)
    def apply(data):
        for rec in data["gates"]:
            if rec["id"] == gate_id:
                fn(rec)
    edit_json(run_dir, f"gates/{g.stage}.json", apply)


def relabel(run_dir: Path, gate_id: str, status: str, kind: str, detail: str) -> None:
    """Give a gate another status and reason, dropping its evidence as NOT_RUN would."""
    def fn(rec):
        rec["status"] = status
        rec["reason"] = {"kind": kind, "detail": detail}
        if status == "NOT_RUN":
            rec["evidence"] = []
            rec["identities"] = {}
    edit_gate(run_dir, gate_id, fn)


def problems_naming(res, gate_id: str) -> list[str]:
    """The verification problems that name ``gate_id``."""
    return [p for p in res.problems if gate_id in p]


def snapshot(run_dir: Path) -> dict:
    """Every entry below ``run_dir``: files by content digest, size and mtime, folders by
    mtime (a file added or removed changes its folder's)."""
    out = {}
    for p in sorted(run_dir.rglob("*")):
        st = p.lstat()
        rel = p.relative_to(run_dir).as_posix()
        if p.is_file():
            out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size,
                        st.st_mtime_ns)
        else:
            out[rel] = ("dir", st.st_mtime_ns)
    out["."] = ("dir", run_dir.stat().st_mtime_ns)
    return out
