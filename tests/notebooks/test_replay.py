"""``verifylib verify --replay`` on the session's real default audit and on forgeries of it.

The honest run is replayed once through the command line (stages 01, 02, 03 and 05 run
again for real into the replay's scratch run, the published packages re-executed, a
signed verification summary written). Each forgery of a physical result
(:mod:`tests.helpers.forged_physical`) passes plain ``verify``; its replay is compared
against that same scratch run (the parameters are the run's own) and must name the claim
that differs, and only that one. The forgeries' replays share the reference encoder and the
executions of a package no forgery changed (tests/helpers/same_numbers.py): computed by the
first replay in this process, compared by each against its own recorded evidence.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import forged_physical
from tests.helpers.forge import snapshot
from tests.helpers.same_numbers import reusing_numbers
from verifylib import canonical, open_run
from verifylib.evidence import receipt
from verifylib.replay import rederive, replay
from verifylib.replay.claims import ClaimStatus, ReplayResult

pytestmark = [pytest.mark.physical, pytest.mark.notebook]


def _keys(tmp):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    priv = Ed25519PrivateKey.generate()
    (tmp / "key.pem").write_bytes(priv.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (tmp / "pub.pem").write_bytes(priv.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return tmp / "key.pem", tmp / "pub.pem"


@pytest.fixture(scope="module")
def replayed(default_audit, tmp_path_factory):
    _, run_dir = default_audit
    tmp = tmp_path_factory.mktemp("replay")
    key, pub = _keys(tmp)
    before = snapshot(run_dir)
    out = tmp / "out"
    res = subprocess.run([sys.executable, "-m", "verifylib", "verify", str(run_dir), "--replay",
                          "-o", str(out), "--sign-key", str(key)],
                         capture_output=True, text=True)
    return {"run": run_dir, "res": res, "out": out, "pub": pub, "before": before,
            "doc": canonical.read_json(out / "replay.json") if (out / "replay.json").is_file()
            else None}


def test_the_honest_run_replays_all_reproduced_or_not_replayable(replayed):
    res, doc = replayed["res"], replayed["doc"]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = ReplayResult.from_json(doc)
    assert result.verified and result.passed and not result.differs
    statuses = {c.id: c.status for c in result.claims}
    for cid in ("source.tree", "source.patch", "build.ggml_lib", "build.ggml",
                "build.unpatched", "build.asan", "export.ggml_model", "export.program.fp32",
                "export.program.fp16", "canary.lifecycle.patched", "canary.lifecycle.unpatched",
                "canary.sanitizer", "parity.program", "parity.program_fp16",
                "wer.transcripts.jfk"):
        assert statuses[cid] is ClaimStatus.REPRODUCED, (cid, result.claim(cid).detail)
    # Each build claim compares real digests on both sides, never two missing ones.
    for side in ("unpatched", "patched"):
        for values in (result.claim("build.asan").recorded, result.claim("build.asan").replayed):
            assert len(values[side]["sha256"]) == 64
    for cid in ("build.ggml", "build.unpatched"):
        assert len(result.claim(cid).recorded["sha256"]) == 64
    for cid in ("build.coreml", "parity.runtime", "wer.hybrid", "placement"):
        assert statuses[cid] is ClaimStatus.NOT_REPLAYABLE
        assert result.claim(cid).detail
    assert "OK:" in res.stdout and "replays" in res.stdout
    # The claim table comes first on the page, in the report's stylesheet.
    html = (replayed["out"] / "replay.html").read_text(encoding="utf-8")
    assert html.index("vl-claims") < html.index("The replay")
    assert ".vl-REPRODUCED" in html and "export.\u200bprogram.\u200bfp32" in html
    # Replay never writes into the run.
    assert snapshot(replayed["run"]) == replayed["before"]
    assert not list(replayed["run"].glob("replay*"))


def test_the_verification_summary_is_a_signed_slsa_vsa(replayed):
    out, pub = replayed["out"], replayed["pub"]
    line = (out / "replay.intoto.jsonl").read_text(encoding="utf-8")
    import base64
    statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
    assert statement["predicateType"] == "https://slsa.dev/verification_summary/v1"
    pred = statement["predicate"]
    assert pred["verificationResult"] == "PASSED"
    assert pred["resourceUri"] == open_run(replayed["run"]).run_id
    assert pred["verifier"]["version"]["verifylib"]
    assert {c["id"] for c in pred["claims"]} >= {"build.ggml", "parity.program"}
    ok = subprocess.run([sys.executable, "-m", "verifylib", "verify-summary",
                         str(out / "replay.intoto.jsonl"), "--key", str(pub)],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "PASSED" in ok.stdout, ok.stdout + ok.stderr
    # One flipped payload byte and the signature no longer verifies.
    env = json.loads(line)
    raw = bytearray(base64.b64decode(env["payload"]))
    raw[raw.index(b"PASSED")] = ord("F")
    env["payload"] = base64.b64encode(bytes(raw)).decode()
    bad = out.parent / "tampered.intoto.jsonl"
    bad.write_text(json.dumps(env) + "\n", encoding="utf-8")
    no = subprocess.run([sys.executable, "-m", "verifylib", "verify-summary", str(bad),
                         "--key", str(pub)], capture_output=True, text=True)
    assert no.returncode == 1 and "does not verify" in no.stdout


FORGERIES = [
    ("broken_package", {"export.program.fp32", "parity.program"}),
    ("forged_transcripts", None),  # every clip whose GGML text was not already the reference
    ("swapped_model", {"export.ggml_model"}),
    ("relabelled_crashes", {"canary.lifecycle.unpatched"}),
]


@pytest.mark.parametrize("forgery, expected", FORGERIES, ids=[f for f, _ in FORGERIES])
def test_a_forged_physical_result_verifies_but_does_not_replay(replayed, tmp_path, forgery,
                                                               expected):
    assert replayed["res"].returncode == 0
    forged = getattr(forged_physical, forgery)(replayed["run"], tmp_path / "forged")
    plain = receipt.verify(forged)
    assert plain.ok, plain.problems  # consistent: the project's own rules accept it
    rd = rederive.load(replayed["out"] / "work")
    with reusing_numbers():  # a package the forgery left alone executes once per process
        result = replay(forged, tmp_path / "replay", rederived=rd, log=lambda _: None)
    assert result.exit_code == 1
    differs = {c.id for c in result.differs}
    if expected is None:
        assert differs and all(c.startswith("wer.transcripts.") for c in differs), differs
        assert "wer.transcripts.encoder" in differs
    else:
        assert differs == expected, [(c.id, c.detail) for c in result.differs]
    for c in result.differs:
        assert c.recorded is not None and c.detail
    assert (tmp_path / "replay" / "replay.json").is_file()


def test_replay_refuses_to_write_inside_the_run(replayed):
    run = replayed["run"]
    res = subprocess.run([sys.executable, "-m", "verifylib", "verify", str(run), "--replay",
                          "-o", str(run / "replay")], capture_output=True, text=True)
    assert res.returncode == 2 and "never writes into a run" in res.stderr
    assert not (run / "replay").exists()


def test_the_replay_notebook_shows_the_claim_table(replayed, tmp_path):
    import nbformat
    import papermill as pm

    from tests.helpers import ROOT
    out = tmp_path / "replay.ipynb"
    pm.execute_notebook(str(ROOT / "notebooks" / "08_replay.ipynb"), str(out),
                        parameters={"run_dir": str(replayed["run"]),
                                    "output": str(tmp_path / "nb-replay"),
                                    "reuse": str(replayed["out"] / "work")},
                        progress_bar=False, cwd=str(tmp_path), kernel_name="python3")
    nb = nbformat.read(out, as_version=4)
    html = "".join(o.get("data", {}).get("text/html", "") for c in nb.cells
                   if c.cell_type == "code" for o in c.outputs)
    assert "vl-claims" in html and "REPRODUCED" in html and "PASSED" in html
    assert (tmp_path / "nb-replay" / "replay.json").is_file()
