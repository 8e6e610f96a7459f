"""The ggml backend of every build: pinned by one value, forced, keyed, recorded and checked.

On APPLE, ggml's CMake turns Metal, its embedded library and Accelerate (BLAS and inside
the CPU backend) on by default; every build pins them from ``runtime.ggml_backend``. What a
launch chose is read from its own log (``whisper_backend_init_gpu: no GPU found`` /
``using MTL0 backend``, src/whisper.cpp v1.8.5), so the recorded value comes from the
options and the probe, never from a constant. Evidence from before the pins records no
backend and still verifies. The Darwin SDK facts of the build key are here too (the tools
are stood in for: a unit test starts no process)."""

from __future__ import annotations

import pytest

from verifylib import canonical
from verifylib.errors import ParametersInvalid
from verifylib.evidence import identities
from verifylib.evidence.gates import Status
from verifylib.evidence.records import EvidenceRef, EvidenceView
from verifylib.evidence.build import rules as build_rules
from verifylib.evidence.registry import RULES
from verifylib.evidence.build.schema import CoremlBuildEvidence, GgmlBuildEvidence
from verifylib.runtime import contracts
from verifylib.runtime.runner import RunResult
from verifylib.whispercpp import build, build_options, system_info, toolchain
from verifylib.whispercpp.bench import BenchBuild

TREE = "a276adc5ab0958b854ce44c16a3e31615f473552"
PATCH = "acd730d8c3ebed4339a31619b8936469df92368941013633b5cf8794cae90581"
KEY, CML_KEY = "4" * 64, "5" * 64
SYSINFO = ("system_info: n_threads = 2 / 8 | WHISPER : COREML = 0 | OPENVINO = 0 | "
           "CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | DOTPROD = 1 | REPACK = 1 |")
METAL_SYSINFO = SYSINFO.replace("CPU :", "MTL : EMBED_LIBRARY = 1 | CPU :")

# What a v1.8.5 state logs choosing its backends (src/whisper.cpp: whisper_backend_init_gpu,
# whisper_backend_init), by what is compiled in.
CPU_LOG = ("whisper_backend_init_gpu: device 0: CPU (type: 0)\n"
           "whisper_backend_init_gpu: no GPU found\n")
METAL_LOG = ("whisper_backend_init_gpu: device 0: MTL0 (type: 1)\n"
             "whisper_backend_init_gpu: found GPU device 0: MTL0 (type: 1, cnt: 0)\n"
             "whisper_backend_init_gpu: using MTL0 backend\n")
BLAS_LINE = "whisper_backend_init: using BLAS backend\n"


# ----------------------------------------------------------------------------- the contract

@pytest.mark.parametrize("log,want", [
    (CPU_LOG, "cpu"),
    (CPU_LOG * 2, "cpu"),                       # -p 2: two states, the same choice
    (METAL_LOG, "metal"),
    (METAL_LOG + BLAS_LINE, "metal+BLAS"),      # ggml's default Mac build
    (CPU_LOG + BLAS_LINE, "cpu+BLAS"),          # Metal off, BLAS left on
    ("whisper_backend_init_gpu: using CUDA0 backend\n", "CUDA0"),  # loaded at run time
    (METAL_LOG + CPU_LOG, "metal+cpu"),         # states that disagree
    ("whisper_model_load: n_vocab = 51864\n", "none"),
    ("", "none"),
])
def test_launch_backend_names_what_the_states_chose(log, want):
    assert contracts.launch_backend("noise\n" + log + SYSINFO + "\n") == want


def test_system_info_lists_its_registries():
    assert contracts.system_info_registries(SYSINFO) == ("WHISPER", "CPU")
    assert contracts.system_info_registries(METAL_SYSINFO) == ("WHISPER", "MTL", "CPU")
    assert contracts.system_info_registries("system_info: n_threads = 4 / 8 |") == ()


# ----------------------------------------------------------------------------- the pins

