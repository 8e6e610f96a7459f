"""Launch accounting for ``verifylib verify``.

Every launch in a run's ledger is cited by exactly one gate, and every citation matches its
ledger line.

The ledger itself (appending, reading, parsing) is :mod:`verifylib.runtime.ledger`; this
module is the validator's side of it, which needs the gate records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from verifylib.canonical import is_sha256
from verifylib.errors import EvidenceInvalid
from verifylib.evidence import gates, identities
from verifylib.evidence.gates import Status
from verifylib.evidence.records import EvidenceView, GateRecord
from verifylib.runtime.ledger import (
    CITED_FIELDS,
    LEDGER_FILE,
    SINGLE_SHOT_GATES,
    argv_sha256,
    is_int,
    same_value,
    scan,
    walk_citations,
)


def _gate_order(records: Mapping[str, GateRecord]) -> list[str]:
    known = [g.id for g in gates.GATES if g.id in records]
    return known + sorted(set(records) - set(known))


def check(run_dir: str | os.PathLike[str], records: Mapping[str, GateRecord]) -> list[str]:
    """Check the ledger against the launches the gates' evidence cites.

    Every JSON evidence file a gate cites is read (through
    :class:`verifylib.evidence.records.EvidenceView`, which verifies its digest) and walked; each
    dict holding a ``"launch"`` key is a citation ``{"seq", "binary_sha256"}`` and must
    repeat its entry's argv (as ``argv``, compared through :func:`argv_sha256`, or as
    ``argv_sha256``) and :data:`CITED_FIELDS`, and the citation's ``binary_sha256`` must
    be the entry's. Every entry must be cited exactly once, and each gate of
    :data:`SINGLE_SHOT_GATES` that ran must cite exactly one launch (at most one when it
    raised). A run without a ledger file is fine only if nothing cites a launch.

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id to :class:`verifylib.evidence.records.GateRecord` (e.g. from
        :func:`verifylib.evidence.receipt.collect_records`).

    Returns
    -------
    list of str
        Problems, each naming the gate it concerns (or ``ledger:`` for the file itself);
        empty when the ledger and the evidence agree.
    """
    run_dir = Path(run_dir)
    path = run_dir / LEDGER_FILE
    has_ledger = path.is_file()
    entries, problems = scan(path.read_bytes()) if has_ledger else ({}, [])
    files = _cited_files(run_dir, records, problems)
    cited_by = _match_citations(files, entries, has_ledger, problems)
    problems += _shared_launches(cited_by, records)
    problems += _uncited_launches(entries, cited_by)
    problems += _single_shot_problems(records, files)
    problems += _seam_launches(cited_by, entries, records)
    return problems


def _seam_launches(cited_by: Mapping[int, list[tuple[str, str]]],
                   entries: Mapping[int, Mapping[str, Any]],
                   records: Mapping[str, GateRecord]) -> list[str]:
    """Name each launch of a seam binary cited by a gate that is not a seam gate.

    A seam binary (docs/runtime-contract.md §11) is named by the identities of
    :data:`verifylib.evidence.identities.SEAM_BINARIES` wherever a gate binds one; its
    launches may stand only behind :data:`verifylib.evidence.gates.SEAM_GATES`, never behind
    a Core ML claim (or any other).
    """
    seam = {rec.identities.get(key) for rec in records.values()
            for key in identities.SEAM_BINARIES} - {None}
    problems = []
    for seq, cites in sorted(cited_by.items()):
        entry = entries.get(seq)
        if entry is None or entry.get("binary_sha256") not in seam:
            continue
        for gid, where in cites:
            if gid not in gates.SEAM_GATES:
                problems.append(f"{gid}: launch #{seq} cited at {where} ran a seam binary; "
                                "a seam launch never stands in for another gate's (least of "
                                "all a Core ML claim)")
    return problems


@dataclass
class _CitedFiles:
    """The JSON evidence files each gate cites, and the launch citations each file holds.

    Attributes
    ----------
    owner : dict
        Evidence path -> the first gate, in registry order, that cites it.
    per_file : dict
        Evidence path -> its ``(pointer, citing dict)`` pairs, read once.
    gate_files : dict
        Gate id -> the evidence paths it cites that could be read, in citing order.
    """

    owner: dict[str, str] = field(default_factory=dict)
    per_file: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    gate_files: dict[str, list[str]] = field(default_factory=dict)


def _cited_files(run_dir: Path, records: Mapping[str, GateRecord],
                 problems: list[str]) -> _CitedFiles:
    """Read each gate's JSON evidence for its launch citations, noting files it cannot read."""
    # Citations per evidence file, read once per path: two gates citing one shared file
    # (the same bytes) must not count its launches twice, so a file's citations belong to
    # the first gate, in registry order, that cites it.
    files = _CitedFiles()
    for gid in _gate_order(records):
        files.gate_files[gid] = []
        for ref in records[gid].evidence:
            if not ref.path.endswith(".json") or ref.path in files.gate_files[gid]:
                continue
            try:
                doc = EvidenceView(run_dir, [ref]).json(ref.name)
            except EvidenceInvalid as exc:
                problems.append(f"{gid}: cannot read evidence {ref.path} for its launches: {exc}")
                continue
            files.gate_files[gid].append(ref.path)
            files.owner.setdefault(ref.path, gid)
            if ref.path not in files.per_file:
                files.per_file[ref.path] = list(walk_citations(doc))
    return files


