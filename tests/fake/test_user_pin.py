"""A pin the user brings, end to end on a synthetic candidate (issue 34, part 2).

``verifylib pin-check CANDIDATE --write-manifest FILE`` declares a tiny CMake project
standing in for whisper.cpp (its ``src/whisper.cpp`` declares ``whisper_batch batch;``) as
a user pin; a parameter file names that manifest (``runtime.manifest``); stage 01 audits
through it for real (source identity, exact patch, the GGML build and its probe); the run
carries the manifest and its patch, binds the manifest's digest, and ``verify`` accepts
it, also once the user's files are gone. Editing the carried manifest afterwards makes
``verify`` fail, whether or not the digests are forged to match. Unit tests of each
refusal are in tests/unit/test_user_pins.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT
from verifylib import canonical, params
from verifylib.evidence import receipt
from verifylib.evidence.build.facts import build_facts_from_evidence
from verifylib.evidence.gates import Status
from verifylib.evidence.layout import recorded_gates
from verifylib.runtime import contracts
from verifylib.stages import build as stage_build
from verifylib.stages.context import init_run_dir
from verifylib.whispercpp.source import git_tree_id, load_user_pins

COMMIT = "c0ffee" + "0" * 34

FAKE_CLI = r"""
#include <cstdio>
int main() {
    fprintf(stderr, "whisper_backend_init_gpu: no GPU found\n");
    fprintf(stderr, "system_info: n_threads = 2 / 2 | WHISPER : COREML = 0 | OPENVINO = 0 |\n");
    printf(" [00:00:00.000 --> 00:00:01.000]  And so\n");
    return 0;
}
"""

WHISPER_CPP = """// stands in for upstream's src/whisper.cpp (never compiled)
struct whisper_batch { int n_tokens; };

struct whisper_state {
    int n_sample = 0;

    whisper_batch batch;

