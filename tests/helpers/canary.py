"""Stage 03 on fakes: parameters, judging, fake whisper-cli builds (``fake_whisper_cli``) and
the forged stage 01/02 records the canary reads, shared by the canary, sanitizer, ledger and
fake-runtime tests. The fake whisper.cpp tree is the ``tree`` fixture (tests/fake/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers.fake_whisper_cli import install
from verifylib import canonical, params
from verifylib.evidence import gates
from verifylib.evidence.gates import Status
from verifylib.evidence.layout import ASAN_SIDECAR, UNPATCHED_IDENTITY
from verifylib.evidence.records import EvidenceRef, EvidenceView, GateRecord, Reason
from verifylib.evidence import registry as rules
from verifylib.runtime import sanitizer
from verifylib.runtime.capabilities import HostCapabilities
from verifylib.stages.context import StageContext
from verifylib.whispercpp import build_options, source

FAKE_MAC = HostCapabilities(
    system="Darwin", machine="arm64", macos_version=(15, 7),
    coremlc="/Applications/Xcode.app/Contents/Developer/Toolchains/XcodeDefault.xctoolchain/"
            "usr/bin/coremlc")


CLEAN = "exit 3 + both markers"


def make_params(runs: int = 3, **canary_cfg) -> params.Params:
    data = yaml.safe_load(params.DEFAULT_PARAMETERS.read_text())
    data["canary"] = {"runs": runs, **canary_cfg}
    data.pop("fixtures", None)
    return params.validate(data, "test parameters", params.PARAMETERS_DIR)


def judge(gate_id: str, ctx: StageContext, refs) -> gates.Judgement:
    return rules.RULES[gate_id](EvidenceView(ctx.run_dir, refs))


def fake(tmp_path: Path, scenario: str) -> tuple[Path, str]:
    exe = install(tmp_path / "bin" / scenario, scenario)
    return exe, canonical.sha256_file(exe)


def fake_asan(tmp_path: Path, side: str, scenario: str | None = None) -> dict:
    """A fake ASan whisper-cli in a folder named by its (made-up) build key, and the build
    record stage 01 would have written for it (forged: the fake is a script)."""
    variant, _ = sanitizer.SIDES[side]
    key = canonical.sha256_bytes(f"{side}:{scenario or variant}".encode())
    exe = install(tmp_path / "bin" / key, scenario or variant)
    pin = source.load_pins()["v1.8.5"]
    return {"built": True, "variant": variant, "binary": str(exe),
            "sha256": canonical.sha256_file(exe), "key": key, "static": True,
            "needed_libs": ["libasan.so.8", "libstdc++.so.6", "libm.so.6", "libc.so.6"],
            "options": build_options.effective_options(variant, {"GGML_NATIVE": "ON"}),
            "tree_id": pin.tree, "patch_sha256": None if side == "unpatched" else pin.patch_sha256,
            "cached": True, "seconds": 0.0}


def ctx_for(tmp_path: Path, p=None) -> StageContext:
    return StageContext("03_canary", p or make_params(), tmp_path / "run")


def forge_prerequisites(run_dir: Path, tree: Path, bins: dict[str, tuple[Path, str]]) -> None:
    """Gate records of stages 01/02 as the canary reads them (forged: this tests stage 03)."""
    def stage(name, gate_files, identities):
        recs = []
        for gid, files in gate_files.items():
            refs = []
            for ev_name, value in files.items():
                path = run_dir / "evidence" / name / f"{ev_name}.json"
                refs.append(EvidenceRef(ev_name, path.relative_to(run_dir).as_posix(),
                                        canonical.write_json(path, value)))
            recs.append(GateRecord(gid, Status.PASS, Reason("rule", "forged for a test"),
                                   tuple(refs), {}).to_record())
        canonical.write_json(run_dir / "gates" / f"{name}.json", {
            "schema": "verifylib-stage/1", "stage": name, "gates": recs,
            "identities": identities, "verifylib_seconds": 0})

    (g_bin, g_sha), (u_bin, u_sha), (c_bin, c_sha) = bins["ggml"], bins["unpatched"], bins["coreml"]
    canonical.write_json(run_dir / "evidence" / "01_build" / "unpatched_build.json",
                         {"built": True, "binary": str(u_bin), "sha256": u_sha})
    asan = {side: bins[f"asan-{side}"] for side in sanitizer.SIDES if f"asan-{side}" in bins}
    if asan:
        canonical.write_json(run_dir / "evidence" / "01_build" / f"{ASAN_SIDECAR}.json", asan)
    tree_id = source.git_tree_id(tree)
    stage("01_build", {
        "build.source_identity": {"source": {
            "pin": "forged", "pin_commit": "0" * 40, "pin_tree": tree_id,
            "computed_tree": tree_id, "origin": None, "path": str(tree), "cached": True}},
        "build.patch_exact": {},
        "build.ggml": {"build": _forged_build("ggml", g_bin, g_sha, tree_id)},
        "build.coreml": {"coreml_build": {
            **_forged_build("coreml", c_bin, c_sha, tree_id), "patch_after_problems": [],
            "ggml_key": None, "bench": {"binary": str(c_bin), "sha256": c_sha, "key": "k",
                                        "cli_key": "k", "options": {}, "cached": True,
                                        "probe": _forged_launch(c_bin, c_sha)}}},
    }, {UNPATCHED_IDENTITY: u_sha, **{sanitizer.SIDES[side][1]: rec["sha256"]
                                      for side, rec in asan.items() if rec.get("built")}})
    model = run_dir / "fp32" / "ggml-model.bin"
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_bytes(b"ggml model for the fake runtime")
    (run_dir / "fp32" / "ggml-model-encoder.mlmodelc").mkdir()
    (run_dir / "fp32" / "ggml-model-encoder.mlmodelc" / "model.mil").write_text("program")
    (run_dir / "fp32" / "ggml-model-encoder.mlmodelc" / "coremldata.bin").write_bytes(b"compiled")
    stage("02_export", {
        "export.ggml_model": {"ggml": {
            "path": "fp32/ggml-model.bin", "model_arg": str(model),
            "sha256": canonical.sha256_file(model), "bytes": model.stat().st_size,
            "hparams": {}, "n_tensors": 0, "lossless": True, "binary_sha256": g_sha,
            "probe": _forged_launch(g_bin, g_sha)}},
        "export.compile": {},
    }, {})


def _forged_build(variant: str, binary: Path, sha: str, tree_id: str) -> dict:
    """A stage-01 build document as its schema reads it (only binary and digest matter here)."""
    return {"built": True, "variant": variant, "key": "forged", "binary": str(binary),
            "sha256": sha, "recorded_sha256": sha, "static": True, "needed_libs": [],
            "options": {}, "compiler": {}, "cached": True, "seconds": 0.0, "tree_id": tree_id,
            "patch_sha256": None, "probe": None}


def _forged_launch(binary: Path, sha: str) -> dict:
    """A run record as its schema reads it (never re-classified by the canary)."""
    empty = canonical.sha256_bytes(b"")
    return {"seq": 0, "binary_sha256": sha, "argv": [str(binary)], "returncode": 0,
            "signal": None, "timed_out": False, "wall_s": 0.0, "stdout_sha256": empty,
            "stderr_sha256": empty, "stdout_bytes": 0, "stderr_bytes": 0}


def fake_bins(tmp_path, coreml="coreml"):
    return {"ggml": fake(tmp_path, "ggml"), "unpatched": fake(tmp_path, "ggml-unpatched"),
            "coreml": fake(tmp_path, coreml),
            "asan-unpatched": fake_asan(tmp_path, "unpatched"),
            "asan-patched": fake_asan(tmp_path, "patched")}
