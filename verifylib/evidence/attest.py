"""Signed attestations of published runs: ``attestation.intoto.jsonl``.

A receipt proves a run to whoever re-verifies the run directory, but nothing in it says
*who* vouches for the shipped files. This module lets a key holder sign that statement
once, after publishing, and lets anyone with the public key check it later. It builds on
standard formats and maintained code instead of inventing a signature scheme:

* the statement is an in-toto Statement v1 whose subjects are the shipped artifacts and
  binaries by SHA-256 (``fp32``/``fp16`` ``ggml-model.bin`` by file digest, each
  ``.mlpackage``/``.mlmodelc`` folder by :func:`verifylib.canonical.tree_digest`, each
  ``whisper-cli`` variant by the digest in the receipt's identity table) and whose
  predicate (:data:`PREDICATE_TYPE`) carries the run id, name, verdict, gate table and the
  SHA-256 of ``receipt.json``;
* it is wrapped in a DSSE envelope signed over DSSE's pre-authentication encoding with an
  Ed25519 key, using ``securesystemslib`` (:class:`securesystemslib.dsse.Envelope`,
  :class:`securesystemslib.signer.CryptoSigner`, :class:`securesystemslib.signer.SSlibKey`)
  on top of ``cryptography``; no cryptography is written here.

``attestation.intoto.jsonl`` is the one file that may be added to a published run (no
receipt entry covers it, see :data:`verifylib.evidence.receipt.COVERED_DIRS`); it is written once,
through a staging file renamed into place, and never rewritten. :func:`verify_attestation`
trusts none of it: it checks the signature, then recomputes every subject digest and the
whole predicate from the run directory and names each disagreement.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    load_pem_private_key,
    load_pem_public_key,
)
from securesystemslib import exceptions as sslib_exceptions
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, Signature, SSlibKey

from verifylib import canonical
from verifylib.errors import AttestationFailure, EvidenceInvalid, ParametersInvalid
from verifylib.evidence import receipt
from verifylib.evidence.layout import RECEIPT_FILE

ATTESTATION_FILE = "attestation.intoto.jsonl"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "https://verifylib.dev/audit-receipt/v1"
PRECISIONS = ("fp32", "fp16")
GGML_MODEL = "ggml-model.bin"
GGML_MODEL_GLOB = "ggml-model*.bin"
BUNDLE_SUFFIXES = (".mlpackage", ".mlmodelc")
BINARY_IDENTITY_RE = re.compile(r"^binary\.(.+)\.sha256$")
KIND_ANNOTATION = "verifylib.digest"
ENVELOPE_KEYS = {"payload", "payloadType", "signatures"}
STATEMENT_KEYS = {"_type", "subject", "predicateType", "predicate"}


class AttestKeyError(ParametersInvalid):
    """A key file is missing, unreadable, encrypted, not PEM, or not an Ed25519 key."""


class AttestError(AttestationFailure):
    """A run cannot be attested (no receipt, it does not verify, or it is attested)."""


@dataclass(frozen=True)
class Subject:
    """One in-toto subject: a shipped artifact or binary and its SHA-256.

    Attributes
    ----------
    name : str
        Run-relative path (``fp32/ggml-model.bin``) or ``whisper-cli (<variant>)``.
    sha256 : str
        64 lower-case hex digits.
    kind : str
        How the digest was made: ``"file"`` (SHA-256 of the bytes), ``"tree"``
        (:func:`verifylib.canonical.tree_digest` of a folder) or ``"identity"`` (the
        receipt's recorded ``binary.<variant>.sha256``).
    """

    name: str
    sha256: str
    kind: str

    def to_dict(self) -> dict[str, Any]:
        """Return the subject as an in-toto ResourceDescriptor.

        Returns
        -------
        dict
            ``name``, ``digest`` (``sha256``) and ``annotations`` (the kind).
        """
        return {"name": self.name, "digest": {"sha256": self.sha256},
                "annotations": {KIND_ANNOTATION: self.kind}}


@dataclass
class AttestResult:
    """Outcome of :func:`attest`.

    Attributes
    ----------
    path : Path
        The written ``attestation.intoto.jsonl``.
    sha256 : str
        SHA-256 of the written file.
    keyid : str
        The signing key's id (securesystemslib's default key id).
    verdict : str
        The verdict the statement attests.
    subjects : list of Subject
        The attested subjects.
    """

    path: Path
    sha256: str
    keyid: str
    verdict: str
    subjects: list[Subject] = field(default_factory=list)


@dataclass
class AttestationCheck:
    """Outcome of :func:`verify_attestation`.

    Attributes
    ----------
    ok : bool
        True when the signature verifies and the statement matches the run.
    problems : list of str
        Each failure, naming the file, subject, gate or field.
    keyid : str or None
        Id of the public key checked against.
    subjects : list of Subject
        The subjects the verified statement attests (empty unless the signature held).
    """

    ok: bool
    problems: list[str] = field(default_factory=list)
    keyid: str | None = None
    subjects: list[Subject] = field(default_factory=list)


# --- keys ----------------------------------------------------------------------------------

def _read_key_file(path: str | os.PathLike[str]) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise AttestKeyError(f"{path}: cannot read key file: {exc.strerror or exc}") from exc


def load_signer(path: str | os.PathLike[str]) -> CryptoSigner:
    """Load an unencrypted Ed25519 private key (PEM) as a signer.

    Parameters
    ----------
    path : path-like
        PEM file holding a PKCS#8 (or OpenSSL) Ed25519 private key.

    Returns
    -------
    securesystemslib.signer.CryptoSigner
        A signer whose ``public_key.keyid`` names the key in the envelope.

    Raises
    ------
    AttestKeyError
        If the file is missing or unreadable, is not a PEM private key, is encrypted, or
        holds another kind of key.
    """
    data = _read_key_file(path)
    try:
        key = load_pem_private_key(data, password=None)
    except TypeError as exc:
        raise AttestKeyError(f"{path}: encrypted private keys are not supported "
                             f"(give an unencrypted PEM Ed25519 key)") from exc
    except Exception as exc:
        raise AttestKeyError(f"{path}: not a PEM private key ({exc})") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise AttestKeyError(f"{path}: holds a {_key_kind(key)} private key; an Ed25519 "
                             f"key is required")
    return CryptoSigner(key)


def load_public_key(path: str | os.PathLike[str]) -> SSlibKey:
    """Load an Ed25519 public key (PEM, SubjectPublicKeyInfo) for verification.

    Parameters
    ----------
    path : path-like
        PEM file holding the public key.

    Returns
    -------
    securesystemslib.signer.SSlibKey
        The key, with the same default key id :func:`load_signer` gives its private half.

    Raises
    ------
    AttestKeyError
        If the file is missing or unreadable, is not a PEM public key, or holds another
        kind of key.
    """
    data = _read_key_file(path)
    try:
        key = load_pem_public_key(data)
    except Exception as exc:
        raise AttestKeyError(f"{path}: not a PEM public key ({exc})") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise AttestKeyError(f"{path}: holds a {_key_kind(key)} public key; an Ed25519 "
                             f"key is required")
    return SSlibKey.from_crypto(key)


def _key_kind(key: Any) -> str:
    kinds = ((rsa.RSAPrivateKey, rsa.RSAPublicKey, "RSA"),
             (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey, "EC"),
             (dsa.DSAPrivateKey, dsa.DSAPublicKey, "DSA"),
             (ed448.Ed448PrivateKey, ed448.Ed448PublicKey, "Ed448"))
    for private, public, kind in kinds:
        if isinstance(key, (private, public)):
            return kind
    return type(key).__name__


# --- the statement -------------------------------------------------------------------------

def _bundles(base: Path) -> list[Path]:
    found = [p for p in sorted(base.rglob("*"), key=lambda q: q.as_posix())
             if p.is_dir() and p.suffix in BUNDLE_SUFFIXES]
    # A bundle nested inside another bundle is covered by the outer tree digest.
    return [p for p in found if not any(a in found for a in p.parents)]


def collect_subjects(run_dir: str | os.PathLike[str],
                     identities: Mapping[str, Any]) -> list[Subject]:
    """Digest the shipped artifacts of a run and list the recorded binaries.

    Parameters
    ----------
    run_dir : path-like
        A run directory.
    identities : mapping
        The receipt's identity table; each ``binary.<variant>.sha256`` entry becomes the
        subject ``whisper-cli (<variant>)``.

    Returns
    -------
    list of Subject
        ``fp32/ggml-model.bin`` and ``fp16/ggml-model.bin`` (those present), every
        ``.mlpackage``/``.mlmodelc`` folder under ``fp32/`` and ``fp16/`` by tree digest,
        then the binaries, in that order (each group sorted).
    """
    run_dir = Path(run_dir)
    out: list[Subject] = []
    for prec in PRECISIONS:
        # ggml-model.bin, or ggml-model-<qtype>.bin for a quantized file audited as given
        for model in sorted((run_dir / prec).glob(GGML_MODEL_GLOB)):
            if model.is_file():
                out.append(Subject(f"{prec}/{model.name}", canonical.sha256_file(model),
                                   "file"))
    for prec in PRECISIONS:
        base = run_dir / prec
        if base.is_dir():
            for bundle in _bundles(base):
                out.append(Subject(bundle.relative_to(run_dir).as_posix(),
                                   canonical.tree_digest(bundle), "tree"))
    for key in sorted(identities):
        m = BINARY_IDENTITY_RE.match(key)
        if m:
            out.append(Subject(f"whisper-cli ({m.group(1)})", str(identities[key]), "identity"))
    return out


def _read_receipt(run_dir: Path) -> tuple[dict[str, Any], str]:
    path = run_dir / RECEIPT_FILE
    data = path.read_bytes()
    doc = canonical.loads(data)
    if not isinstance(doc, dict):
        raise EvidenceInvalid(f"{path}: not a JSON object")
    return doc, canonical.sha256_bytes(data)


def _gate_table(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for g in doc.get("gates", []):
        reason = g.get("reason") if isinstance(g.get("reason"), dict) else {}
        rows.append({"id": g.get("id"), "stage": g.get("stage"), "required": g.get("required"),
                     "status": g.get("status"), "reason_kind": reason.get("kind")})
    return rows


def build_statement(run_dir: str | os.PathLike[str], verdict: str | None) -> dict[str, Any]:
    """Build the in-toto Statement v1 for a run directory as it is now.

    Parameters
    ----------
    run_dir : path-like
        A run directory holding ``receipt.json``.
    verdict : str or None
        The verdict recomputed by :func:`verifylib.evidence.receipt.verify` (never the receipt's
        own claim).

    Returns
    -------
    dict
        ``{"_type", "subject", "predicateType", "predicate"}``; the predicate holds
        ``run_id``, ``name``, ``verdict``, ``gates`` (id, stage, required, status,
        reason_kind) and ``receipt`` (name and SHA-256 of ``receipt.json``'s bytes).

    Raises
    ------
    OSError, ValueError
        If ``receipt.json`` cannot be read as strict JSON.
    """
    run_dir = Path(run_dir)
    doc, receipt_sha = _read_receipt(run_dir)
    ids = doc.get("identities")
    identities = ids if isinstance(ids, dict) else {}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [s.to_dict() for s in collect_subjects(run_dir, identities)],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "run_id": doc.get("run_id"),
            "name": doc.get("name"),
            "verdict": verdict,
            "gates": _gate_table(doc),
            "receipt": {"name": RECEIPT_FILE, "digest": {"sha256": receipt_sha}},
        },
    }


def _statement_bytes(statement: Mapping[str, Any]) -> bytes:
    return canonical.dumps(statement).rstrip(b"\n")


# --- signing -------------------------------------------------------------------------------

def attest(run_dir: str | os.PathLike[str],
           key: CryptoSigner | str | os.PathLike[str]) -> AttestResult:
    """Sign a published, verifying run and write ``attestation.intoto.jsonl``.

    The attestation is written beside the run's receipt.

    Parameters
    ----------
    run_dir : path-like
        A published run directory.
    key : CryptoSigner or path-like
        A signer from :func:`load_signer`, or the path of an Ed25519 private key PEM.

    Returns
    -------
    AttestResult
        Where the attestation was written, its digest, the key id, verdict and subjects.

    Raises
    ------
    AttestKeyError
        If ``key`` is a path that does not hold a usable Ed25519 private key.
    AttestError
        If the run has no receipt, already holds an attestation (it is never rewritten),
        or does not verify (a run that fails re-verification is never signed).
    """
    run_dir = Path(run_dir)
    signer = key if isinstance(key, CryptoSigner) else load_signer(key)
    out = run_dir / ATTESTATION_FILE
    if not (run_dir / RECEIPT_FILE).is_file():
        raise AttestError(f"{run_dir}: no {RECEIPT_FILE}; only published runs are "
                          f"attested")
    if out.exists():
        raise AttestError(f"{out}: already exists; an attestation is written once and never "
                          f"rewritten")
    res = receipt.verify(run_dir)
    if not res.ok or res.verdict is None:
        shown = "; ".join(res.problems[:3]) + (" ..." if len(res.problems) > 3 else "")
        raise AttestError(f"{run_dir} does not verify ({len(res.problems)} problem(s): "
                          f"{shown}); refusing to sign it")
    try:
        statement = build_statement(run_dir, res.verdict)
    except (OSError, ValueError) as exc:
        raise AttestError(f"{run_dir}: cannot read the receipt: {exc}") from exc
    envelope = Envelope(_statement_bytes(statement), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    line = json.dumps(envelope.to_dict(), sort_keys=True, separators=(",", ":")) + "\n"
    with canonical.writable_folder(run_dir):  # a published run is sealed read-only
        sha = canonical.atomic_write_bytes(out, line.encode("utf-8"))
        os.chmod(out, canonical.READ_ONLY_FILE)
    subjects = [Subject(s["name"], s["digest"]["sha256"], s["annotations"][KIND_ANNOTATION])
                for s in statement["subject"]]
    return AttestResult(out, sha, signer.public_key.keyid, res.verdict, subjects)


# --- verification --------------------------------------------------------------------------

def _strict_b64(text: Any, what: str) -> bytes:
    """Decode standard base64, refusing anything that does not re-encode to itself."""
    if not isinstance(text, str):
        raise EvidenceInvalid(f"{what} is not a base64 string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise EvidenceInvalid(f"{what} is not valid base64 ({exc})") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise EvidenceInvalid(f"{what} is not canonical base64 (altered padding bits?)")
    return raw


def parse_envelope(line: str, n: int) -> Envelope:
    """Parse one JSON line of an ``.intoto.jsonl`` file as a DSSE envelope, strictly.

    Parameters
    ----------
    line : str
        The line.
    n : int
        Its line number, for the messages.

    Returns
    -------
    Envelope

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If it is not strict JSON, not exactly a DSSE envelope, or not canonical base64.
    """
    try:
        data = canonical.loads(line)
    except ValueError as exc:
        raise EvidenceInvalid(f"line {n}: not strict JSON ({exc})") from exc
    if not isinstance(data, dict) or set(data) != ENVELOPE_KEYS:
        raise EvidenceInvalid(f"line {n}: not a DSSE envelope (fields must be exactly "
                              f"{sorted(ENVELOPE_KEYS)})")
    if not isinstance(data["payloadType"], str):
        raise EvidenceInvalid(f"line {n}: payloadType is not a string")
    payload = _strict_b64(data["payload"], f"line {n}: payload")
    sigs = data["signatures"]
    if not isinstance(sigs, list) or not sigs:
        raise EvidenceInvalid(f"line {n}: no signatures")
    signatures: dict[str, Signature] = {}
    for i, s in enumerate(sigs):
        if not isinstance(s, dict) or not isinstance(s.get("keyid"), str):
            raise EvidenceInvalid(f"line {n}: signature {i} malformed")
        raw = _strict_b64(s.get("sig"), f"line {n}: signature {i}")
        if s["keyid"] in signatures:
            raise EvidenceInvalid(f"line {n}: two signatures by key {s['keyid']}")
        signatures[s["keyid"]] = Signature(s["keyid"], raw.hex())
    return Envelope(payload, data["payloadType"], signatures)


def _subject_map(subjects: Any, problems: list[str]) -> dict[str, tuple[str, Any]]:
    out: dict[str, tuple[str, Any]] = {}
    if not isinstance(subjects, list):
        problems.append("statement subject is not a list")
        return out
    for s in subjects:
        digest = s.get("digest") if isinstance(s, dict) else None
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) \
                or not isinstance(digest, dict) or not canonical.is_sha256(digest.get("sha256")):
            problems.append(f"statement subject malformed: {s!r}")
            continue
        if s["name"] in out:
            problems.append(f"subject {s['name']}: listed twice")
        out[s["name"]] = (digest["sha256"], s.get("annotations"))
    return out


def _compare_statement(got: Any, expected: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if not isinstance(got, dict) or set(got) != STATEMENT_KEYS:
        return [f"payload is not an in-toto Statement (fields must be exactly "
                f"{sorted(STATEMENT_KEYS)})"]
    if got["_type"] != STATEMENT_TYPE:
        problems.append(f"statement _type {got['_type']!r} is not {STATEMENT_TYPE!r}")
    if got["predicateType"] != PREDICATE_TYPE:
        problems.append(f"predicateType {got['predicateType']!r} is not {PREDICATE_TYPE!r}")

    attested = _subject_map(got["subject"], problems)
    current = {s["name"]: (s["digest"]["sha256"], s.get("annotations"))
               for s in expected["subject"]}
    for name in sorted(set(attested) | set(current)):
        if name not in current:
            problems.append(f"subject {name}: attested but absent from the run")
        elif name not in attested:
            problems.append(f"subject {name}: in the run but not attested")
        elif attested[name][0] != current[name][0]:
            problems.append(f"subject {name}: digest changed since attesting (attested "
                            f"{attested[name][0][:16]}..., now {current[name][0][:16]}...)")
        elif attested[name][1] != current[name][1]:
            problems.append(f"subject {name}: annotations differ from the run's")

    pred, want = got["predicate"], expected["predicate"]
    if not isinstance(pred, dict):
        return problems + ["predicate is not an object"]
    for k in sorted(set(pred) - set(want)):
        problems.append(f"predicate has an unknown field {k!r}")
    for k in ("run_id", "name"):
        if pred.get(k) != want[k]:
            problems.append(f"predicate {k}: attested {pred.get(k)!r}, receipt says {want[k]!r}")
    if pred.get("verdict") != want["verdict"]:
        problems.append(f"verdict: attested {pred.get('verdict')!r}, re-verification gives "
                        f"{want['verdict']!r}")
    if pred.get("receipt") != want["receipt"]:
        problems.append(f"{RECEIPT_FILE}: SHA-256 differs from the attested one "
                        f"(the receipt changed after attesting)")
    got_gates = pred.get("gates")
    if not isinstance(got_gates, list) or not all(isinstance(g, dict) for g in got_gates):
        problems.append("predicate gate table malformed")
    elif got_gates != want["gates"]:
        have = {g.get("id"): g for g in got_gates}
        now = {g.get("id"): g for g in want["gates"]}
        named = False
        for gid in sorted(set(have) | set(now), key=str):
            a, b = have.get(gid), now.get(gid)
            if a == b:
                continue
            named = True
            if a is None:
                problems.append(f"gate {gid}: in the receipt but not attested")
            elif b is None:
                problems.append(f"gate {gid}: attested but not in the receipt")
            else:
                problems.append(f"gate {gid}: attested {a.get('status')!r} "
                                f"({a.get('reason_kind')}), receipt says {b.get('status')!r} "
                                f"({b.get('reason_kind')})")
        if not named:
            problems.append("predicate gate table differs from the receipt's (order)")
    return problems


def verify_attestation(run_dir: str | os.PathLike[str],
                       public_key: SSlibKey | str | os.PathLike[str],
                       verified: receipt.VerifyResult | None = None) -> AttestationCheck:
    """Check a run's ``attestation.intoto.jsonl`` against a public key and the run itself.

    Parameters
    ----------
    run_dir : path-like
        An attested run directory.
    public_key : SSlibKey or path-like
        A key from :func:`load_public_key`, or the path of an Ed25519 public key PEM.
    verified : VerifyResult, optional
        The result of :func:`verifylib.evidence.receipt.verify` on ``run_dir`` if the caller has
        it; otherwise the run is re-verified here. Its recomputed verdict is the one the
        statement must attest.

    Returns
    -------
    AttestationCheck
        ``ok`` is False, with each problem named, when the file is missing or malformed,
        no envelope is signed by the key, a DSSE signature does not verify over the PAE of
        the payload (a flipped payload or signature byte), or the statement disagrees
        with the run: a subject digest recomputed from the files or identity table, the
        re-verified verdict, a gate status of ``receipt.json``, or its SHA-256.

    Raises
    ------
    AttestKeyError
        If ``public_key`` is a path that does not hold a usable Ed25519 public key.
    """
    run_dir = Path(run_dir)
    key = public_key if isinstance(public_key, SSlibKey) else load_public_key(public_key)
    check = AttestationCheck(False, [], key.keyid)
    path = run_dir / ATTESTATION_FILE
    if not path.is_file():
        check.problems.append(f"{ATTESTATION_FILE}: missing (run `verifylib attest`)")
        return check
    envelopes = _read_envelopes(path, check.problems)
    if check.problems:
        return check
    if not envelopes:
        check.problems.append(f"{ATTESTATION_FILE}: holds no envelope")
        return check
    mine = [e for e in envelopes if key.keyid in e.signatures]
    if not mine:
        ids = sorted({k for e in envelopes for k in e.signatures})
        check.problems.append(f"{ATTESTATION_FILE}: not signed by the given key "
                              f"(key id {key.keyid[:16]}...; signed by "
                              f"{', '.join(i[:16] + '...' for i in ids)})")
        return check

    if verified is None:
        verified = receipt.verify(run_dir)
    try:
        expected = build_statement(run_dir, verified.verdict)
    except (OSError, ValueError) as exc:
        check.problems.append(f"{RECEIPT_FILE}: unreadable: {exc}")
        expected = None

    for env in mine:
        _check_envelope(env, key, expected, check)
    check.ok = not check.problems
    return check


def _read_envelopes(path: Path, problems: list[str]) -> list[Envelope]:
    """Parse every non-blank line of an attestation file, noting each that does not parse."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{ATTESTATION_FILE}: unreadable: {exc}")
        return []
    envelopes = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            envelopes.append(parse_envelope(line, n))
        except ValueError as exc:
            problems.append(f"{ATTESTATION_FILE}: {exc}")
    return envelopes