def test_every_variant_pins_the_backend_and_no_option_contradicts_it():
    pins = {"GGML_METAL", "GGML_METAL_EMBED_LIBRARY", "GGML_BLAS", "GGML_ACCELERATE"}
    assert set(build_options.backend_pin_names()) == pins
    for variant in build_options.VARIANTS:
        cpu = build_options.effective_options(variant, {"GGML_NATIVE": "ON"})
        metal = build_options.effective_options(variant, {"GGML_NATIVE": "ON"}, backend="metal")
        assert {k: cpu[k] for k in pins} == {k: "OFF" for k in pins}
        assert {k: metal[k] for k in pins} == {"GGML_METAL": "ON",
                                               "GGML_METAL_EMBED_LIBRARY": "ON",
                                               "GGML_BLAS": "OFF", "GGML_ACCELERATE": "OFF"}
        assert build_options.backend_of_options(cpu) == "cpu"
        assert build_options.backend_of_options(metal) == "metal"
        assert cpu == {**cpu, **build_options.forced_options(variant, "cpu")}
        # Without a backend, forced_options is what every build of the variant shares, also
        # one recorded before the pins (the sanitizer rule re-checks those).
        assert not pins & set(build_options.forced_options(variant))
    # An option that agrees with a pin is accepted, one that contradicts it is not.
    assert build_options.effective_options("ggml", {"GGML_METAL": False})["GGML_METAL"] == "OFF"
    for bad in ({"GGML_METAL": "ON"}, {"GGML_BLAS": True}, {"GGML_ACCELERATE": "ON"},
                {"GGML_METAL_EMBED_LIBRARY": "ON"}):
        with pytest.raises(ParametersInvalid, match="on ggml backend 'cpu'"):
            build_options.effective_options("coreml", bad)
    with pytest.raises(ParametersInvalid, match="fixed to ON .* backend 'metal'"):
        build_options.effective_options("ggml", {"GGML_METAL": "OFF"}, backend="metal")
    with pytest.raises(ParametersInvalid, match="ggml backend must be one of"):
        build_options.effective_options("ggml", {}, backend="cuda")
    # Options without a complete set of pins name no backend: a build from before them.
    legacy = {k: v for k, v in build_options.effective_options("ggml", {}).items()
              if k not in pins}
    assert build_options.backend_of_options(legacy) is None
    assert build_options.backend_of_options({**legacy, "GGML_METAL": "OFF"}) is None


def test_the_backend_is_in_the_build_key():
    comp = {"c++": "c++ 12", "cc": "cc 12", "cmake": "cmake version 3.25.1"}
    keys = {build_options.build_key(TREE, PATCH, v,
                                    build_options.effective_options(v, {}, backend=b), comp)
            for v in ("ggml", "coreml") for b in build_options.GGML_BACKENDS}
    assert len(keys) == 4


# ----------------------------------------------------------------------------- SDK facts

