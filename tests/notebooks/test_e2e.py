"""The default audit end to end, as a user runs it: CLI, papermill, report, receipt, verify."""

import shutil
import subprocess
import sys

import pytest

from verifylib import canonical

from tests.helpers import ROOT

pytestmark = [pytest.mark.physical, pytest.mark.notebook]

LINUX_PHYSICAL_PASS = {"build.source_identity", "build.patch_exact", "build.ggml",
                       "export.ggml_model", "wer.ggml_vs_source", "canary.lifecycle_ab",
                       "export.contract", "export.pair", "parity.program", "parity.program_fp16",
                       "canary.sanitizer", "canary.seam_negative", "canary.seam_positive",
                       "wer.seam"}


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "verifylib", *args], capture_output=True,
                          text=True, **kw)


@pytest.fixture(scope="module")
def audit(default_audit):
    return default_audit


def _statuses(run_dir):
    rec = canonical.read_json(run_dir / "receipt.json")
    return rec, {g["id"]: g for g in rec["gates"]}


def test_default_audit_is_incomplete_with_physical_gates_passing(audit):
    res, run_dir = audit
    assert "verdict INCOMPLETE" in res.stdout
    assert str(run_dir / "report.html") in res.stdout
    rec, gates = _statuses(run_dir)
    assert rec["verdict"] == "INCOMPLETE"
    for gid, g in gates.items():
        if gid in LINUX_PHYSICAL_PASS:
            assert g["status"] == "PASS", (gid, g["reason"])
        else:
            assert g["status"] == "NOT_RUN", gid
            assert g["reason"]["kind"] in {"platform", "prerequisite"}, (gid, g["reason"])
            assert g["reason"]["detail"].strip()
    assert gates["build.coreml"]["reason"]["detail"].find("macOS") >= 0
    assert canonical.is_sha256(rec["identities"]["binary.ggml.sha256"])
    assert not list((run_dir.parent).glob(".staging/*")), "staging left behind"
    assert rec["identities"]["policy.wer.id"] == "wer-v3"
    assert canonical.is_sha256(rec["identities"]["model.ggml.sha256"])
    # The informational sanitizer gate: what ASan saw on each side, bound to stage 01's builds.
    detail = gates["canary.sanitizer"]["reason"]["detail"]
    assert "with a sanitizer report: 3x AddressSanitizer" in detail
    assert "in whisper_batch_free (/whisper.cpp/src/whisper.cpp:499)" in detail
    assert "3/3 runs exit 3 with both markers, no sanitizer report" in detail
    assert "uninitiali" not in detail
    for key in ("binary.ggml_asan.sha256", "binary.ggml_unpatched_asan.sha256"):
        assert canonical.is_sha256(rec["identities"][key])
    assert rec["identities"]["binary.ggml_asan.sha256"] != rec["identities"]["binary.ggml.sha256"]
    # The seam: whisper.cpp's own Core ML path, the defect crashing it unpatched, never Core ML.
    detail = gates["canary.seam_negative"]["reason"]["detail"]
    assert "20/20 runs refused the missing encoder" in detail and "20x SIGSEGV" in detail
    assert "BUS on unknown address" in detail
    seams = {rec["identities"][k] for k in ("binary.seam.sha256", "binary.seam_unpatched.sha256",
                                             "binary.seam_unpatched_asan.sha256")}
    assert len(seams) == 3 and rec["identities"]["binary.ggml.sha256"] not in seams
    assert "binary.coreml.sha256" not in rec["identities"]


