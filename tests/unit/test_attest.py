"""Signed attestations: attest a synthetic run, verify it with the public key, and fail
closed on every kind of tampering (no build needed)."""

import base64
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from verifylib.evidence import attest, gates, receipt
from verifylib import canonical
from verifylib.cli import main as cli
from verifylib.evidence.gates import Verdict

from tests.helpers import ROOT, synthetic
from tests.helpers.synthetic import install_rules

BINARY_SHA = canonical.sha256_bytes(b"a statically linked whisper-cli")
UNPATCHED_SHA = canonical.sha256_bytes(b"the unpatched whisper-cli")


@pytest.fixture
def rules(monkeypatch):
    install_rules(monkeypatch)


def write_keys(folder: Path, name: str = "signer") -> tuple[Path, Path]:
    """A fresh Ed25519 key pair as PKCS#8 private PEM and SubjectPublicKeyInfo PEM."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ed25519.Ed25519PrivateKey.generate()
    priv, pub = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub


def make_run(tmp_path):
    """A synthetic published run with shipped artifacts and two recorded binaries."""
    run_dir = synthetic.make_run(tmp_path, receipt_too=False, identities={
        "build.source_identity": {"runtime.tree": "a" * 40},
        "build.ggml": {"binary.ggml.sha256": BINARY_SHA},
        "canary.lifecycle_ab": {"binary.ggml_unpatched.sha256": UNPATCHED_SHA}})
    # The shipped files, in place before the receipt lists them.
    (run_dir / "fp32").mkdir(exist_ok=True)
    (run_dir / "fp32" / "ggml-model.bin").write_bytes(b"ggml" + bytes(range(256)) * 4)
    data = run_dir / "fp32" / "ggml-model-encoder.mlpackage" / "Data" / "com.apple.CoreML"
    data.mkdir(parents=True)
    (data / "model.mlmodel").write_bytes(b"\x08\x09mil program")
    (data.parent.parent / "Manifest.json").write_text('{"fileFormatVersion": "1.0.0"}')
    compiled = run_dir / "fp16" / "ggml-model-encoder.mlmodelc"
    compiled.mkdir(parents=True)
    (compiled / "coremldata.bin").write_bytes(b"compiled fp16")
    receipt.build_receipt(run_dir)
    assert receipt.verify(run_dir).ok
    return run_dir


@pytest.fixture
def attested(tmp_path, rules):
    run_dir = make_run(tmp_path)
    priv, pub = write_keys(tmp_path / "keys")
    res = attest.attest(run_dir, priv)
    return SimpleNamespace(run_dir=run_dir, priv=priv, pub=pub, res=res,
                           path=run_dir / attest.ATTESTATION_FILE)


def _envelope(path: Path) -> dict:
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def _write_envelope(path: Path, env: dict) -> None:
    path.write_text(json.dumps(env) + "\n")


def _flip(raw: bytes, at: int) -> bytes:
    b = bytearray(raw)
    b[at] ^= 0x01
    return bytes(b)


# --- the happy path ------------------------------------------------------------------------

def test_attestation_is_a_signed_in_toto_statement_of_the_run(attested):
    run_dir, res = attested.run_dir, attested.res
    assert res.path == attested.path and attested.path.is_file()
    assert res.sha256 == canonical.sha256_file(attested.path)
    rec = canonical.read_json(run_dir / "receipt.json")
    assert res.verdict == receipt.verify(run_dir).verdict == rec["verdict"]

    env = _envelope(attested.path)
    assert set(env) == {"payload", "payloadType", "signatures"}
    assert env["payloadType"] == "application/vnd.in-toto+json"
    assert [s["keyid"] for s in env["signatures"]] == [res.keyid]
    assert len(base64.b64decode(env["signatures"][0]["sig"])) == 64  # an Ed25519 signature

    st = json.loads(base64.b64decode(env["payload"]))
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == attest.PREDICATE_TYPE
    subjects = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    assert subjects == {
        "fp32/ggml-model.bin": canonical.sha256_file(run_dir / "fp32" / "ggml-model.bin"),
        "fp32/ggml-model-encoder.mlpackage":
            canonical.tree_digest(run_dir / "fp32" / "ggml-model-encoder.mlpackage"),
        "fp16/ggml-model-encoder.mlmodelc":
            canonical.tree_digest(run_dir / "fp16" / "ggml-model-encoder.mlmodelc"),
        "whisper-cli (ggml)": BINARY_SHA,
        "whisper-cli (ggml_unpatched)": UNPATCHED_SHA,
    }
    assert {s.name for s in res.subjects} == set(subjects)

    pred = st["predicate"]
    assert pred["run_id"] == rec["run_id"] and pred["name"] == rec["name"]
    assert pred["verdict"] == rec["verdict"]
    assert pred["receipt"]["digest"]["sha256"] == canonical.sha256_file(run_dir / "receipt.json")
    table = {g["id"]: g for g in pred["gates"]}
    assert set(table) == set(gates.BY_ID)
    assert table["build.source_identity"]["status"] == "PASS"
    assert table["build.source_identity"]["reason_kind"] == "rule"
    for row in rec["gates"]:
        assert table[row["id"]] == {"id": row["id"], "stage": row["stage"],
                                    "required": row["required"], "status": row["status"],
                                    "reason_kind": row["reason"]["kind"]}


def test_attested_run_verifies_with_the_public_key(attested):
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert check.ok, check.problems
    assert check.keyid == attested.res.keyid
    assert {s.name for s in check.subjects} == {s.name for s in attested.res.subjects}


def test_verify_without_key_still_passes_on_an_attested_run(attested):
    res = receipt.verify(attested.run_dir)
    assert res.ok, res.problems
    assert res.verdict == attested.res.verdict
    assert cli.main(["verify", str(attested.run_dir)]) == 0
    listed = {f["path"] for f in canonical.read_json(attested.run_dir / "receipt.json")["files"]}
    assert attest.ATTESTATION_FILE not in listed


# --- tampering -----------------------------------------------------------------------------

def test_flipped_signature_byte_fails(attested):
    env = _envelope(attested.path)
    sig = base64.b64decode(env["signatures"][0]["sig"])
    env["signatures"][0]["sig"] = base64.b64encode(_flip(sig, 10)).decode()
    _write_envelope(attested.path, env)
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok
    assert any("signature" in p and "does not verify" in p for p in check.problems), check.problems


def test_flipped_byte_in_the_file_fails(attested):
    # A raw byte flipped in the signature's base64 text (not just its decoded value).
    text = attested.path.read_bytes()
    sig = _envelope(attested.path)["signatures"][0]["sig"]
    at = text.index(sig.encode()) + 20
    attested.path.write_bytes(_flip(text, at))
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok and check.problems


def test_flipped_payload_byte_fails(attested):
    env = _envelope(attested.path)
    payload = base64.b64decode(env["payload"])
    # Flip a byte inside the verdict's text, so the payload is still valid JSON.
    at = payload.index(b'"verdict":"') + len(b'"verdict":"') + 2
    env["payload"] = base64.b64encode(_flip(payload, at)).decode()
    _write_envelope(attested.path, env)
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok
    assert any("does not verify" in p for p in check.problems), check.problems


def test_wrong_public_key_fails(attested, tmp_path):
    _, other_pub = write_keys(tmp_path / "other", "other")
    check = attest.verify_attestation(attested.run_dir, other_pub)
    assert not check.ok
    assert any("not signed by the given key" in p for p in check.problems), check.problems


def test_wrong_key_claiming_the_signers_key_id_fails(attested, tmp_path):
    from securesystemslib.signer import SSlibKey
    other = ed25519.Ed25519PrivateKey.generate().public_key()
    impostor = SSlibKey.from_crypto(other, keyid=attested.res.keyid)
    check = attest.verify_attestation(attested.run_dir, impostor)
    assert not check.ok
    assert any("does not verify" in p for p in check.problems), check.problems


def test_receipt_edited_after_attesting_fails(attested):
    # Even a receipt that still verifies (same content, other bytes) no longer matches.
    rpath = attested.run_dir / "receipt.json"
    rpath.write_text(json.dumps(canonical.read_json(rpath), indent=2))
    assert receipt.verify(attested.run_dir).ok
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok
    assert any("receipt.json: SHA-256 differs" in p for p in check.problems), check.problems


def test_gate_status_edited_after_attesting_fails(attested):
    rpath = attested.run_dir / "receipt.json"
    rec = canonical.read_json(rpath)
    for g in rec["gates"]:
        if g["id"] == "build.source_identity":
            g["status"] = "FAIL"
    canonical.write_json(rpath, rec)
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok
    assert any("gate build.source_identity: attested 'PASS'" in p and "'FAIL'" in p
               for p in check.problems), check.problems


def test_verdict_other_than_the_re_verified_one_fails(attested):
    attested_verdict = attested.res.verdict
    other = next(v.value for v in Verdict if v.value != attested_verdict)
    check = attest.verify_attestation(attested.run_dir, attested.pub,
                                      receipt.VerifyResult(True, [], other))
    assert not check.ok
    assert check.problems == [f"attestation: verdict: attested {attested_verdict!r}, "
                              f"re-verification gives {other!r}"]


def test_changed_subject_file_fails(attested):
    model = attested.run_dir / "fp32" / "ggml-model.bin"
    model.write_bytes(_flip(model.read_bytes(), 100))
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok
    assert any("subject fp32/ggml-model.bin: digest changed" in p for p in check.problems)


def test_changed_file_inside_a_bundle_fails(attested):
    f = attested.run_dir / "fp16" / "ggml-model-encoder.mlmodelc" / "coremldata.bin"
    f.write_bytes(b"another compiled model")
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok
    assert any("subject fp16/ggml-model-encoder.mlmodelc: digest changed" in p
               for p in check.problems), check.problems


def test_added_subject_fails(attested):
    (attested.run_dir / "fp16" / "ggml-model.bin").write_bytes(b"unattested fp16 model")
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok
    assert any("subject fp16/ggml-model.bin: in the run but not attested" in p
               for p in check.problems), check.problems


def test_missing_or_junk_attestation_fails(attested):
    attested.path.write_text(attested.path.read_text() + "not json\n")
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok and any("line 2" in p for p in check.problems), check.problems
    attested.path.unlink()
    check = attest.verify_attestation(attested.run_dir, attested.pub)
    assert not check.ok and any("missing" in p for p in check.problems)


# --- refusals and keys ---------------------------------------------------------------------

def test_attest_refuses_a_run_that_does_not_verify(tmp_path, rules):
    run_dir = make_run(tmp_path)
    ev = run_dir / "evidence" / "01_build" / "build.source_identity.json"
    ev.write_bytes(_flip(ev.read_bytes(), 10))
    priv, _ = write_keys(tmp_path / "keys")
    with pytest.raises(attest.AttestError, match="does not verify"):
        attest.attest(run_dir, priv)
    assert not (run_dir / attest.ATTESTATION_FILE).exists()


def test_attest_never_rewrites_an_attestation(attested):
    before = attested.path.read_bytes()
    with pytest.raises(attest.AttestError, match="already exists"):
        attest.attest(attested.run_dir, attested.priv)
    assert attested.path.read_bytes() == before
    assert not [p for p in attested.run_dir.iterdir() if p.name.endswith(".staging")]


def test_bad_keys_are_refused(tmp_path):
    priv, pub = write_keys(tmp_path)
    with pytest.raises(attest.AttestKeyError, match="cannot read"):
        attest.load_signer(tmp_path / "missing.pem")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    with pytest.raises(attest.AttestKeyError, match="not a PEM private key"):
        attest.load_signer(junk)
    ec_key = tmp_path / "ec.pem"
    ec_key.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    with pytest.raises(attest.AttestKeyError, match="EC private key; an Ed25519"):
        attest.load_signer(ec_key)
    enc = tmp_path / "enc.pem"
    enc.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")))
    with pytest.raises(attest.AttestKeyError, match="encrypted"):
        attest.load_signer(enc)
    with pytest.raises(attest.AttestKeyError, match="not a PEM public key"):
        attest.load_public_key(priv)
    assert attest.load_public_key(pub).keyid == attest.load_signer(priv).public_key.keyid


# --- the command line ----------------------------------------------------------------------

def test_cli_attest_and_verify_with_key(tmp_path, rules, capsys):
    run_dir = make_run(tmp_path)
    priv, pub = write_keys(tmp_path / "keys")
    assert cli.main(["attest", str(run_dir), "--key", str(priv)]) == 0
    assert "attestation.intoto.jsonl written" in capsys.readouterr().out
    assert cli.main(["verify", str(run_dir), "--key", str(pub)]) == 0
    out = capsys.readouterr().out
    assert "OK: attestation signed by" in out and "5 subjects" in out
    assert cli.main(["verify", str(run_dir)]) == 0
    assert cli.main(["attest", str(run_dir), "--key", str(priv)]) == 1
    assert "already exists" in capsys.readouterr().out

    model = run_dir / "fp32" / "ggml-model.bin"
    model.write_bytes(model.read_bytes() + b"\0")
    assert cli.main(["verify", str(run_dir), "--key", str(pub)]) == 1
    out = capsys.readouterr().out
    assert "REJECTED" in out
    assert "attestation: subject fp32/ggml-model.bin: digest changed" in out


def test_cli_bad_keys_exit_2(tmp_path, rules, capsys):
    run_dir = make_run(tmp_path)
    priv, pub = write_keys(tmp_path / "keys")
    rsa_like = tmp_path / "ec.pem"
    rsa_like.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    assert cli.main(["attest", str(run_dir), "--key", str(rsa_like)]) == 2
    assert "Ed25519 key is required" in capsys.readouterr().err
    assert cli.main(["attest", str(run_dir), "--key", str(tmp_path / "nope.pem")]) == 2
    assert "cannot read key file" in capsys.readouterr().err
    assert not (run_dir / attest.ATTESTATION_FILE).exists()
    assert cli.main(["verify", str(run_dir), "--key", str(priv)]) == 2
    assert "not a PEM public key" in capsys.readouterr().err
    assert cli.main(["attest", str(run_dir)]) == 2  # --key is required


def test_cli_run_checks_sign_key_before_any_work(tmp_path, monkeypatch, capsys):
    from verifylib.batch import audit as orchestrate, inputs
    calls = []
    monkeypatch.setattr(inputs, "load_all", lambda *a, **k: calls.append("load_all"))
    monkeypatch.setattr(orchestrate, "run_one", lambda *a, **k: calls.append("run_one"))
    junk = tmp_path / "key.pem"
    junk.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    reports = tmp_path / "reports"
    rc = cli.main(["run", "--reports", str(reports), "--sign-key", str(junk)])
    assert rc == 2
    assert "bad signing key" in capsys.readouterr().err
    assert calls == [] and not reports.exists()


def test_cli_run_signs_each_published_run(tmp_path, rules, monkeypatch, capsys):
    from verifylib.batch import local as executors, inputs
    from verifylib.views import report
    run_dir = make_run(tmp_path)
    priv, pub = write_keys(tmp_path / "keys")
    outcome = SimpleNamespace(name="tiny-en", verdict=Verdict.INCOMPLETE,
                              report=run_dir / "report.html", run_dir=run_dir)
    from verifylib import params
    tiny = params.load(ROOT / "parameters" / "tiny-en.yaml")
    monkeypatch.setattr(inputs, "load_all", lambda *a, **k: [tiny])
    # The batch driver (one model after another here) calls run_one for each model.
    monkeypatch.setattr(executors, "run_one", lambda *a, **k: outcome)
    monkeypatch.setattr(report, "render_index", lambda *a, **k: tmp_path / "index.html")
    rc = cli.main(["run", "--reports", str(tmp_path / "reports"), "--sign-key", str(priv)])
    assert rc == 0
    assert "attestation:" in capsys.readouterr().out
    assert attest.verify_attestation(run_dir, pub).ok