def test_darwin_sdk_facts_enter_the_key_and_linux_runs_nothing_new(monkeypatch):
    ran: list[list[str]] = []
    answers = {"xcode-select": "/Applications/Xcode_16.2.app/Contents/Developer",
               "xcrun --show-sdk-version": "15.2",
               "xcrun --show-sdk-path": "/Applications/Xcode_16.2.app/Contents/Developer/"
                                        "Platforms/MacOSX.platform/Developer/SDKs/MacOSX15.2.sdk"}

    def first_line(argv):
        ran.append(list(argv))
        name = argv[0] if argv[0] == "xcode-select" else " ".join(argv[:2])
        return answers.get(name, f"{argv[0]} 1.0")

    monkeypatch.setattr(toolchain, "_first_line", first_line)
    monkeypatch.delenv("DEVELOPER_DIR", raising=False)
    monkeypatch.delenv("MACOSX_DEPLOYMENT_TARGET", raising=False)
    monkeypatch.setattr(toolchain.platform, "system", lambda: "Linux")
    linux = toolchain.compiler_identity()
    assert "sdk" not in linux
    assert not [a for a in ran if a[0] in ("xcrun", "xcode-select")]

    monkeypatch.setattr(toolchain.platform, "system", lambda: "Darwin")
    mac = toolchain.compiler_identity()
    assert mac["sdk"] == {"developer_dir": answers["xcode-select"], "version": "15.2",
                          "path": answers["xcrun --show-sdk-path"], "deployment_target": None}
    ran.clear()
    monkeypatch.setenv("DEVELOPER_DIR", "/Applications/Xcode_15.4.app/Contents/Developer")
    monkeypatch.setenv("MACOSX_DEPLOYMENT_TARGET", "14.0")
    other = toolchain.compiler_identity()
    # $DEVELOPER_DIR selects the Xcode for xcrun as it does for the compiler: it wins over
    # xcode-select, which is then not asked.
    assert other["sdk"]["developer_dir"] == "/Applications/Xcode_15.4.app/Contents/Developer"
    assert other["sdk"]["deployment_target"] == "14.0"
    assert not [a for a in ran if a[0] == "xcode-select"]
    opts = build_options.effective_options("ggml-asan", {})
    keys = {build_options.build_key(TREE, PATCH, "ggml-asan", opts, c)
            for c in (linux, mac, other)}
    assert len(keys) == 3


# ----------------------------------------------------------------------------- recording

def _result(argv, err: str, out: str = "", rc: int = 0) -> RunResult:
    return RunResult(argv=list(argv), returncode=rc, signal=None, timed_out=False,
                     stdout=out.encode(), stderr=err.encode(), wall_s=0.5)


def _build_result(tmp_path, variant: str, backend: str, key: str = KEY,
                  options=None) -> build.BuildResult:
    folder = tmp_path / "builds" / key
    folder.mkdir(parents=True, exist_ok=True)
    canonical.write_json(folder / "build.json", {"sha256": "1" * 64})
    opts = options if options is not None else build_options.effective_options(
        variant, {"GGML_NATIVE": "ON"}, backend=backend)
    return build.BuildResult(binary=folder / "whisper-cli", sha256="1" * 64, key=key,
                             cached=True, seconds=0.1, variant=variant, options=opts,
                             compiler={"c++": "c++ 12"}, needed_libs=("libc.so.6",),
                             static=True, tree_id=TREE,
                             patch_sha256=None if "unpatched" in variant else PATCH,
                             build_json=folder / "build.json")


def _probe(monkeypatch, binary, err: str) -> system_info.SystemInfoProbe:
    """The real probe_system_info, its launch stood in for by a result with ``err``."""
    monkeypatch.setattr(system_info, "run_whisper_cli",
                        lambda argv, cwd=None, timeout=None: _result(argv, err))
    return system_info.probe_system_info(binary, binary.parent / "m.bin", binary.parent / "a.wav")


def _ggml_doc(tmp_path, monkeypatch, backend: str, log: str, sysinfo: str = SYSINFO,
              options=None):
    res = _build_result(tmp_path, "ggml", backend, options=options)
    probe = _probe(monkeypatch, res.binary, log + sysinfo + "\n")
    doc = canonical.loads(canonical.dumps(system_info.build_evidence(res, probe)))
    return doc, probe.result


@pytest.mark.parametrize("backend,log,sysinfo", [("cpu", CPU_LOG, SYSINFO),
                                                 ("metal", METAL_LOG, METAL_SYSINFO)])
