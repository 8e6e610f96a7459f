"""The replay's typed outcome: one verdict per claim, and the replay as a whole.

A *claim* is one physical result the run records (a tree id, a binary digest, a program,
an outcome distribution, a set of transcripts). Replay re-derives it on this host and
says REPRODUCED, DIFFERS (with the recorded and the replayed values side by side) or
NOT_REPLAYABLE (with the reason). :data:`CLAIMS` is the catalogue; its ids are stable
(``replay.json`` and the verification summary carry them).

The catalogue is derived from the gate table: each gate is one claim of its own id, unless
:data:`CLAIMS_OF` overrides it with the claims replay makes of that gate's evidence (a gate
may hold several, or be re-derived under another name). So a new gate is in the catalogue
without a line here: NOT_REPLAYABLE with the reason until replay learns to re-derive it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from verifylib.evidence.gates import (
    BUILD_COREML,
    BUILD_GGML,
    BUILD_PATCH_EXACT,
    BUILD_SOURCE_IDENTITY,
    CANARY_COREML_POSITIVE,
    CANARY_LIFECYCLE_AB,
    CANARY_SANITIZER,
    EXPORT_CONTRACT,
    EXPORT_GGML_MODEL,
    EXPORT_PAIR,
    GATES,
    PARITY_PROGRAM,
    PARITY_PROGRAM_FP16,
    PARITY_RUNTIME,
    PLACEMENT_PLAN,
    WER_GGML_VS_SOURCE,
    WER_HYBRID,
    Capability,
    Gate,
)

REPLAY_SCHEMA = "verifylib.replay/v1"
"""Schema id of ``replay.json``."""

REPLAY_JSON = "replay.json"
REPLAY_HTML = "replay.html"
SUMMARY_FILE = "replay.intoto.jsonl"

SNR_REPRODUCED_DB = 100.0
"""Replayed against recorded candidate outputs: at or above this SNR they are the same."""

EXIT_REPRODUCED = 0
EXIT_DIFFERS = 1


class ClaimStatus(str, enum.Enum):
    """A claim's replay verdict."""

    REPRODUCED = "REPRODUCED"
    DIFFERS = "DIFFERS"
    NOT_REPLAYABLE = "NOT_REPLAYABLE"


@dataclass(frozen=True)
class ClaimSpec:
    """One entry of the catalogue: what a claim is and which gate recorded it.

    Attributes
    ----------
    id : str
        Stable claim id.
    gate : str
        The gate whose evidence holds the recorded value.
    title : str
        What is re-derived, in a few words.
    macos_only : bool
        True when only a Core ML runtime can re-derive it (NOT_REPLAYABLE elsewhere).
    """

    id: str
    gate: str
    title: str
    macos_only: bool = False


CLAIMS_OF: dict[str, tuple[ClaimSpec, ...]] = {
    BUILD_SOURCE_IDENTITY: (
        ClaimSpec("source.tree", BUILD_SOURCE_IDENTITY,
                  "source obtained from its recorded spec: git tree id"),),
    BUILD_PATCH_EXACT: (
        ClaimSpec("source.patch", BUILD_PATCH_EXACT,
                  "the exact compatibility patch: patched tree id"),),
    BUILD_GGML: (
        ClaimSpec("build.ggml_lib", BUILD_GGML, "the shared static ggml: options and digests"),
        ClaimSpec(BUILD_GGML, BUILD_GGML, "whisper-cli (patched) rebuilt: SHA-256")),
    BUILD_COREML: (
        ClaimSpec(BUILD_COREML, BUILD_COREML, "Core ML whisper-cli build", macos_only=True),),
    EXPORT_GGML_MODEL: (
        ClaimSpec(EXPORT_GGML_MODEL, EXPORT_GGML_MODEL,
                  "ggml-model.bin re-derived from the source model: SHA-256"),),
    EXPORT_CONTRACT: (
        ClaimSpec("export.program.fp32", EXPORT_CONTRACT,
                  "fp32 ML program re-converted: op by op, weight by weight"),
        ClaimSpec("export.program.fp16", EXPORT_CONTRACT,
                  "fp16 ML program re-converted: op by op, weight by weight")),
    EXPORT_PAIR: (
        ClaimSpec(EXPORT_PAIR, EXPORT_PAIR,
                  "the program against the model file's encoder, judged again"),),
    CANARY_LIFECYCLE_AB: (
        ClaimSpec("build.unpatched", CANARY_LIFECYCLE_AB,
                  "whisper-cli (unpatched) rebuilt: SHA-256"),
        ClaimSpec("canary.lifecycle.patched", CANARY_LIFECYCLE_AB,
                  "patched lifecycle runs: exit 3 and both markers every time"),
        ClaimSpec("canary.lifecycle.unpatched", CANARY_LIFECYCLE_AB,
                  "unpatched lifecycle runs: outcome distribution")),
    CANARY_COREML_POSITIVE: (
        ClaimSpec("canary.coreml", CANARY_COREML_POSITIVE,
                  "Core ML encoder loaded and run by whisper-cli", macos_only=True),),
    PARITY_PROGRAM: (
        ClaimSpec(PARITY_PROGRAM, PARITY_PROGRAM,
                  "published fp32 package re-executed on the recorded inputs"),),
    PARITY_RUNTIME: (
        ClaimSpec(PARITY_RUNTIME, PARITY_RUNTIME, "Core ML runtime parity", macos_only=True),),
    WER_GGML_VS_SOURCE: (
        ClaimSpec("wer.transcripts", WER_GGML_VS_SOURCE,
                  "whisper-cli and source-model transcripts and edit counts"),),
    WER_HYBRID: (
        ClaimSpec(WER_HYBRID, WER_HYBRID, "Core ML hybrid transcripts", macos_only=True),),
    PLACEMENT_PLAN: (
        ClaimSpec("placement", PLACEMENT_PLAN, "Core ML compute plan", macos_only=True),),
    PARITY_PROGRAM_FP16: (
        ClaimSpec(PARITY_PROGRAM_FP16, PARITY_PROGRAM_FP16,
                  "published fp16 package re-executed on the recorded inputs"),),
    CANARY_SANITIZER: (
        ClaimSpec("build.asan", CANARY_SANITIZER, "the two AddressSanitizer builds: SHA-256"),
        ClaimSpec(CANARY_SANITIZER, CANARY_SANITIZER,
                  "AddressSanitizer: bad free unpatched, clean patched")),
}
"""The claims replay makes of a gate's evidence, where they are not the gate's default one."""