def _well_formed(launch: Any) -> bool:
    """Tell whether a citation's ``launch`` is ``{"seq", "binary_sha256"}`` of the right types."""
    return (isinstance(launch, dict) and set(launch) == {"seq", "binary_sha256"}
            and is_int(launch["seq"]) and launch["seq"] >= 0
            and is_sha256(launch["binary_sha256"]))


def _match_citations(files: _CitedFiles, entries: Mapping[int, Mapping[str, Any]],
                     has_ledger: bool, problems: list[str]) -> dict[int, list[tuple[str, str]]]:
    """Hold each citation against its ledger entry; return launch seq -> (gate, place) cites."""
    cited_by: dict[int, list[tuple[str, str]]] = {}
    for gid, paths in files.gate_files.items():
        for fpath in paths:
            for pointer, d in files.per_file[fpath]:
                where = f"{fpath}#{pointer}"
                launch = d["launch"]
                if not _well_formed(launch):
                    problems.append(f"{gid}: malformed launch citation {launch!r} at {where}")
                    continue
                if files.owner[fpath] != gid:
                    continue  # counted under the file's first gate
                seq = launch["seq"]
                cited_by.setdefault(seq, []).append((gid, where))
                entry = entries.get(seq)
                if entry is None:
                    why = "" if has_ledger else f" (the run has no {LEDGER_FILE})"
                    problems.append(f"{gid}: launch #{seq} cited at {where} is missing from "
                                    f"the ledger{why}")
                    continue
                bad = _mismatches(d, entry)
                if bad:
                    problems.append(f"{gid}: launch #{seq} cited at {where} differs from its "
                                    f"ledger entry in {', '.join(bad)}")
    return cited_by


def _shared_launches(cited_by: Mapping[int, list[tuple[str, str]]],
                     records: Mapping[str, GateRecord]) -> list[str]:
    """Name each launch cited more than once, by two gates or twice by one."""
    problems = []
    for seq, cites in sorted(cited_by.items()):
        if len(cites) < 2:
            continue
        gids = sorted({g for g, _ in cites}, key=_gate_order(records).index)
        places = ", ".join(w for _, w in cites)
        if len(gids) > 1:
            problems.append(f"{' and '.join(gids)}: launch #{seq} is cited by {len(gids)} "
                            f"gates ({places}); each launch belongs to exactly one gate")
        else:
            problems.append(f"{gids[0]}: launch #{seq} is cited {len(cites)} times ({places})")
    return problems


def _uncited_launches(entries: Mapping[int, Mapping[str, Any]],
                      cited_by: Mapping[int, list[tuple[str, str]]]) -> list[str]:
    """Name each ledger entry no gate cites, with the gate most likely behind it."""
    problems = []
    # Who launched what, to name the gate behind an uncited entry.
    by_argv: dict[str, list[tuple[str, int]]] = {}
    for seq, cites in cited_by.items():
        if seq in entries:
            by_argv.setdefault(entries[seq]["argv_sha256"], []).append((cites[0][0], seq))
    cited_seqs = sorted(s for s in cited_by if s in entries)
    for seq in sorted(entries):
        if seq in cited_by:
            continue
        e = entries[seq]
        same = sorted(by_argv.get(e["argv_sha256"], []), key=lambda t: t[1])
        if same:
            gid = same[0][0]
            problems.append(
                f"{gid}: uncited launch #{seq} (argv {_short(e['argv_sha256'])}, the same "
                f"command line as {gid}'s launch #{same[0][1]}, a retried or hidden run)")
            continue
        before = [s for s in cited_seqs if s < seq]
        after = [s for s in cited_seqs if s > seq]
        around = []
        if before:
            around.append(f"after {cited_by[before[-1]][0][0]}'s launch #{before[-1]}")
        if after:
            around.append(f"before {cited_by[after[0]][0][0]}'s launch #{after[0]}")
        problems.append(
            f"uncited launch #{seq} (argv {_short(e['argv_sha256'])}, binary "
            f"{_short(e['binary_sha256'])}, started {e['started_utc']}, "
            f"{' and '.join(around) or 'no gate cites any launch'}, a retried or hidden run)")
    return problems


def _single_shot_problems(records: Mapping[str, GateRecord], files: _CitedFiles) -> list[str]:
    """Name each single-shot gate that does not cite exactly its one launch."""
    problems = []
    for gid in SINGLE_SHOT_GATES:
        rec = records.get(gid)
        if rec is None:
            continue
        n = sum(len(files.per_file[f]) for f in files.gate_files.get(gid, []))
        ran = rec.status in (Status.PASS, Status.FAIL)
        if (ran and n != 1) or (not ran and n > 1):
            problems.append(f"{gid}: cites {n} launches; this single-shot gate owns exactly "
                            f"one launch (its first and only run)")
    return problems


def _mismatches(cited: Mapping[str, Any], entry: Mapping[str, Any]) -> list[str]:
    """Names of the citing record's fields that differ from its ledger entry."""
    out = []
    if "argv" in cited:
        argv = cited["argv"]
        ok = isinstance(argv, list) and all(isinstance(a, str) for a in argv) and \
            argv_sha256(argv) == entry["argv_sha256"]
        if not ok:
            out.append("argv")
    elif not same_value(cited.get("argv_sha256"), entry["argv_sha256"]):
        out.append("argv (neither argv nor argv_sha256 matches)")
    for k in CITED_FIELDS:
        if k not in cited:
            out.append(f"{k} (missing)")
        elif not same_value(cited[k], entry[k]):
            out.append(k)
    if not same_value(cited["launch"].get("binary_sha256"), entry["binary_sha256"]):
        out.append("binary_sha256")
    return out


def _short(digest: str) -> str:
    return f"{digest[:12]}…"