def test_the_recorded_backend_comes_from_the_options_and_the_probe(tmp_path, monkeypatch,
                                                                   backend, log, sysinfo):
    doc, run = _ggml_doc(tmp_path, monkeypatch, backend, log, sysinfo)
    assert doc["ggml_backend"] == backend and doc["probe"]["backend"] == backend
    assert GgmlBuildEvidence.from_json(doc).to_json() == doc
    j = build_rules.judge_ggml_build(doc, run.stderr_text + "\n" + run.stdout_text)
    assert j.status is Status.PASS, j.detail
    assert f"ggml backend {backend!r} pinned" in j.detail
    # The same options with another launch log: the probe's record follows the log, and
    # the judge refuses a backend the build was not pinned to.
    other, other_log = (("metal", METAL_LOG) if backend == "cpu" else ("cpu", CPU_LOG))
    doc2, run2 = _ggml_doc(tmp_path, monkeypatch, backend, other_log, sysinfo)
    assert doc2["ggml_backend"] == backend and doc2["probe"]["backend"] == other
    j = build_rules.judge_ggml_build(doc2, run2.stderr_text)
    assert j.status is Status.FAIL
    assert f"built for ggml backend {backend!r}, but the probe chose {other!r}" in j.detail


@pytest.mark.parametrize("log,sysinfo,needle", [
    (METAL_LOG, SYSINFO, "but the probe chose 'metal'"),
    (CPU_LOG + BLAS_LINE, SYSINFO, "but the probe chose 'cpu+BLAS'"),
    ("whisper_backend_init_gpu: using Vulkan0 backend\n", SYSINFO, "chose 'Vulkan0'"),
    ("", SYSINFO, "chose 'none' (no backend line"),
    (CPU_LOG, METAL_SYSINFO, "system_info lists the Metal backend (MTL) on a 'cpu' build"),
    (CPU_LOG, SYSINFO.replace("REPACK = 1", "ACCELERATE = 1"), "'ACCELERATE = 1'"),
])
def test_a_cpu_build_whose_probe_reports_a_gpu_or_accel_fails(tmp_path, monkeypatch, log,
                                                             sysinfo, needle):
    doc, run = _ggml_doc(tmp_path, monkeypatch, "cpu", log, sysinfo)
    j = build_rules.judge_ggml_build(doc, run.stderr_text)
    assert j.status is Status.FAIL and needle in j.detail, j.detail


def test_a_metal_build_must_list_metal_and_a_record_must_match_its_log(tmp_path, monkeypatch):
    doc, run = _ggml_doc(tmp_path, monkeypatch, "metal", METAL_LOG, SYSINFO)
    j = build_rules.judge_ggml_build(doc, run.stderr_text)
    assert "system_info lacks the Metal backend (MTL) on a 'metal' build" in j.detail
    doc, run = _ggml_doc(tmp_path, monkeypatch, "cpu", CPU_LOG)
    for path, value, needle in [
            (("probe", "backend"), "metal", "record says it chose backend 'metal', its log"),
            (("ggml_backend",), "metal", "CMake options ['GGML_METAL', "
                                         "'GGML_METAL_EMBED_LIBRARY'] do not pin"),
            (("ggml_backend",), "cuda", "ggml_backend 'cuda' is not one of"),
            (("options", "GGML_BLAS"), "ON", "do not pin ggml backend 'cpu'")]:
        forged = canonical.loads(canonical.dumps(doc))
        target = forged
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
        j = build_rules.judge_ggml_build(forged, run.stderr_text)
        assert j.status is Status.FAIL and needle in j.detail, (path, j.detail)


def test_evidence_from_before_the_pins_is_not_recorded_and_still_passes(tmp_path,
                                                                        monkeypatch):
    pins = build_options.backend_pin_names()
    legacy = {k: v for k, v in build_options.effective_options("ggml", {}).items()
              if k not in pins}
    doc, run = _ggml_doc(tmp_path, monkeypatch, "cpu", "", options=legacy)
    doc["probe"].pop("backend")
    assert "ggml_backend" not in doc
    parsed = GgmlBuildEvidence.from_json(doc)
    assert parsed.ggml_backend is None and parsed.probe.backend is None
    assert parsed.to_json() == doc
    j = build_rules.judge_ggml_build(doc, run.stderr_text)
    assert j.status is Status.PASS, j.detail
    assert "ggml backend not recorded (a build from before backends were pinned)" in j.detail
    # Deleting the record from new evidence does not make it old: its options still pin.
    doc, run = _ggml_doc(tmp_path, monkeypatch, "cpu", CPU_LOG)
    for drop in (("ggml_backend",), ("ggml_backend", "probe.backend")):
        forged = canonical.loads(canonical.dumps(doc))
        forged.pop("ggml_backend")
        if "probe.backend" in drop:
            forged["probe"].pop("backend")
        j = build_rules.judge_ggml_build(forged, run.stderr_text)
        assert j.status is Status.FAIL and "no ggml_backend recorded, yet the options" in j.detail