def _check_envelope(env: Envelope, key: SSlibKey, expected: Mapping[str, Any] | None,
                    check: AttestationCheck) -> None:
    """Verify one envelope signed by ``key``, compare its statement, and collect its subjects.

    Each problem is added to ``check``; the statement is compared with ``expected`` (skipped
    when None: the receipt could not be read) and its well-formed subjects are kept.
    """
    if env.payload_type != PAYLOAD_TYPE:
        check.problems.append(f"{ATTESTATION_FILE}: payloadType {env.payload_type!r} is "
                              f"not {PAYLOAD_TYPE!r}")
        return
    try:
        env.verify([key], 1)
    except (sslib_exceptions.VerificationError, ValueError):
        check.problems.append(f"{ATTESTATION_FILE}: DSSE signature by {key.keyid[:16]}... "
                              f"does not verify (payload or signature altered)")
        return
    try:
        statement = canonical.loads(env.payload)
    except (ValueError, UnicodeDecodeError) as exc:
        check.problems.append(f"{ATTESTATION_FILE}: signed payload is not strict JSON: {exc}")
        return
    if expected is not None:
        check.problems += [f"attestation: {p}"
                           for p in _compare_statement(statement, expected)]
    if isinstance(statement, dict) and isinstance(statement.get("subject"), list):
        for s in statement["subject"]:
            try:
                check.subjects.append(Subject(
                    s["name"], s["digest"]["sha256"],
                    (s.get("annotations") or {}).get(KIND_ANNOTATION, "")))
            except (KeyError, TypeError):
                pass