def default_claim(gate: Gate) -> ClaimSpec:
    """Return the claim a gate is when :data:`CLAIMS_OF` says nothing of it.

    Parameters
    ----------
    gate : Gate
        A row of the gate table.

    Returns
    -------
    ClaimSpec
        The gate's own id, titled by the first clause of its pass rule; macOS-only when the
        gate needs anything more than any host.
    """
    title = re.split(r"[,;:] ", gate.pass_rule, maxsplit=1)[0]
    return ClaimSpec(gate.id, gate.id, title, macos_only=gate.capability is not Capability.ANY)


def derive_claims(gates: tuple[Gate, ...] = GATES,
                  overrides: dict[str, tuple[ClaimSpec, ...]] | None = None
                  ) -> tuple[ClaimSpec, ...]:
    """Return the claim catalogue of a gate table.

    Parameters
    ----------
    gates : tuple of Gate
        The gate table, in its order.
    overrides : dict, optional
        Gate id to the claims replay makes of it (default :data:`CLAIMS_OF`).

    Returns
    -------
    tuple of ClaimSpec
        Each gate's claims in gate-table order, those this host can re-derive first and the
        macOS-only ones after (the order ``replay.json`` and its page list them in).
    """
    chosen = CLAIMS_OF if overrides is None else overrides
    specs = [spec for g in gates for spec in chosen.get(g.id, (default_claim(g),))]
    return tuple(sorted(specs, key=lambda spec: spec.macos_only))


CLAIMS: tuple[ClaimSpec, ...] = derive_claims()
"""Every claim replay knows, in catalogue order."""

SPEC_OF = {c.id: c for c in CLAIMS}


@dataclass(frozen=True)
class Claim:
    """One claim's replay verdict.

    Attributes
    ----------
    id : str
        The claim id (:data:`CLAIMS`).
    status : ClaimStatus
        REPRODUCED, DIFFERS or NOT_REPLAYABLE.
    recorded : Any
        What the run recorded (a value, or a small mapping of values).
    replayed : Any
        What this host derived (None when not replayed).
    detail : str
        The difference named, or the reason it was not replayed, or what matched.
    seconds : float
        Wall time of the replay work behind this claim (shared work is counted once, on
        the first claim that needed it).
    rebuilt : bool
        True when the replayed value came from a binary rebuilt here whose digest differs
        from the recorded one (labelled as such in the table).
    """

    id: str
    status: ClaimStatus
    recorded: Any = None
    replayed: Any = None
    detail: str = ""
    seconds: float = 0.0
    rebuilt: bool = False

    @property
    def title(self) -> str:
        """What the claim re-derives (from the catalogue)."""
        spec = SPEC_OF.get(self.id)
        return spec.title if spec else self.id

    def to_json(self) -> dict[str, Any]:
        """Return the claim as ``replay.json`` stores it."""
        return {"id": self.id, "title": self.title, "status": self.status.value,
                "recorded": self.recorded, "replayed": self.replayed, "detail": self.detail,
                "seconds": round(self.seconds, 3), "rebuilt": self.rebuilt}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Claim":
        """Read a claim back from ``replay.json``."""
        return cls(id=data["id"], status=ClaimStatus(data["status"]),
                   recorded=data.get("recorded"), replayed=data.get("replayed"),
                   detail=data.get("detail", ""), seconds=float(data.get("seconds", 0.0)),
                   rebuilt=bool(data.get("rebuilt", False)))