# ----------------------------------------------------------------------------- identities

def _view(tmp_path, docs: dict, blobs: dict, ids: dict) -> EvidenceView:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    refs = [EvidenceRef(n, f"{n}.json", canonical.write_json(run_dir / f"{n}.json", d))
            for n, d in docs.items()]
    refs += [EvidenceRef(n, f"{n}.txt", canonical.atomic_write_bytes(run_dir / f"{n}.txt", b))
             for n, b in blobs.items()]
    return EvidenceView(run_dir, refs, ids)


def test_build_ggml_binds_the_backend_it_records(tmp_path, monkeypatch):
    doc, run = _ggml_doc(tmp_path, monkeypatch, "cpu", CPU_LOG)
    blobs = {"probe_stderr": run.stderr, "probe_stdout": run.stdout}
    sha = {identities.BINARY_GGML: doc["sha256"]}
    for ids, status in [({**sha, identities.BINARY_GGML_BACKEND: "cpu"}, Status.PASS),
                        ({**sha, identities.BINARY_GGML_BACKEND: "metal"}, Status.FAIL),
                        (sha, Status.FAIL)]:
        j = RULES["build.ggml"](_view(tmp_path, {"build": doc}, blobs, ids))
        assert j.status is status, (ids, j.detail)
        if status is Status.FAIL:
            assert f"identity {identities.BINARY_GGML_BACKEND} is" in j.detail


class _Capture:
    """Stands in for the StageContext ``write_coreml_evidence`` writes through."""

    def __init__(self):
        self.docs: dict = {}

    def write_json(self, name, doc):
        self.docs[name] = canonical.loads(canonical.dumps(doc))
        return name

    def write_bytes(self, name, data, filename):
        self.docs[name] = data
        return name


def _coreml(tmp_path, backend: str, bench_log: str, ggml_backend: str | None):
    from verifylib.stages import build as stage_build
    cli = _build_result(tmp_path, "coreml", backend, key=CML_KEY)
    bench = BenchBuild(binary=tmp_path / "bench" / "whisper-bench", sha256="8" * 64,
                             key="9" * 64, cli_key=CML_KEY, options=dict(cli.options),
                             cached=True, seconds=1.5)
    probe = _result([str(bench.binary), "-m", "m.bin"],
                    SYSINFO.replace("COREML = 0", "COREML = 1") + "\n" + bench_log, rc=3)
    ctx = _Capture()
    _, ids = stage_build.write_coreml_evidence(ctx, cli, bench, probe, patch_after_problems=[],
                                               ggml_key=KEY, ggml_backend=ggml_backend)
    blobs = {"bench_stderr": ctx.docs["bench_stderr"], "bench_stdout": ctx.docs["bench_stdout"]}
    return ctx.docs["coreml_build"], blobs, ids


