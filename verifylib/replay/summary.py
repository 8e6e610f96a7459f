"""The replay's verification summary: an in-toto Statement with the SLSA VSA predicate.

``verifylib verify RUN --replay --sign-key KEY.pem`` writes ``replay.intoto.jsonl`` beside
``replay.json``: a Statement whose subjects are the run's shipped artifacts and binaries
(the same subjects as the run's own attestation), whose predicate type is
:data:`VSA_PREDICATE` and whose predicate records the verifier (this verifylib and host),
the run id as ``resourceUri``, the run's attestation as the input attestation when it has
one, PASSED or FAILED, and the claim table. It is signed in a DSSE envelope by the same
code that signs a run's attestation (:mod:`verifylib.evidence.attest`, on
``securesystemslib``). :func:`verify_summary` checks the signature and the statement's
shape and returns the claims it carries.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifylib import canonical
from verifylib.replay.claims import CLAIMS, SUMMARY_FILE, ReplayResult

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner, SSlibKey

VSA_PREDICATE = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID = "https://verifylib.dev/replay"
POLICY_URI = "https://verifylib.dev/replay/claims/v1"
PREDICATE_KEYS = {"verifier", "timeVerified", "resourceUri", "policy", "inputAttestations",
                  "verificationResult", "verifiedLevels", "dependencyLevels", "slsaVersion",
                  "claims", "counts"}


def policy_digest() -> str:
    """SHA-256 of the claim catalogue the replay judged against (the VSA's ``policy``)."""
    return canonical.sha256_bytes(canonical.dumps(
        [{"id": c.id, "gate": c.gate, "title": c.title, "macos_only": c.macos_only}
         for c in CLAIMS]))


def build_summary(result: ReplayResult, now: datetime | None = None) -> dict[str, Any]:
    """Build the verification summary Statement of a replay.

    Parameters
    ----------
    result : ReplayResult
        The replay (of a run that opened).
    now : datetime, optional
        The verification time (default: now, UTC).

    Returns
    -------
    dict
        The in-toto Statement.
    """
    from verifylib.evidence.attest import ATTESTATION_FILE, STATEMENT_TYPE, collect_subjects
    from verifylib.evidence.runs import open_run

    run_dir = Path(result.run_dir)
    run = open_run(run_dir)
    subjects = collect_subjects(run_dir, dict(run.identities))
    inputs = []
    att = run_dir / ATTESTATION_FILE
    if att.is_file():
        inputs.append({"uri": f"{result.run_id}/{ATTESTATION_FILE}",
                       "digest": {"sha256": canonical.sha256_file(att)}})
    when = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    predicate = {
        "verifier": {"id": VERIFIER_ID,
                     "version": {"verifylib": result.host.get("verifylib", "")},
                     "host": {k: result.host[k] for k in sorted(result.host)}},
        "timeVerified": when,
        "resourceUri": result.run_id,
        "policy": {"uri": POLICY_URI, "digest": {"sha256": policy_digest()}},
        "inputAttestations": inputs,
        "verificationResult": "PASSED" if result.passed else "FAILED",
        "verifiedLevels": [],
        "dependencyLevels": {},
        "slsaVersion": "1.0",
        "claims": [c.to_json() for c in result.claims],
        "counts": result.counts(),
    }
    return {"_type": STATEMENT_TYPE, "subject": [s.to_dict() for s in subjects],
            "predicateType": VSA_PREDICATE, "predicate": predicate}


def sign_summary(result: ReplayResult, key: CryptoSigner | str | os.PathLike[str],
                 out_dir: str | os.PathLike[str]) -> Path:
    """Sign the replay's summary in DSSE and write ``replay.intoto.jsonl`` into ``out_dir``.

    Parameters
    ----------
    result : ReplayResult
        The replay.
    key : CryptoSigner or path-like
        A signer (:func:`verifylib.evidence.attest.load_signer`) or an Ed25519 private PEM.
    out_dir : path-like
        The replay's output folder.

    Returns
    -------
    Path
        The written file.
    """
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner

    from verifylib.evidence.attest import PAYLOAD_TYPE, load_signer

    signer = key if isinstance(key, CryptoSigner) else load_signer(key)
    statement = build_summary(result)
    envelope = Envelope(canonical.dumps(statement).rstrip(b"\n"), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    line = json.dumps(envelope.to_dict(), sort_keys=True, separators=(",", ":")) + "\n"
    path = Path(out_dir) / SUMMARY_FILE
    canonical.atomic_write_bytes(path, line.encode("utf-8"))
    return path


@dataclass
class SummaryCheck:
    """The outcome of :func:`verify_summary`.

    Attributes
    ----------
    ok : bool
        Signed by the key, a VSA Statement of the expected shape.
    problems : list of str
        Each thing wrong, named.
    keyid : str
        The key checked against.
    result : str or None
        ``verificationResult`` (PASSED / FAILED) of the signed statement.
    resource : str or None
        Its ``resourceUri`` (the run id).
    claims : list of dict
        Its claim table.
    """

    ok: bool
    problems: list[str] = field(default_factory=list)
    keyid: str = ""
    result: str | None = None
    resource: str | None = None
    claims: list[dict[str, Any]] = field(default_factory=list)


def verify_summary(path: str | os.PathLike[str],
                   public_key: SSlibKey | str | os.PathLike[str]) -> SummaryCheck:
    """Check ``replay.intoto.jsonl`` against an Ed25519 public key.

    Parameters
    ----------
    path : path-like
        The summary file.
    public_key : SSlibKey or path-like
        A key (:func:`verifylib.evidence.attest.load_public_key`) or a public PEM.

    Returns
    -------
    SummaryCheck
        ``ok`` is False, each problem named, when the file is missing or malformed, no
        envelope is signed by the key, the signature does not verify over the payload,
        or the payload is not a VSA Statement with every predicate field.
    """
    from securesystemslib.signer import SSlibKey

    from verifylib.evidence.attest import load_public_key

    key = public_key if isinstance(public_key, SSlibKey) else load_public_key(public_key)
    check = SummaryCheck(False, [], key.keyid)
    p = Path(path)
    st, problem = _signed_statement(p, key)
    if problem is None:
        problem = _statement_problem(p, st)
    if problem is not None:
        check.problems.append(problem)
        return check
    pred = st["predicate"]
    if pred["verificationResult"] not in ("PASSED", "FAILED"):
        check.problems.append(f"{p}: verificationResult {pred['verificationResult']!r}")
    check.result, check.resource = pred["verificationResult"], pred["resourceUri"]
    check.claims = list(pred["claims"])
    if pred["verificationResult"] == "PASSED" and any(
            c.get("status") == "DIFFERS" for c in check.claims):
        check.problems.append(f"{p}: PASSED although a claim DIFFERS")
    check.ok = not check.problems
    return check


def _signed_statement(p: Path, key: SSlibKey) -> tuple[Any, str | None]:
    """Return the payload of the file's one envelope, signed by ``key``, read as JSON.

    Or None and the first thing wrong: the file unreadable, not exactly one envelope, one
    that does not parse, not signed by the key, of another payload type, a signature that
    does not verify, or a payload that is not strict JSON.
    """
    from securesystemslib import exceptions as sslib_exceptions

    from verifylib.evidence.attest import PAYLOAD_TYPE, parse_envelope

    try:
        lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{p}: unreadable: {exc}"
    if len(lines) != 1:
        return None, f"{p}: holds {len(lines)} envelopes, expected one"
    try:
        env = parse_envelope(lines[0], 1)
    except ValueError as exc:
        return None, f"{p}: {exc}"
    if key.keyid not in env.signatures:
        return None, f"{p}: not signed by the given key ({key.keyid[:16]}...)"
    if env.payload_type != PAYLOAD_TYPE:
        return None, f"{p}: payloadType {env.payload_type!r} is not {PAYLOAD_TYPE!r}"
    try:
        env.verify([key], 1)
    except (sslib_exceptions.VerificationError, ValueError):
        return None, (f"{p}: the DSSE signature does not verify (payload or "
                      f"signature altered)")
    try:
        return canonical.loads(env.payload), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"{p}: the signed payload is not strict JSON: {exc}"


def _statement_problem(p: Path, st: Any) -> str | None:
    """Say why a signed payload is not a VSA Statement with every predicate field, if it is not."""
    from verifylib.evidence.attest import STATEMENT_KEYS, STATEMENT_TYPE

    if not isinstance(st, dict) or set(st) != STATEMENT_KEYS or st["_type"] != STATEMENT_TYPE:
        return f"{p}: not an in-toto Statement v1"
    if st["predicateType"] != VSA_PREDICATE:
        return (f"{p}: predicateType {st['predicateType']!r} is not "
                f"{VSA_PREDICATE}")
    pred = st["predicate"]
    if not isinstance(pred, dict) or set(pred) != PREDICATE_KEYS:
        return (f"{p}: the predicate's fields are not "
                f"{sorted(PREDICATE_KEYS)}")
    return None