def test_transcripts_side_by_side_and_wer_zero_on_jfk(audit):
    _, run_dir = audit
    wer = canonical.read_json(run_dir / "evidence" / "05_wer" / "wer.json")
    clip = next(c for c in wer["clips"] if c["id"] == "jfk")
    assert len(wer["clips"]) >= 9  # jfk plus the synthesized fixtures
    assert clip["ggml"]["substitutions"] + clip["ggml"]["deletions"] + clip["ggml"]["insertions"] == 0
    assert clip["source"] == clip["ggml"]
    assert clip["ggml_text"].startswith("and so my fellow americans ask not")
    private = next(c for c in wer["clips"] if not c["public"])
    assert "reference" not in private and "ggml_text" not in private
    assert "library on maple street" not in (run_dir / "evidence" / "05_wer" / "wer.json").read_text()
    page = (run_dir / "report.html").read_text()
    assert "GGML whisper-cli" in page and "And so my fellow Americans" in page
    assert "canary.sanitizer (informational)" in page
    assert "#5 whisper_batch_free /whisper.cpp/src/whisper.cpp:499" in page
    assert (run_dir / "fp32" / "ggml-model.bin").is_file()


def test_report_is_self_contained_and_code_hidden(audit):
    _, run_dir = audit
    short = (run_dir / "report.html").read_text()
    full = (run_dir / "report-full.html").read_text()
    for page in (short, full):
        assert "<script" not in page.lower()
        assert 'src="http' not in page and "src='http" not in page
        assert "Verdict: <b>INCOMPLETE</b>" in page
        assert "build.patch_exact" in page
    assert "import verifylib.notebook" not in short
    assert 'class="nn">verifylib.notebook' in full  # code shown, highlighted


def test_verify_accepts_untouched_and_rejects_tampering(audit, tmp_path):
    _, run_dir = audit
    ok = _cli("verify", str(run_dir))
    assert ok.returncode == 0 and "verifies" in ok.stdout, ok.stdout

    flipped = shutil.copytree(run_dir, tmp_path / "flipped")
    side = flipped / "evidence" / "01_build" / "build.json"
    data = bytearray(side.read_bytes())
    data[len(data) // 2] ^= 0x20
    side.write_bytes(bytes(data))
    bad = _cli("verify", str(flipped))
    assert bad.returncode == 1
    assert "evidence/01_build/build.json" in bad.stdout

    edited = shutil.copytree(run_dir, tmp_path / "edited")
    rec = canonical.read_json(edited / "receipt.json")
    for g in rec["gates"]:
        if g["id"] == "build.coreml":
            assert g["status"] == "NOT_RUN"
            g["status"] = "PASS"
            g["reason"] = {"kind": "rule", "detail": "edited"}
    canonical.write_json(edited / "receipt.json", rec)
    bad = _cli("verify", str(edited))
    assert bad.returncode == 1
    assert "build.coreml" in bad.stdout


def test_second_run_reuses_the_cached_build(audit):
    _, run_dir = audit
    build = canonical.read_json(run_dir / "evidence" / "01_build" / "build.json")
    # The session fixture built (or found) the binary before the audit ran.
    assert build["cached"] is True
    timings = canonical.read_json(run_dir / "timings.json")
    assert timings["01_build"]["verifylib"] < 60


def test_a_notebook_runs_alone_with_papermill(tmp_path, v185_ggml_build):
    run_dir = tmp_path / "D"
    out = tmp_path / "out.ipynb"
    res = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "01_build.ipynb"),
                          str(out), "-f", str(ROOT / "parameters" / "tiny-en.yaml"),
                          "-p", "run_dir", str(run_dir), "--no-progress-bar"],
                         capture_output=True, text=True, cwd=ROOT / "notebooks")
    assert res.returncode == 0, res.stderr[-3000:]
    stage = canonical.read_json(run_dir / "gates" / "01_build.json")
    st = {g["id"]: g["status"] for g in stage["gates"]}
    assert st["build.ggml"] == "PASS"
    # A later stage alone in a fresh folder: prerequisites missing -> NOT_RUN, no crash.
    lone = tmp_path / "E"
    res = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "03_canary.ipynb"),
                          str(tmp_path / "o3.ipynb"), "-f", str(ROOT / "parameters" / "tiny-en.yaml"),
                          "-p", "run_dir", str(lone), "--no-progress-bar"],
                         capture_output=True, text=True, cwd=ROOT / "notebooks")
    assert res.returncode == 0, res.stderr[-3000:]
    stage = canonical.read_json(lone / "gates" / "03_canary.json")
    assert all(g["status"] == "NOT_RUN" for g in stage["gates"])