def test_the_core_ml_build_pins_the_hybrid_decoder_to_the_ggml_legs_backend(tmp_path):
    doc, blobs, ids = _coreml(tmp_path, "cpu", CPU_LOG, "cpu")
    assert doc["ggml_backend"] == "cpu" and doc["bench"]["backend"] == "cpu"
    assert CoremlBuildEvidence.from_json(doc).to_json() == doc
    assert ids == {identities.BINARY_COREML: "1" * 64, identities.BINARY_COREML_BACKEND: "cpu",
                   identities.BINARY_GGML_BACKEND: "cpu"}
    j = RULES["build.coreml"](_view(tmp_path, {"coreml_build": doc}, blobs, ids))
    assert j.status is Status.PASS, j.detail
    assert "ggml backend 'cpu' pinned, whisper-bench logged" in j.detail
    # A GGML leg on another backend: the hybrid decoder would not be the reference's.
    j = RULES["build.coreml"](_view(tmp_path, {"coreml_build": doc}, blobs,
                                    {**ids, identities.BINARY_GGML_BACKEND: "metal"}))
    assert j.status is Status.FAIL and "(the hybrid decoder's) is not the GGML build's" in j.detail
    # The bench chose a GPU although the build is pinned to the CPU.
    doc, blobs, ids = _coreml(tmp_path, "cpu", METAL_LOG, "cpu")
    j = RULES["build.coreml"](_view(tmp_path, {"coreml_build": doc}, blobs, ids))
    assert j.status is Status.FAIL and "but whisper-bench chose 'metal'" in j.detail
    # Without a GGML build the gate binds no GGML backend, and judges its own.
    doc, blobs, ids = _coreml(tmp_path, "cpu", CPU_LOG, None)
    assert identities.BINARY_GGML_BACKEND not in ids
    assert RULES["build.coreml"](_view(tmp_path, {"coreml_build": doc}, blobs, ids)).status \
        is Status.PASS


# ----------------------------------------------------------------------------- stage and report

def test_the_stage_takes_the_parameter_and_old_parameters_mean_cpu():
    from verifylib import params
    from verifylib.stages import build as stage_build
    p = params.load(params.DEFAULT_PARAMETERS)
    assert p.runtime.ggml_backend == "cpu" == stage_build.ggml_backend(p)
    old = params.Params(p.name, {**p.data, "runtime": {k: v for k, v in p["runtime"].items()
                                                       if k != "ggml_backend"}},
                        p.origin, p.base_dir)
    assert old.runtime.ggml_backend is None
    assert stage_build.ggml_backend(old) == build_options.DEFAULT_GGML_BACKEND == "cpu"


def test_the_facts_table_shows_each_builds_backend():
    from verifylib.evidence.build.facts import (CoremlBuildFacts, GgmlBuildFacts,
                                                  SidecarBuildFacts)
    rows = dict(GgmlBuildFacts("b", "1" * 64, True, 0.1, SYSINFO, {}, "cpu", "cpu").rows())
    assert rows["ggml backend"] == "cpu (pinned; the probe chose cpu)"
    rows = dict(GgmlBuildFacts("b", "1" * 64, True, 0.1, SYSINFO, {}).rows())
    assert rows["ggml backend"] == "not recorded (a run from before ggml backends were pinned)"
    rows = dict(CoremlBuildFacts("b", "1" * 64, 0.1, SYSINFO, "metal", "metal").rows())
    assert rows["Core ML ggml backend (hybrid decoder)"] == \
        "metal (pinned; whisper-bench chose metal)"
    side = SidecarBuildFacts.from_record({"built": True, "binary": "b", "sha256": "e" * 64,
                                          "cached": True, "seconds": 1.0,
                                          "ggml_backend": "cpu"})
    assert side.ggml_backend == "cpu"


def test_no_child_is_handed_a_backend_library_path(monkeypatch):
    # ggml_backend_load_all() would load a GPU backend from this path into a cpu build.
    from verifylib.runtime.runner import sanitized_env
    monkeypatch.setenv(contracts.BACKEND_PATH_VARIABLE, "/tmp/libggml-metal.so")
    monkeypatch.setenv("VERIFYLIB_SOME_SETTING", "kept")
    env = sanitized_env()
    assert contracts.BACKEND_PATH_VARIABLE not in env
    assert env["VERIFYLIB_SOME_SETTING"] == "kept"