def not_replayable(claim_id: str, reason: str, recorded: Any = None) -> Claim:
    """Return a NOT_REPLAYABLE claim with its reason.

    Parameters
    ----------
    claim_id : str
        The claim.
    reason : str
        Why it was not replayed (macOS-only, file not on this host, source unreachable …).
    recorded : any, optional
        The recorded value, shown beside the reason.

    Returns
    -------
    Claim
    """
    return Claim(claim_id, ClaimStatus.NOT_REPLAYABLE, recorded, None, reason)


def same_or_differs(claim_id: str, recorded: Any, replayed: Any, *, what: str,
                    seconds: float = 0.0, rebuilt: bool = False) -> Claim:
    """Return REPRODUCED when ``recorded == replayed``, else DIFFERS naming ``what``.

    Parameters
    ----------
    claim_id : str
        The claim.
    recorded, replayed : any
        The two values (JSON-like).
    what : str
        What the values are, for the detail.
    seconds : float
        Replay time spent on it.
    rebuilt : bool
        Whether a rebuilt binary produced ``replayed``.

    Returns
    -------
    Claim
    """
    if _empty(recorded):
        # Two missing values are not a reproduced result.
        return Claim(claim_id, ClaimStatus.NOT_REPLAYABLE, recorded, replayed,
                     f"{what}: the run records nothing to compare", seconds, rebuilt)
    if recorded == replayed:
        return Claim(claim_id, ClaimStatus.REPRODUCED, recorded, replayed,
                     f"{what}: identical", seconds, rebuilt)
    return Claim(claim_id, ClaimStatus.DIFFERS, recorded, replayed,
                 f"{what}: recorded and replayed differ", seconds, rebuilt)


def _empty(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    return value is None or value == [] or value == ""


@dataclass
class ReplayResult:
    """The replay of one run.

    Attributes
    ----------
    run_dir : str
        The replayed run (never written to).
    run_id : str or None
        Its run id.
    verified : bool
        Whether plain ``verify`` accepted the run first.
    verify_problems : list of str
        What ``verify`` found (a run that does not verify is not replayed).
    verdict : str or None
        The run's re-verified verdict.
    claims : list of Claim
        One per catalogue entry, in table order.
    host : dict
        This host (platform, machine, verifylib version).
    seconds : float
        Wall time of the whole replay.
    work_dir : str or None
        Where the replayed evidence was written (inside the output folder).
    output_dir : str or None
        Where ``replay.json`` and ``replay.html`` were written.
    """

    run_dir: str
    run_id: str | None
    verified: bool
    verify_problems: list[str]
    verdict: str | None
    claims: list[Claim] = field(default_factory=list)
    host: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    work_dir: str | None = None
    output_dir: str | None = None

    @property
    def differs(self) -> list[Claim]:
        """The claims that DIFFER."""
        return [c for c in self.claims if c.status is ClaimStatus.DIFFERS]

    @property
    def passed(self) -> bool:
        """True when the run verified and no claim DIFFERS."""
        return self.verified and not self.differs

    @property
    def exit_code(self) -> int:
        """1 if the run does not verify or any claim DIFFERS, else 0."""
        return EXIT_REPRODUCED if self.passed else EXIT_DIFFERS

    def claim(self, claim_id: str) -> Claim:
        """Return the claim ``claim_id`` (KeyError naming the known ids otherwise)."""
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"no claim {claim_id!r}; claims: {[c.id for c in self.claims]}")

    def counts(self) -> dict[str, int]:
        """Claims per status."""
        out = {s.value: 0 for s in ClaimStatus}
        for c in self.claims:
            out[c.status.value] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        """Return ``replay.json``'s document."""
        return {"schema": REPLAY_SCHEMA, "run_dir": self.run_dir, "run_id": self.run_id,
                "verified": self.verified, "verify_problems": list(self.verify_problems),
                "verdict": self.verdict, "result": "PASSED" if self.passed else "FAILED",
                "counts": self.counts(), "claims": [c.to_json() for c in self.claims],
                "host": dict(self.host), "seconds": round(self.seconds, 3),
                "work_dir": self.work_dir}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ReplayResult":
        """Read ``replay.json`` back."""
        if data.get("schema") != REPLAY_SCHEMA:
            raise ValueError(f"not a {REPLAY_SCHEMA} document (schema {data.get('schema')!r})")
        return cls(run_dir=data["run_dir"], run_id=data.get("run_id"),
                   verified=bool(data["verified"]),
                   verify_problems=list(data.get("verify_problems", [])),
                   verdict=data.get("verdict"),
                   claims=[Claim.from_json(c) for c in data["claims"]],
                   host=dict(data.get("host", {})), seconds=float(data.get("seconds", 0.0)),
                   work_dir=data.get("work_dir"))