    int n_decoders = 1;
};
"""


def candidate(root: Path) -> Path:
    """A whisper.cpp-shaped CMake project: a whisper-cli, the declaration, the test files."""
    (root / "src").mkdir(parents=True)
    (root / "src" / "whisper.cpp").write_text(WHISPER_CPP)
    (root / "cli.cpp").write_text(FAKE_CLI)
    (root / "CMakeLists.txt").write_text("\n".join([
        "cmake_minimum_required(VERSION 3.13)", "project(fake CXX)",
        "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)",
        "add_executable(whisper-cli cli.cpp)", ""]))
    (root / contracts.TEST_MODEL_IN_TREE).parent.mkdir(parents=True)
    (root / contracts.TEST_MODEL_IN_TREE).write_bytes(b"ggml test model")
    (root / contracts.TEST_AUDIO_IN_TREE).parent.mkdir(parents=True)
    (root / contracts.TEST_AUDIO_IN_TREE).write_bytes(b"RIFF sample")
    return root


def pin_check(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, VERIFYLIB_CACHE=str(cache))
    return subprocess.run([sys.executable, "-m", "verifylib", "pin-check", *args],
                          capture_output=True, text=True, env=env, timeout=900)


def parameter_file(folder: Path, manifest: str, source: Path, pin: str = "mine",
                   canary: dict | None = None) -> Path:
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["name"] = "user-pin"
    data["runtime"] = {"pin": pin, "manifest": manifest,
                       "source": {"kind": "folder", "path": str(source)}}
    data["fixtures"] = []
    data["canary"] = canary or {"enabled": False}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "user-pin.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def written(tmp_path):
    """The candidate, and the user manifest pin-check wrote for it."""
    cand = candidate(tmp_path / "candidate")
    model = tmp_path / "model.bin"
    model.write_bytes(b"ggml")
    manifest = tmp_path / "pins" / "user.yaml"
    res = pin_check(str(cand), "--runs", "2", "--model", str(model), "--commit", COMMIT,
                    "--name", "mine", "--write-manifest", str(manifest),
                    cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"wrote {manifest}" in res.stdout
    return cand, manifest


def test_pin_check_writes_an_entry_the_loader_accepts(written):
    cand, manifest = written
    pins = load_user_pins(manifest)
    pin = pins["mine"]
    assert (pin.commit, pin.tree, pin.touches) == (COMMIT, git_tree_id(cand), ("src/whisper.cpp",))
    patch = pin.patch_path.read_bytes()
    assert pin.patch_path == manifest.parent / "mine.patch"
    assert canonical.sha256_bytes(patch) == pin.patch_sha256
    # The generated patch: full index lines, the one declaration initialized.
    assert patch.startswith(b"diff --git a/src/whisper.cpp b/src/whisper.cpp\nindex ")
    index = patch.split(b"\n")[1].split()[1].split(b"..")
    assert [len(x) for x in index] == [40, 40]
    assert b"\n-    whisper_batch batch;\n+    whisper_batch batch = {};\n" in patch
    # What this host could not run is recorded with the entry; everything else was run.
    if sys.platform != "darwin":
        assert len(pin.not_run_here) == 1
        assert pin.not_run_here[0].startswith("Core ML positive path (unpatched candidate): "
                                              "NOT_RUN(platform: ")
    text = manifest.read_text()
    assert text.startswith("# A user-declared whisper.cpp pin, written by `verifylib pin-check")
    assert "unpatched lifecycle A/B" in text
    assert not [p for p in manifest.parent.iterdir() if p.name.startswith(".")]  # no staging


def test_pin_check_refuses_what_it_cannot_write(written, tmp_path):
    cand, manifest = written
    cache = tmp_path / "cache"
    before = manifest.read_bytes()
    res = pin_check(str(cand), "--commit", COMMIT, "--name", "mine", "--write-manifest",
                    str(manifest), cache=cache)
    assert res.returncode == 2 and "exists already" in res.stderr
    assert manifest.read_bytes() == before
    other = tmp_path / "other.yaml"
    res = pin_check(str(cand), "--commit", COMMIT, "--name", "V1.8.5", "--write-manifest",
                    str(other), cache=cache)
    assert res.returncode == 2 and "clashes with verifylib's packaged pin 'v1.8.5'" in res.stderr
    res = pin_check(str(cand), "--no-build", "--commit", COMMIT, "--write-manifest", str(other),
                    cache=cache)
    assert res.returncode == 2 and "drop --no-build" in res.stderr
    res = pin_check(str(cand), "--write-manifest", str(other), cache=cache)
    assert res.returncode == 2 and "--commit" in res.stderr
    fixed = tmp_path / "fixed"
    shutil.copytree(cand, fixed)
    src = fixed / "src" / "whisper.cpp"
    src.write_text(src.read_text().replace("whisper_batch batch;", "whisper_batch batch = {};"))
    res = pin_check(str(fixed), "--commit", COMMIT, "--write-manifest", str(other), cache=cache)
    assert res.returncode == 2 and "initializes it" in res.stderr
    assert not other.exists()


def _stage_01(tmp_path, param_file, monkeypatch, publish=True):
    monkeypatch.setenv("VERIFYLIB_CACHE", str(tmp_path / "cache"))
    p = params.load(param_file)
    run_dir = tmp_path / "run"
    init_run_dir(run_dir, p)
    report = stage_build.run(p, run_dir)
    if publish:
        receipt.build_receipt(run_dir)
    return p, run_dir, report


def test_an_audit_on_a_user_pin_verifies_and_carries_its_manifest(written, tmp_path,
                                                                   monkeypatch):
    cand, manifest = written
    param_file = parameter_file(tmp_path / "params", "../pins/user.yaml", cand)
    p, run_dir, report = _stage_01(tmp_path, param_file, monkeypatch)
    assert p.runtime.manifest == str(manifest.resolve())
    st = {r.id: r for r in report.records}
    for gid in ("build.source_identity", "build.patch_exact", "build.ggml"):
        assert st[gid].status is Status.PASS, (gid, st[gid].reason)
    sha = canonical.sha256_file(manifest)
    carried = run_dir / "evidence" / "01_build" / "user-pins"
    assert (carried / "user.yaml").read_bytes() == manifest.read_bytes()
    assert (carried / "mine.patch").read_bytes() == (manifest.parent / "mine.patch").read_bytes()
    ids = canonical.read_json(run_dir / "receipt.json")["identities"]
    assert ids["runtime.manifest.sha256"] == sha and ids["runtime.pin"] == "mine"
    for gid in ("build.source_identity", "build.patch_exact"):
        names = {r.name for r in st[gid].evidence}
        assert {"user_manifest", "user_patch:mine.patch"} <= names
        assert st[gid].identities["runtime.manifest.sha256"] == sha
    # The user's files may be gone: the run carries what verify needs.
    shutil.rmtree(manifest.parent)
    res = receipt.verify(run_dir)
    assert res.ok, res.problems
    # The report says plainly that the pin is user-declared.
    facts = dict(build_facts_from_evidence(run_dir, recorded_gates(run_dir)).rows())
    assert facts["pin"].startswith("mine: USER-DECLARED pin, not one packaged with verifylib")
    assert "evidence/01_build/user-pins/user.yaml" in facts["pin"]
    from verifylib.views.build import html
    assert "USER-DECLARED pin" in html(report)
    from verifylib.views.gates import receipt_summary
    summary = receipt_summary(canonical.read_json(run_dir / "receipt.json"), "0" * 64,
                              run_dir=run_dir)
    assert "USER-DECLARED pin, not one packaged with verifylib" in summary

    # A replay rebuilds the pin from the copy the run carries, the user's file being gone.
    from verifylib.replay.rederive import carried_manifest
    again = carried_manifest(p, run_dir)
    assert again.runtime.manifest == str(carried / "user.yaml")
    init_run_dir(tmp_path / "replay", again)
    st = {r.id: r for r in stage_build.run(again, tmp_path / "replay").records}
    assert st["build.patch_exact"].status is Status.PASS, st["build.patch_exact"].reason
    assert st["build.patch_exact"].identities["runtime.manifest.sha256"] == sha

    # Editing the carried manifest after the run makes verify fail.
    copy = carried / "user.yaml"
    original = copy.read_bytes()
    copy.write_bytes(original + b"# edited\n")
    res = receipt.verify(run_dir)
    assert not res.ok
    assert any("user-pins/user.yaml: changed" in x for x in res.problems), res.problems

    # Also when every digest is forged to match: the pin is re-judged against the copy.
    copy.write_bytes(original.replace(git_tree_id(cand).encode(), b"f" * 40))
    new_sha = canonical.sha256_file(copy)
    gfile = run_dir / "gates" / "01_build.json"
    stage = canonical.read_json(gfile)
    for g in stage["gates"]:
        for e in g["evidence"]:
            if e["name"] == "user_manifest":
                e["sha256"] = new_sha
    canonical.write_json(gfile, stage)
    receipt.build_receipt(run_dir)
    res = receipt.verify(run_dir)
    assert not res.ok
    mine = [x for x in res.problems if x.startswith("gate build.source_identity:")]
    assert len(mine) == 1 and "recorded PASS but the evidence gives FAIL" in mine[0], res.problems
    assert "not the runtime.manifest.sha256 the gate binds" in mine[0]
    assert f"pin_tree '{git_tree_id(cand)}' is not the manifest's '{'f' * 40}'" in mine[0]


def test_the_sanitizer_canary_judges_its_builds_against_the_carried_pin(written, tmp_path,
                                                                        monkeypatch):
    """canary.sanitizer checks each AddressSanitizer build against the pin: for a user pin,
    the pin the run carries (the gate cites the copy stage 01 made and binds its digest)."""
    from verifylib.stages import canary
    cand, manifest = written
    param_file = parameter_file(tmp_path / "params", "../pins/user.yaml", cand,
                                canary={"runs": 2})
    p, run_dir, _ = _stage_01(tmp_path, param_file, monkeypatch, publish=False)
    report = canary.run(p, run_dir, progress=False)
    receipt.build_receipt(run_dir)
    rec = {r.id: r for r in report.records}["canary.sanitizer"]
    assert rec.status in (Status.PASS, Status.FAIL), rec.reason
    assert "manifest" not in rec.reason.detail and "pin" not in rec.reason.detail, rec.reason
    assert {"user_manifest", "user_patch:mine.patch"} <= {r.name for r in rec.evidence}
    assert rec.identities["runtime.manifest.sha256"] == canonical.sha256_file(manifest)
    res = receipt.verify(run_dir)
    assert res.ok, res.problems


def test_a_packaged_pin_run_carries_no_manifest(written, tmp_path, monkeypatch):
    """runtime.manifest beside a packaged pin changes nothing: no copy, no identity."""
    cand, manifest = written
    param_file = parameter_file(tmp_path / "params", str(manifest), cand, pin="v1.8.5")
    p = params.load(param_file)
    assert p.runtime.pin == "v1.8.5"
    ctx_dir = tmp_path / "run"
    from verifylib.stages.context import StageContext
    pin, refs, ids = stage_build.run_pin(StageContext("01_build", p, ctx_dir), p)
    assert (pin.name, refs, ids) == ("v1.8.5", [], {})
    assert not (ctx_dir / "evidence" / "01_build" / "user-pins").exists()
