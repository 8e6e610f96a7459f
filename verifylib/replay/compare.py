"""Recorded against replayed: one comparison per claim of :data:`~verifylib.replay.claims.CLAIMS`.

Each function takes the published run (read through :class:`verifylib.evidence.runs.Run`,
digest-checked) and the scratch run the replay made (:class:`~verifylib.replay.rederive.
Rederived`) and returns the claims it decides. Nothing here runs anything: the physical
work is done before, by :mod:`verifylib.replay.rederive` and :mod:`verifylib.replay.parity`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from verifylib import canonical
from verifylib.evidence.gates import (
    BUILD_GGML,
    BUILD_PATCH_EXACT,
    BUILD_SOURCE_IDENTITY,
    CANARY_LIFECYCLE_AB,
    CANARY_SANITIZER,
    CANARY_SEAM_NEGATIVE,
    CANARY_SEAM_POSITIVE,
    EXPORT_CONTRACT,
    EXPORT_GGML_MODEL,
    EXPORT_PAIR,
    WER_GGML_VS_SOURCE,
    WER_SEAM,
    Status,
)
from verifylib.evidence.layout import EVIDENCE_DIR, UNPATCHED_SIDECAR, recorded_gates
from verifylib.evidence.records import EvidenceView
from verifylib.replay.claims import (
    CLAIMS,
    SPEC_OF,
    Claim,
    ClaimStatus,
    not_replayable,
    same_or_differs,
)
from verifylib.replay.rederive import MissingFixture, Rederived

if TYPE_CHECKING:
    from verifylib.evidence.runs import Run

PACKAGE = "ggml-model-encoder.mlpackage"
MAJORITY = 0.5
"""An unpatched outcome seen in at least this share of one side's runs must be seen on the
other side too (the outcomes are compared as distributions, never run by run)."""


class _Sides:
    """The recorded and the replayed record of each gate, and their evidence."""

    def __init__(self, run: Run, rd: Rederived, packages: Path | None = None):
        self.run, self.rd = run, rd
        self.packages = packages or run.path
        self.replayed = recorded_gates(rd.run_dir)

    def reason(self, gate_id: str) -> str | None:
        """Why ``gate_id`` cannot be compared, or None when both sides measured it."""
        rec = self.run.gates.get(gate_id)
        if rec is None:
            return f"{gate_id} is not in the run"
        if rec.status not in (Status.PASS, Status.FAIL):
            return f"{gate_id} is {rec.status.value} in the run ({rec.reason.detail})"
        rep = self.replayed.get(gate_id)
        if rep is None:
            stage = next((s for s, e in self.rd.errors.items() if s.split("_")[1]
                          == gate_id.split(".")[0]), None)
            why = self.rd.errors.get(stage, "") if stage else ""
            return f"{gate_id} was not replayed{': ' + why if why else ''}"
        if rep.status not in (Status.PASS, Status.FAIL):
            return (f"{gate_id} ended {rep.status.value} on this host "
                    f"({rep.reason.detail})")
        return None

    def recorded(self, gate_id: str, name: str) -> Any:
        return self.run.evidence(gate_id).json(name)

    def replayed_json(self, gate_id: str, name: str) -> Any:
        return EvidenceView(self.rd.run_dir, self.replayed[gate_id].evidence).json(name)

    def has(self, gate_id: str, name: str) -> bool:
        rec = self.run.gates.get(gate_id)
        return rec is not None and any(e.name == name for e in rec.evidence)

    def status_pair(self, gate_id: str) -> tuple[str, str]:
        return self.run.gates[gate_id].status.value, self.replayed[gate_id].status.value


def _status_differs(sides: _Sides, claim_id: str, gate_id: str) -> Claim | None:
    rec, rep = sides.status_pair(gate_id)
    if rec != rep:
        return Claim(claim_id, ClaimStatus.DIFFERS, {"status": rec}, {"status": rep},
                     f"{gate_id} was {rec} in the run and is {rep} replayed here "
                     f"({sides.replayed[gate_id].reason.detail})")
    return None


# ----------------------------------------------------------------------------- source

def source_claims(sides: _Sides) -> list[Claim]:
    """``source.tree`` and ``source.patch``."""
    out = []
    why = sides.reason(BUILD_SOURCE_IDENTITY)
    if why:
        out.append(not_replayable("source.tree", f"source unreachable or not compared: {why}"))
    else:
        rec, rep = (sides.recorded(BUILD_SOURCE_IDENTITY, "source"),
                    sides.replayed_json(BUILD_SOURCE_IDENTITY, "source"))
        out.append(same_or_differs("source.tree", _tree(rec), _tree(rep),
                                   what="git tree id of the source obtained from its spec"))
    why = sides.reason(BUILD_PATCH_EXACT)
    if why:
        out.append(not_replayable("source.patch", why))
    else:
        out.append(same_or_differs("source.patch", _patch(sides.recorded(BUILD_PATCH_EXACT,
                                                                         "patch")),
                                   _patch(sides.replayed_json(BUILD_PATCH_EXACT, "patch")),
                                   what="patched tree and exact diff"))
    return out


def _tree(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"computed_tree": doc.get("computed_tree"), "pin": doc.get("pin")}


def _patch(doc: Mapping[str, Any]) -> dict[str, Any]:
    after = (doc.get("checks") or {}).get("after") or {}
    return {"diff_sha256": after.get("diff_sha256"), "touches": after.get("touches"),
            "head_tree": after.get("head_tree")}


# ----------------------------------------------------------------------------- builds

def build_claim(claim_id: str, rec: Mapping[str, Any], rep: Mapping[str, Any]) -> Claim:
    """Judge one rebuilt binary (or library set) against the recorded one.

    Same bytes: REPRODUCED. Same build key (the same inputs: tree, patch, options,
    compiler, CPU) and other bytes: DIFFERS. Another key: NOT_REPLAYABLE, the inputs that
    differ named, and the claims downstream use the rebuilt binary (labelled ``rebuilt``).

    Parameters
    ----------
    claim_id : str
        The claim.
    rec, rep : dict
        ``{"key": ..., "sha256": ..., "compiler": ..., "options": ...}`` of each side.

    Returns
    -------
    Claim
    """
    r = {"key": rec.get("key"), "sha256": rec.get("sha256")}
    p = {"key": rep.get("key"), "sha256": rep.get("sha256")}
    if not r["sha256"] or not p["sha256"]:
        side = "the run" if not r["sha256"] else "this host's build"
        return Claim(claim_id, ClaimStatus.NOT_REPLAYABLE, r, p,
                     f"{side} records no digest to compare")
    if r["sha256"] == p["sha256"]:
        return Claim(claim_id, ClaimStatus.REPRODUCED, r, p, "rebuilt from the pin and "
                     "options: the same bytes" + ("" if r["key"] == p["key"] else
                                                   " (under another build key)"))
    if r["key"] == p["key"]:
        return Claim(claim_id, ClaimStatus.DIFFERS, r, p, "the same build inputs (build key) "
                     "gave other bytes here")
    diffs = [f"{k}: {rec.get(k)!r} vs {rep.get(k)!r}" for k in ("compiler", "options")
             if rec.get(k) != rep.get(k)]
    if isinstance(rec.get("compiler"), dict) and isinstance(rep.get("compiler"), dict):
        a, b = rec["compiler"], rep["compiler"]
        diffs = [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b))
                 if a.get(k) != b.get(k)] + [d for d in diffs if not d.startswith("compiler")]
    return Claim(claim_id, ClaimStatus.NOT_REPLAYABLE, r, p,
                 "rebuilt here with other inputs, so other bytes ("
                 + ("; ".join(diffs) or "another build key")
                 + "); the other claims use the binary rebuilt here", rebuilt=True)


def _asan_build(doc: Mapping[str, Any], side: str) -> dict[str, Any]:
    # The sanitizer evidence names each side's binary digest and its build record.
    s = doc["sides"][side]
    build = s.get("build") or {}
    return {"key": build.get("key"), "sha256": s.get("binary_sha256"),
            "options": build.get("options")}


def _unpatched_sidecar(sides: _Sides, *, replayed: bool) -> dict[str, Any] | None:
    # Stage 01 records the unpatched build in a sidecar no gate cites (the receipt covers
    # it); the A/B gate names only its binary.
    if replayed:
        path = sides.rd.run_dir / EVIDENCE_DIR / "01_build" / f"{UNPATCHED_SIDECAR}.json"
        return canonical.read_json(path) if path.is_file() else None
    ref = sides.run.sidecars("01_build").get(UNPATCHED_SIDECAR)
    return EvidenceView(sides.run.path, (ref,)).json(UNPATCHED_SIDECAR) if ref else None


def build_claims(sides: _Sides) -> list[Claim]:
    """``build.ggml_lib``, ``build.ggml``, ``build.unpatched`` and ``build.asan``."""
    out = []
    why = sides.reason(BUILD_GGML)
    if why:
        out.append(not_replayable("build.ggml_lib", why))
        out.append(not_replayable(BUILD_GGML, why))
    else:
        rec, rep = sides.recorded(BUILD_GGML, "build"), sides.replayed_json(BUILD_GGML,
                                                                              "build")
        rg, pg = rec.get("ggml") or {}, rep.get("ggml") or {}
        if not rg:
            out.append(not_replayable("build.ggml_lib", "the run links no shared ggml (built "
                                                        "before ggml was built once)"))
        else:
            lib = build_claim("build.ggml_lib",
                              {"key": rg.get("key"), "sha256": rg.get("libraries"),
                               "compiler": rec.get("compiler"), "options": rg.get("options")},
                              {"key": pg.get("key"), "sha256": pg.get("libraries"),
                               "compiler": rep.get("compiler"), "options": pg.get("options")})
            out.append(lib)
        out.append(build_claim(BUILD_GGML, rec, rep))
    rec_u, rep_u = _unpatched_sidecar(sides, replayed=False), _unpatched_sidecar(
        sides, replayed=True)
    if rec_u is None or not rec_u.get("sha256"):
        out.append(not_replayable("build.unpatched", "the run records no unpatched build"))
    elif rep_u is None or not rep_u.get("sha256"):
        out.append(not_replayable("build.unpatched", "no unpatched build was made here"))
    else:
        out.append(build_claim("build.unpatched", rec_u, rep_u))
    gate = CANARY_SANITIZER
    why = sides.reason(gate)
    if why:
        out.append(not_replayable("build.asan", why))
    else:
        rec, rep = sides.recorded(gate, "sanitizer"), sides.replayed_json(gate, "sanitizer")
        each = {side: build_claim("build.asan", _asan_build(rec, side), _asan_build(rep, side))
                for side in ("unpatched", "patched")}
        worst = next((c for c in each.values() if c.status is ClaimStatus.DIFFERS),
                     next((c for c in each.values()
                           if c.status is ClaimStatus.NOT_REPLAYABLE), each["unpatched"]))
        out.append(Claim("build.asan", worst.status,
                         {side: c.recorded for side, c in each.items()},
                         {side: c.replayed for side, c in each.items()},
                         worst.detail, rebuilt=worst.rebuilt))
    return out


# ----------------------------------------------------------------------------- export

def export_claims(sides: _Sides) -> list[Claim]:
    """``export.ggml_model`` and ``export.program.<precision>``."""
    from verifylib.numerics.mil_exec import MilExecError
    from verifylib.replay.programs import compare_programs

    out = []
    why = sides.reason(EXPORT_GGML_MODEL)
    if why:
        out.append(not_replayable(EXPORT_GGML_MODEL, why))
    else:
        rec, rep = (sides.recorded(EXPORT_GGML_MODEL, "ggml"),
                    sides.replayed_json(EXPORT_GGML_MODEL, "ggml"))
        src = (sides.recorded(EXPORT_GGML_MODEL, "model").get("source_digest")
               if sides.has(EXPORT_GGML_MODEL, "model") else None)
        src2 = sides.replayed_json(EXPORT_GGML_MODEL, "model").get("source_digest")
        out.append(same_or_differs(EXPORT_GGML_MODEL,
                                   {"sha256": rec.get("sha256"), "source_digest": src},
                                   {"sha256": rep.get("sha256"), "source_digest": src2},
                                   what="model file written again from the source model"))
    why = sides.reason(EXPORT_CONTRACT)
    for precision in ("fp32", "fp16"):
        cid = f"export.program.{precision}"
        recorded = sides.packages / precision / PACKAGE
        replayed = sides.rd.run_dir / precision / PACKAGE
        if why:
            out.append(not_replayable(cid, why))
        elif not recorded.is_dir():
            out.append(not_replayable(cid, f"the run publishes no {precision} package"))
        elif not replayed.is_dir():
            out.append(not_replayable(cid, f"no {precision} package was converted here"))
        else:
            try:
                cmp = compare_programs(recorded, replayed)
            except MilExecError as exc:
                out.append(Claim(cid, ClaimStatus.DIFFERS, None, None,
                                 f"a program could not be read: {exc}"))
                continue
            rec_v = {"ops": cmp.ops, "weights": cmp.weights}
            out.append(Claim(cid, ClaimStatus.REPRODUCED if cmp.same else ClaimStatus.DIFFERS,
                             rec_v, {**rec_v, "differences": cmp.differences},
                             f"re-converted program against the published one: "
                             f"{cmp.summary()}"))
    if EXPORT_PAIR in sides.run.gates:
        why = sides.reason(EXPORT_PAIR)
        if why:
            out.append(not_replayable(EXPORT_PAIR, why))
        else:
            rec_status, rep_status = sides.status_pair(EXPORT_PAIR)
            out.append(_status_differs(sides, EXPORT_PAIR, EXPORT_PAIR)
                       or Claim(EXPORT_PAIR, ClaimStatus.REPRODUCED, {"status": rec_status},
                                {"status": rep_status},
                                "the program against the model file's encoder, judged the "
                                "same again"))
    return out


# ----------------------------------------------------------------------------- canary

def _outcomes(side: Mapping[str, Any]) -> Counter[str]:
    counts = side.get("counts")
    if isinstance(counts, dict) and counts:
        return Counter({str(k): int(v) for k, v in counts.items()})
    return Counter(str(r.get("outcome")) for r in side.get("runs", ()))


def distributions_agree(recorded: Counter[str], replayed: Counter[str]) -> tuple[bool, str]:
    """Compare two outcome distributions (never run by run).

    They agree when both have runs, their most frequent outcome is the same, and no
    outcome holding at least :data:`MAJORITY` of one side's runs is absent from the other.

    Parameters
    ----------
    recorded, replayed : Counter
        Outcome -> runs.

    Returns
    -------
    (agree, why)
    """
    if not recorded or not replayed:
        return False, "a side has no runs"
    top_a, top_b = recorded.most_common(1)[0][0], replayed.most_common(1)[0][0]
    if top_a != top_b:
        return False, f"most frequent outcome {top_a!r} recorded, {top_b!r} replayed"
    for a, b, name in ((recorded, replayed, "recorded"), (replayed, recorded, "replayed")):
        n = sum(a.values())
        for outcome, k in a.items():
            if k / n >= MAJORITY and outcome not in b:
                return False, f"{outcome!r} ({k}/{n} {name}) never seen on the other side"
    return True, f"most frequent outcome {top_a!r} on both sides"


def canary_claims(sides: _Sides, *, rebuilt: bool = False) -> list[Claim]:
    """``canary.lifecycle.patched``, ``canary.lifecycle.unpatched``, ``canary.sanitizer``."""
    out = []
    gate = CANARY_LIFECYCLE_AB
    why = sides.reason(gate)
    if why:
        out += [not_replayable("canary.lifecycle.patched", why),
                not_replayable("canary.lifecycle.unpatched", why)]
    else:
        rec, rep = sides.recorded(gate, "lifecycle"), sides.replayed_json(gate, "lifecycle")
        rp, pp = _outcomes(rec["sides"]["patched"]), _outcomes(rep["sides"]["patched"])
        c = same_or_differs("canary.lifecycle.patched", dict(rp), dict(pp),
                            what="patched outcomes", rebuilt=rebuilt)
        out.append(_status_differs(sides, "canary.lifecycle.patched", gate) or c)
        ru, pu = _outcomes(rec["sides"]["unpatched"]), _outcomes(rep["sides"]["unpatched"])
        agree, detail = distributions_agree(ru, pu)
        out.append(Claim("canary.lifecycle.unpatched",
                         ClaimStatus.REPRODUCED if agree else ClaimStatus.DIFFERS,
                         dict(ru), dict(pu), f"unpatched outcomes as distributions: {detail}",
                         rebuilt=rebuilt))
    gate = CANARY_SANITIZER
    why = sides.reason(gate)
    if why:
        out.append(not_replayable(CANARY_SANITIZER, why))
    else:
        rec, rep = _asan_view(sides.recorded(gate, "sanitizer")), _asan_view(
            sides.replayed_json(gate, "sanitizer"))
        c = same_or_differs(CANARY_SANITIZER, rec, rep,
                            what="sanitizer report kind and frame, patched outcomes",
                            rebuilt=rebuilt)
        out.append(_status_differs(sides, CANARY_SANITIZER, gate) or c)
    return out


def _asan_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    view = {}
    for side in ("unpatched", "patched"):
        s = doc["sides"][side]
        reports = [r.get("report") for r in s.get("runs", ()) if r.get("report")]
        kinds = sorted({r.get("kind") for r in reports})
        frames = sorted({f.get("function") for r in reports for f in r.get("frames", ())
                         if f.get("function") and "whisper_batch_free" in f["function"]})
        view[side] = {"reports": kinds, "frames": frames,
                      "outcomes": dict(_outcomes(s))}
    return view


# ----------------------------------------------------------------------------- transcripts

def wer_claims(sides: _Sides, missing: Sequence[MissingFixture], *,
               rebuilt: bool = False) -> list[Claim]:
    """``wer.transcripts.<fixture>``: one per fixture of the run."""
    gate = WER_GGML_VS_SOURCE
    out = [not_replayable(f"wer.transcripts.{m.id}", m.reason) for m in missing]
    why = sides.reason(gate)
    rec_rec = sides.run.gates.get(gate)
    if rec_rec is None or rec_rec.status not in (Status.PASS, Status.FAIL):
        return out + [not_replayable("wer.transcripts", why or f"{gate} did not run")]
    rec_doc = sides.recorded(gate, "wer")
    gone = {m.id for m in missing}
    if why:
        return out + [not_replayable(f"wer.transcripts.{c['id']}", why)
                      for c in rec_doc["clips"] if c["id"] not in gone]
    rep_clips = {c["id"]: c for c in sides.replayed_json(gate, "wer")["clips"]}
    for clip in rec_doc["clips"]:
        cid = f"wer.transcripts.{clip['id']}"
        if clip["id"] in gone:
            continue
        again = rep_clips.get(clip["id"])
        if again is None:
            out.append(not_replayable(cid, f"fixture {clip['id']} was not transcribed here"))
            continue
        out.append(same_or_differs(cid, _clip_view(clip), _clip_view(again),
                                   what="transcripts and edit counts", rebuilt=rebuilt))
    return out


def _clip_view(clip: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("ggml_text", "source_text", "raw_ggml", "raw_source", "source", "ggml",
            "pairwise", "source_empty", "ggml_empty", "detected")
    return {k: clip.get(k) for k in keys if k in clip}


# ----------------------------------------------------------------------------- the seam

def seam_claims(sides: _Sides, *, rebuilt: bool = False) -> list[Claim]:
    """``canary.seam_negative``, ``canary.seam_positive``, ``wer.seam`` re-derived.

    The negative control compares the patched outcomes exactly and the unpatched ones as
    distributions; the positive launch compares its outcome and every encode call's mel and
    output digests (the program executed again on the mel whisper.cpp handed over); the
    seam transcripts compare clip by clip, variant by variant.
    """
    out = []
    gate = CANARY_SEAM_NEGATIVE
    why = sides.reason(gate)
    if why:
        out.append(not_replayable(gate, why))
    else:
        rec, rep = sides.recorded(gate, "seam_negative"), sides.replayed_json(gate,
                                                                             "seam_negative")
        rp, pp = _outcomes(rec["sides"]["patched"]), _outcomes(rep["sides"]["patched"])
        agree, detail = distributions_agree(_outcomes(rec["sides"]["unpatched"]),
                                            _outcomes(rep["sides"]["unpatched"]))
        c = same_or_differs(gate, {"patched": dict(rp), "unpatched_agree": True},
                            {"patched": dict(pp), "unpatched_agree": agree},
                            what=f"patched outcomes; unpatched as distributions ({detail})",
                            rebuilt=rebuilt)
        out.append(_status_differs(sides, gate, gate) or c)
    for gate, name, view, what in (
            (CANARY_SEAM_POSITIVE, "seam_positive", _seam_positive_view,
             "outcome and every encode call's mel and output digests"),
            (WER_SEAM, "seam_wer", _seam_wer_view,
             "seam transcripts, edit counts and causes per variant and clip")):
        why = sides.reason(gate)
        if why:
            out.append(not_replayable(gate, why))
            continue
        c = same_or_differs(gate, view(sides.recorded(gate, name)),
                            view(sides.replayed_json(gate, name)), what=what, rebuilt=rebuilt)
        out.append(_status_differs(sides, gate, gate) or c)
    return out


def _seam_positive_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    calls = (doc.get("executor") or {}).get("calls", ())
    return {"outcome": doc.get("outcome"), "transcript_chars": doc.get("transcript_chars"),
            "calls": [(c.get("n_ctx"), c.get("n_mel"), c.get("input_sha256"),
                       c.get("output_sha256")) for c in calls]}


def _seam_wer_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("seam_text", "raw_seam", "seam", "seam_vs_ggml", "cause", "seam_empty")
    return {v["encoder"]["variant"]: {c["id"]: {k: c.get(k) for k in keys if k in c}
                                      for c in v["clips"]}
            for v in doc.get("variants", ())}


# ------------------------------------------------------------- claims not re-derived

def unreplayed_claims(run: Run, made: set[str]) -> list[Claim]:
    """Return a NOT_REPLAYABLE claim, with its reason, for each catalogue claim not in ``made``.

    The Core ML claims are not re-derived here (a Core ML runtime result); a gate that
    replay has not learned to re-derive is in the catalogue all the same (it is derived
    from the gate table), and says so.

    Parameters
    ----------
    run : verifylib.evidence.runs.Run
        The published run.
    made : set of str
        The claim ids the comparisons decided (a per-fixture claim counts for its base).

    Returns
    -------
    list of Claim
    """
    out = []
    for spec in CLAIMS:
        if spec.id in made:
            continue
        rec = run.gates.get(spec.gate)
        if rec is None or rec.status not in (Status.PASS, Status.FAIL):
            status = rec.status.value if rec is not None else "absent"
            out.append(not_replayable(spec.id, f"{spec.gate} is {status} in the run: "
                                               f"nothing recorded to replay"))
        elif spec.macos_only:
            out.append(not_replayable(spec.id, "macOS-only: a Core ML runtime result, which "
                                               "replay does not re-derive",
                                      {"status": rec.status.value}))
        else:
            out.append(not_replayable(spec.id, f"replay does not re-derive {spec.gate} yet: "
                                               f"its recorded evidence is re-judged by verify",
                                      {"status": rec.status.value}))
    return out


def _base(claim_id: str) -> str:
    """Return the catalogue id of a claim (``wer.transcripts.jfk``: ``wer.transcripts``)."""
    return claim_id if claim_id in SPEC_OF else claim_id.rsplit(".", 1)[0]


def all_claims(run: Run, rd: Rederived, parity: list[Claim], *,
               packages: Path | None = None) -> list[Claim]:
    """Every claim, in catalogue order (per-fixture claims where ``wer.transcripts`` is).

    Parameters
    ----------
    run : verifylib.evidence.runs.Run
        The published run.
    rd : Rederived
        The replay's scratch run.
    parity : list of Claim
        :func:`verifylib.replay.parity.replay_parity` output.
    packages : Path, optional
        The copies of the run's packages (:func:`verifylib.replay.engine.copy_packages`).

    Returns
    -------
    list of Claim
    """
    sides = _Sides(run, rd, packages)
    builds = build_claims(sides)
    rebuilt = any(c.rebuilt for c in builds if c.id in (BUILD_GGML, "build.unpatched"))
    claims = (source_claims(sides) + builds + export_claims(sides)
              + canary_claims(sides, rebuilt=rebuilt) + parity
              + wer_claims(sides, rd.missing, rebuilt=rebuilt)
              + seam_claims(sides, rebuilt=rebuilt))
    claims += unreplayed_claims(run, {_base(c.id) for c in claims})
    order = [c.id for c in CLAIMS]

    def rank(c: Claim) -> tuple[int, str]:
        base = _base(c.id)
        return (order.index(base) if base in order else len(order), c.id)
    return sorted(claims, key=rank)
