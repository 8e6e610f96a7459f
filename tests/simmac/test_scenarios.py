"""The fault matrix: one named scenario per row, each a physical audit or its smallest stage
subset, under the simulated Mac (tests/simmac) or plain Linux, with what it must give.

How a row runs: the stages before the row's first stage come from a shared prefix (a run
directory the default simulated Mac produced, copied); the row's fault is applied to the
copy; the row's stages run in this process under the row's simulated Mac (or none). The
expected verdict is the verdict over the stages the row ran (required gates only: every one
PASS gives ADMISSIBLE, any FAIL or ERROR gives REJECTED, else INCOMPLETE). The one full
audit, through papermill and the CLI's own runner, is :func:`test_admissible_audit_end_to_end`.

``python tests/simmac/test_scenarios.py --markdown`` prints the matrix (docs/scenarios.md is that
output; a test keeps it current).
"""

from __future__ import annotations

import importlib
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from tests.helpers.published_runs import run_params
from tests.helpers.same_numbers import reusing_numbers

if not __package__:  # run as a script for --markdown: the repository root holds `tests`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers import ROOT  # noqa: E402
from tests.simmac import Scenario, SimulatedMac  # noqa: E402
from verifylib import canonical, params
from verifylib.evidence import gates  # noqa: E402

STAGES = gates.STAGES
LINUX = None


@dataclass(frozen=True)
class Row:
    """One scenario of the matrix.

    Attributes
    ----------
    name : str
        Unique id (the pytest id).
    covers : str
        What it exercises (a docs/runtime-contract.md section or the fault's name).
    stages : tuple of str
        The stages the row runs, in order (the earlier ones come from the shared prefix).
    gate, status, reason : str
        The gate to look at, its expected status, and a substring of its reason.
    verdict : str
        The verdict over the stages the row ran.
    sim : Scenario or None
        The simulated Mac's behaviour, or None for plain Linux.
    fault : callable or None
        ``fault(run_dir)`` applied to the copied prefix before the stages run.
    edit : callable or None
        ``edit(data, tmp)`` changes the parameter tree; the row then starts from an empty
        run directory with its own parameters (its stages must begin with 01_build).
    check : callable or None
        ``check(run_dir)``: further assertions once the stages have run.
    """

    name: str
    covers: str
    stages: tuple
    gate: str
    status: str
    reason: str
    verdict: str
    sim: Scenario | None = field(default_factory=Scenario)
    fault: Callable | None = None
    edit: Callable | None = None
    check: Callable | None = None


def _rm_mlmodelc(run_dir: Path) -> None:
    shutil.rmtree(run_dir / "fp32" / "ggml-model-encoder.mlmodelc")


def _unreadable_mlmodelc(run_dir: Path) -> None:
    (run_dir / "fp32" / "ggml-model-encoder.mlmodelc" / "coremldata.bin").unlink()


def _misnamed_mlmodelc(run_dir: Path) -> None:
    d = run_dir / "fp32" / "ggml-model-encoder.mlmodelc"
    d.rename(d.with_name("ggml-model.mlmodelc"))


def _source_copy(tmp: Path, change: Callable[[Path], None]) -> str:
    """A copy of the pinned source folder with one change (a folder source)."""
    from verifylib.resources import cache_dir
    from verifylib.whispercpp.source import load_pins
    pin = load_pins()["v1.8.5"]
    dest = tmp / "source"
    shutil.copytree(cache_dir() / "sources" / pin.tree, dest, symlinks=True)
    change(dest)
    return str(dest)


def _folder_source(change):
    def edit(data: dict, tmp: Path) -> None:
        data["runtime"]["source"] = {"kind": "folder", "path": _source_copy(tmp, change)}
    return edit


def _append(rel: str, text: str):
    def change(root: Path) -> None:
        with open(root / rel, "a") as fh:
            fh.write(text)
    return change


def _hostile_fixture_text(data: dict, tmp: Path) -> None:
    for f in data["fixtures"]:
        if f["id"] == "weather":
            f["text"] = "<script>alert('x')</script> " + f.get("text", "")


def _credential(run_dir: Path) -> None:
    import os
    os.environ["HF_TOKEN"] = "hf_verifylib_scenario_secret"


def _no_credential_anywhere(run_dir: Path) -> None:
    for f in run_dir.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".txt", ".jsonl"):
            assert b"hf_verifylib_scenario_secret" not in f.read_bytes(), f


def _tampered_sidecar_is_named(run_dir: Path) -> None:
    from verifylib.evidence.receipt import build_receipt, verify
    build_receipt(run_dir)
    side = run_dir / "evidence" / "03_canary" / "positive.json"
    side.write_bytes(side.read_bytes().replace(b'"exit 0', b'"exit 1', 1) + b" ")
    res = verify(run_dir, allow_simulated=True)
    assert not res.ok and any("positive.json" in x for x in res.problems), res.problems


def _escaped_in_view(run_dir: Path) -> None:
    data = canonical.read_json(run_dir / "evidence" / "05_wer" / "wer.json")
    clip = next(c for c in data["clips"] if c["id"] == "weather")
    # The evidence keeps the normalized text (markup reduced to words); the view shows the
    # raw text, escaped.
    assert clip["reference"].startswith("alert") and "<" not in clip["reference"]
    raw = "<script>alert('x')</script> light rain"
    from verifylib.evidence.wer import result as wer_results
    from verifylib.views import render
    from verifylib.views.wer import RATE_OF, clip_alignments
    corpus = wer_results.CorpusWer(0.0, 0.0, 0.0)
    clip = wer_results.ClipResult(
        id="weather", public=True, words=1, counts={}, reference=raw,
        source="", ggml="", hybrid=None, wer_source=0.0, wer_ggml=0.0, wer_hybrid=None,
        wer_pairwise=0.0, language="en", from_ggml=raw, wer_from_ggml=0.0,
        wer_conversion=0.0, wer_implementation=1.0,
        normalized={"reference": raw, "source": raw, "from_ggml": raw, "ggml": "light"})
    page = render("wer_transcripts.html.j2", style=False, clips=[clip], corpus=corpus,
                  corpus_by_unit={"words": corpus}, rate_of=RATE_OF, has_hybrid=False,
                  no_worse=1)
    assert "<script>" not in page and "&lt;script&gt;" in page
    # The aligned differences show transcripts word by word: escaped too.
    page = render("wer_decomposition.html.j2", style=False, clips=[clip], rate_of=RATE_OF,
                  alignments={"weather": clip_alignments(clip)})
    assert "<script>" not in page and "&lt;script&gt;" in page


CANARY = ("03_canary",)
NEG, POS = "canary.coreml_negative", "canary.coreml_positive"

ROWS = [
    # ------------------------------------------------------------ the supported runtime
    Row("coreml-canaries-pass", "§2.3 four load conditions; §2.4 fail-closed negative control",
        CANARY, POS, "PASS", "Core ML model loaded", "ADMISSIBLE"),
    Row("negative-control-fails-closed", "§2.4 the negative control exits 3 with both lines",
        CANARY, NEG, "PASS", "exit 3", "ADMISSIBLE"),
    # ------------------------------------------------------------ §9 and §10: the runtime
    Row("stale-binary", "§10 a binary built without Core ML (COREML = 0)", CANARY, NEG, "FAIL",
        "", "REJECTED", Scenario(coreml="stale")),
    Row("fallback-on", "§9 WHISPER_COREML_ALLOW_FALLBACK on: a failed load goes on", CANARY,
        NEG, "FAIL", "", "REJECTED", Scenario(coreml="fallback")),
    Row("sigabrt-after-load", "§9 SIGABRT", CANARY, POS, "FAIL", "SIGABRT", "REJECTED",
        Scenario(coreml="abort")),
    Row("sigsegv-after-load", "§9 SIGSEGV", CANARY, POS, "FAIL", "SIGSEGV", "REJECTED",
        Scenario(coreml="segv")),
    Row("exit-134", "§9 exit status 134 (an abort reported shell-style)", CANARY, POS, "FAIL",
        "134", "REJECTED", Scenario(coreml="exit134")),
    Row("exit-3-without-marker", "§2.4 exit 3 without the Core ML failure line", CANARY, NEG,
        "FAIL", "", "REJECTED", Scenario(coreml="exit3-no-marker")),
    Row("exit-1", "§9 exit 1", CANARY, POS, "FAIL", "exit 1", "REJECTED",
        Scenario(coreml="exit1")),
    Row("exit-4", "§9 exit 4", CANARY, POS, "FAIL", "exit 4", "REJECTED",
        Scenario(coreml="exit4")),
    Row("exit-10", "§9 exit 10", CANARY, POS, "FAIL", "exit 10", "REJECTED",
        Scenario(coreml="exit10")),
    Row("nil-prediction", "§9 nil prediction: an empty hybrid transcript", ("05_wer",),
        "wer.hybrid", "FAIL", "empty", "REJECTED", Scenario(coreml="nil")),
    Row("crash-in-warm-up", "§6.3 the warm-up crashes; the measured run would pass", CANARY,
        POS, "FAIL", "warm-up", "REJECTED", Scenario(coreml="abort-first")),
    Row("flaky-coreml-canary", "§6.3 the warm-up loads, the measured run does not", CANARY,
        POS, "FAIL", "", "REJECTED", Scenario(coreml="flaky")),
    Row("slow-first-run", "§6.3 the first run compiles for the device: the warm-up absorbs it",
        CANARY, POS, "PASS", "Core ML model loaded", "ADMISSIBLE", Scenario(coreml="slow-first")),
    Row("hung-runtime-times-out", "§6.3 a run that never ends is killed at its timeout",
        CANARY, NEG, "FAIL", "timed out", "REJECTED", Scenario(coreml="hang")),
    Row("log-on-stdout", "§10 the markers are looked for on stderr, where the log goes",
        CANARY, POS, "FAIL", "", "REJECTED", Scenario(coreml="stdout-log")),
    Row("stale-log-names-another-model", "§10 a load line for another model's .mlmodelc",
        CANARY, POS, "FAIL", "", "REJECTED", Scenario(coreml="stale-log")),
    Row("negative-control-exit-1", "§10 a nonzero exit that is not 3 is no negative control",
        CANARY, NEG, "FAIL", "", "REJECTED", Scenario(coreml="exit1-on-failure")),
    Row("missing-mlmodelc", "§4.1 no .mlmodelc where -m derives it", CANARY, POS, "FAIL", "",
        "REJECTED", fault=_rm_mlmodelc),
    Row("unreadable-mlmodelc", "§4.1 an .mlmodelc folder that does not load", CANARY, POS,
        "FAIL", "", "REJECTED", fault=_unreadable_mlmodelc),
    Row("misnamed-mlmodelc", "§4.1 the .mlmodelc is not named after the model", CANARY, POS,
        "FAIL", "", "REJECTED", fault=_misnamed_mlmodelc),
    # ------------------------------------------------------------ compile (export.compile)
    Row("coremlc-only-in-clt", "§4.3 Command Line Tools have no coremlc", ("02_export",),
        "export.compile", "NOT_RUN", "full Xcode", "INCOMPLETE", Scenario(coremlc="clt")),
    Row("coremlc-fails", "§4.3 the compiler fails", ("02_export",), "export.compile", "ERROR",
        "coremlc failed", "REJECTED", Scenario(coremlc="fail")),
    Row("coremlc-misnames-output", "§4.3 coremlc's output is not named after its input",
        ("02_export",), "export.compile", "ERROR", ".mlmodelc", "REJECTED",
        Scenario(coremlc="misname")),
    Row("other-os-mlmodelc", "§4.3 an .mlmodelc compiled for another platform",
        ("02_export", "03_canary"), POS, "FAIL", "", "REJECTED", Scenario(coremlc="other-os")),
    # ------------------------------------------------------------ runtime parity
    Row("mlmodelc-changed-after-canary", "§10 gate the exact bytes that ship: the .mlmodelc "
        "changes after the canaries", ("04_parity",), "parity.runtime", "FAIL", "", "REJECTED",
        fault=lambda d: (d / "fp32/ggml-model-encoder.mlmodelc/metadata.json").write_text("{}")),
    Row("runtime-parity-pass", "§7.1 CompiledMLModel under ComputeUnit.ALL", ("04_parity",),
        "parity.runtime", "PASS", "", "ADMISSIBLE"),
    Row("fp16-io", "§5 the output comes back float16", ("04_parity",), "parity.runtime",
        "ERROR", "float16", "REJECTED", Scenario(compiled="fp16")),
    Row("wrong-feature-names", "§5 the output feature is not named 'output'", ("04_parity",),
        "parity.runtime", "ERROR", "output", "REJECTED", Scenario(compiled="renamed")),
    Row("oversized-output", "§5 more frames than the contract", ("04_parity",),
        "parity.runtime", "ERROR", "shape", "REJECTED", Scenario(compiled="oversized")),
    Row("nil-runtime-prediction", "§7.1 the compiled model predicts nothing", ("04_parity",),
        "parity.runtime", "ERROR", "output", "REJECTED", Scenario(compiled="nil")),
    Row("compiled-model-does-not-load", "§7.1 CompiledMLModel cannot load the folder",
        ("04_parity",), "parity.runtime", "ERROR", "cannot load", "REJECTED",
        Scenario(compiled="load-error")),
    # ------------------------------------------------------------ hybrid WER
    Row("hybrid-wer-pass", "§8 hybrid transcripts within the policy", ("05_wer",),
        "wer.hybrid", "PASS", "", "ADMISSIBLE"),
    Row("nonsense-hybrid-on-one-clip", "§8 one clip's hybrid transcript is nonsense",
        ("05_wer",), "wer.hybrid", "FAIL", "", "REJECTED",
        Scenario(coreml="nonsense", clip="weather")),
    # ------------------------------------------------------------ placement
    Row("placement-plan-pass", "§7.2 MLComputePlan on macOS 14.4+", ("06_placement",),
        "placement.plan", "PASS", "cost share", "ADMISSIBLE"),
    Row("plan-without-costs", "§7.2 a plan that costs nothing", ("06_placement",),
        "placement.plan", "FAIL", "no cost", "REJECTED", Scenario(plan="no-cost")),
    Row("plan-costs-do-not-sum", "§7.2 cost shares that do not sum to 1", ("06_placement",),
        "placement.plan", "FAIL", "sum", "REJECTED", Scenario(plan="unbalanced")),
    Row("plan-compute-op-without-device", "§7.2 a costed compute operation with no device "
        "(a cast may have none)", ("06_placement",), "placement.plan", "FAIL",
        "without a preferred device", "REJECTED", Scenario(plan="no-device")),
    Row("macos-14-0", "§7.2 MLComputePlan needs macOS 14.4", ("06_placement",),
        "placement.plan", "NOT_RUN", "14.4", "INCOMPLETE", Scenario(macos=(14, 0))),
    # ------------------------------------------------------------ plain Linux
    Row("linux-coreml-gates-not-run", "§1 off macOS the Core ML gates say why", CANARY, POS,
        "NOT_RUN", "needs macOS", "INCOMPLETE", LINUX),
    Row("credential-in-environment", "§3 no credential reaches a child or the evidence",
        CANARY, "canary.lifecycle_ab", "PASS", "", "INCOMPLETE", LINUX, fault=_credential,
        check=_no_credential_anywhere),
    Row("tampered-sidecar", "verify names a sidecar changed after the receipt", CANARY, POS,
        "PASS", "", "ADMISSIBLE", check=_tampered_sidecar_is_named),
    Row("dirty-checkout", "§3 a tracked file changed in the source folder", ("01_build",),
        "build.source_identity", "FAIL", "tree id", "REJECTED", LINUX,
        edit=_folder_source(_append("src/whisper.cpp", "\n// local edit\n"))),
    Row("extra-untracked-file", "§3 an untracked file in the source folder", ("01_build",),
        "build.source_identity", "FAIL", "tree id", "REJECTED", LINUX,
        edit=_folder_source(_append("NOTES.txt", "scratch\n"))),
    Row("extra-ignored-file", "§3 a file .gitignore would hide (an object file)",
        ("01_build",), "build.source_identity", "FAIL", "tree id", "REJECTED", LINUX,
        edit=_folder_source(_append("src/stale.o", "not a real object\n"))),
    Row("tree-id-mismatch", "§3 a tracked file missing from the source folder",
        ("01_build",), "build.source_identity", "FAIL", "tree id", "REJECTED", LINUX,
        edit=_folder_source(lambda root: (root / "README.md").unlink())),
    Row("hostile-transcript-text", "reference text with markup stays text",
        ("01_build", "02_export", "05_wer"), "wer.ggml_vs_source", "PASS", "",
        "INCOMPLETE", LINUX, edit=_hostile_fixture_text, check=_escaped_in_view),
    Row("linux-placement-not-run", "§1 off macOS no compute plan", ("06_placement",),
        "placement.plan", "NOT_RUN", "needs macOS", "INCOMPLETE", LINUX),
]


# ---------------------------------------------------------------------------- machinery

# The runtime-parity rows change only what the compiled model does, the hybrid-WER rows only
# what the Core ML build prints: the reference side and the package's program (op by op,
# with its per-layer attribution), and the Hugging Face transcripts, are the same
# computation in each of them, on the same bytes. Each is computed physically by the first
# row that needs it and reused by the others for inputs of equal digests (about 45 s a
# parity row; tests/helpers/same_numbers.py). Whatever launches whisper-cli is never
# reused: the ledger must own it.


def _run_stages(p, run_dir: Path, stages, sim: Scenario | None, state: Path) -> None:
    mods = [importlib.import_module(f"verifylib.stages.{s.split('_', 1)[1]}") for s in stages]
    with reusing_numbers():
        if sim is None:
            for m in mods:
                m.run(p, run_dir)
            return
        with SimulatedMac(sim, state):
            for m in mods:
                m.run(p, run_dir)


@pytest.fixture(scope="session")
def scenario_prefixes(published, v185_ggml_build):
    """Run directories after 0, 1, … 5 stages of the default simulated Mac: the session's
    published run, copied after each of its stages (tests.helpers.published_runs)."""
    return published.params, published.prefixes


def _verdict(run_dir: Path, stages) -> str:
    statuses = []
    for s in stages:
        data = canonical.read_json(run_dir / "gates" / f"{s}.json")
        statuses += [r["status"] for r in data["gates"] if gates.gate(r["id"]).required]
    if any(s in ("FAIL", "ERROR") for s in statuses):
        return "REJECTED"
    return "ADMISSIBLE" if all(s == "PASS" for s in statuses) else "INCOMPLETE"


@pytest.mark.physical
@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_scenario(row: Row, scenario_prefixes, tmp_path):
    p, prefixes = scenario_prefixes
    first = STAGES.index(row.stages[0])
    run_dir = tmp_path / "run"
    if row.edit is not None:
        import yaml
        assert first == 0, "a row with its own parameters starts from stage 01"
        data = yaml.safe_load(yaml.safe_dump(p.data))
        row.edit(data, tmp_path)
        p = params.validate(data, "scenario parameters", params.PARAMETERS_DIR)
    else:
        shutil.copytree(prefixes[first], run_dir, symlinks=True)
    if row.fault:
        row.fault(run_dir)
    try:
        _run_stages(p, run_dir, row.stages, row.sim, tmp_path / "state")
    finally:
        import os
        os.environ.pop("HF_TOKEN", None)  # set by the credential row's fault
    stage_of = gates.gate(row.gate).stage
    data = canonical.read_json(run_dir / "gates" / f"{stage_of}.json")
    rec = next(r for r in data["gates"] if r["id"] == row.gate)
    assert rec["status"] == row.status, (rec["status"], rec["reason"])
    assert row.reason in rec["reason"]["detail"], rec["reason"]
    assert _verdict(run_dir, row.stages) == row.verdict
    if row.check is not None:
        row.check(run_dir)


def test_the_matrix_has_forty_distinct_named_scenarios():
    names = [r.name for r in ROWS] + [a.name for a in ARGV_ROWS] + [
        "admissible-audit", "missing-audio-exit-2", "patch-drift", "interrupted-build",
        "cmake-missing", "xcode-license", "clt-selected", "mac-recorded-signal-verified-on-linux",
        "long-tmpdir", "case-collision"]
    assert len(names) == len(set(names))
    assert len(names) >= 40


# ---------------------------------------------------------------------------- argv guards

@dataclass(frozen=True)
class ArgvRow:
    """A command line the runtime contract refuses before anything is launched."""

    name: str
    covers: str
    extra: tuple
    reason: str


ARGV_ROWS = [
    ArgvRow("no-prints-flag", "§9 -np silences every line a gate asserts", ("-np",), "-np"),
    ArgvRow("audio-ctx-forced", "§5 -ac changes the mel width", ("-ac", "750"), "-ac"),
    ArgvRow("two-processors", "§9 -p 2 makes two Core ML loads", ("-p", "2"), "-p"),
]


@pytest.mark.parametrize("row", ARGV_ROWS, ids=[r.name for r in ARGV_ROWS])
def test_argv_guard_refuses_before_launch(row, tmp_path):
    from verifylib.errors import ContractBroken
    from verifylib.runtime import contracts, ledger, runner
    ledger.bind(tmp_path)  # a refused argv must leave no launch behind
    argv = contracts.coreml_argv("/nonexistent/whisper-cli", "m.bin", "a.wav", "en")
    with pytest.raises(ContractBroken, match=row.reason):
        runner.run_whisper_cli([*argv, *row.extra], timeout=5)
    assert not (tmp_path / "ledger.jsonl").exists() or \
        (tmp_path / "ledger.jsonl").read_text() == ""


@pytest.mark.physical
def test_missing_audio_exit_2(scenario_prefixes, tmp_path):
    """§6.2 whisper-cli exits 2 when the audio file does not exist: not a positive run."""
    from verifylib.runtime import contracts, runner
    _, prefixes = scenario_prefixes
    ev = canonical.read_json(prefixes[1] / "evidence" / "01_build" / "coreml_build.json")
    model = prefixes[2] / "fp32" / "ggml-model.bin"
    with SimulatedMac(Scenario(), tmp_path / "state"):
        res = runner.run_whisper_cli(contracts.coreml_argv(
            ev["binary"], str(model), tmp_path / "missing.wav", "en"), timeout=30)
    assert res.returncode == 2, res.stderr_text[-500:]
    c = contracts.classify_positive(runner.run_record(res), res.stderr, res.stdout)
    assert not c.ok and "exit 2" in c.detail


@pytest.mark.physical
def test_patch_drift(scenario_prefixes, tmp_path, monkeypatch):
    """§6.4 the patch file drifted from what the manifest declares: build.patch_exact FAILs."""
    from verifylib import resources
    from verifylib.stages import build as stage
    p, _ = scenario_prefixes
    patches = tmp_path / "patches"
    shutil.copytree(resources.patches_dir(), patches)
    patch = next(patches.glob("*v1.8.5.patch"))
    text = patch.read_text()
    assert "whisper_batch batch = {};" in text
    patch.write_text(text.replace("whisper_batch batch = {};", "whisper_batch batch = {}; // drift"))
    from verifylib.whispercpp.source import pins
    monkeypatch.setattr(pins, "manifest_path", lambda: patches / "manifest.yaml")
    rep = stage.run(p, tmp_path / "run")
    st = {r.id: r for r in rep.records}
    assert st["build.patch_exact"].status.value == "FAIL", st["build.patch_exact"].reason
    assert st["build.ggml"].status.value == "NOT_RUN"


@pytest.mark.physical
def test_interrupted_build(scenario_prefixes, tmp_path):
    """§3 an interrupted publication leaves a staging folder in the build cache: the next
    audit neither uses nor trips over it, and takes the published build."""
    from verifylib.resources import cache_dir
    from verifylib.stages import build as stage
    p, _ = scenario_prefixes
    stray = cache_dir() / "builds" / f".staging-interrupted-{tmp_path.name}"
    stray.mkdir(parents=True)
    try:
        (stray / "whisper-cli").write_bytes(b"half a binary")
        rep = stage.run(p, tmp_path / "run")
        st = {r.id: r for r in rep.records}
        assert st["build.ggml"].status.value == "PASS", st["build.ggml"].reason
        ev = canonical.read_json(tmp_path / "run" / "evidence" / "01_build" / "build.json")
        assert ".staging" not in ev["binary"]
    finally:
        shutil.rmtree(stray, ignore_errors=True)


def _path_without(tmp: Path, *gone: str) -> str:
    """A PATH folder holding links to the build tools (and Python) except ``gone``."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("git", "cc", "c++", "cmake"):
        found = shutil.which(name)
        if name not in gone and found:
            (bin_dir / name).symlink_to(found)
    return str(bin_dir)


def test_cmake_missing(tmp_path, monkeypatch, capsys):
    """No cmake anywhere (not on PATH, no PyPI cmake package): ``verifylib run`` refuses
    before any work, exit 2, naming ``pip install cmake``; no gate runs, nothing is left."""
    from verifylib.cli.main import main
    monkeypatch.setenv("PATH", _path_without(tmp_path, "cmake"))
    monkeypatch.setitem(sys.modules, "cmake", None)  # the PyPI package: not installed
    reports = tmp_path / "reports"
    assert main(["run", "--reports", str(reports), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "cmake" in err and "pip install cmake" in err, err
    assert "missing build tool: cmake (" in err, err  # only what is missing is named
    assert not reports.exists()


def _blocked_compile(p, run_dir: Path):
    """export.compile's NOT_RUN reason as stage 02 records it, and the run's host record."""
    from verifylib.stages.context import StageContext
    reason = StageContext("02_export", p, run_dir).blocked_reason("export.compile")
    return reason, canonical.read_json(run_dir / "run.json")["host"]


def _doctor_row(gate_id: str):
    from verifylib.cli.doctor import doctor_report
    report = doctor_report()
    assert report.exit_code == 0  # the build tools are there: the audit itself can run
    return next(g for g in report.gates if g.id == gate_id)


def test_xcode_license(tmp_path):
    """The Xcode license is not accepted (every xcrun call exits 69): full Xcode is missing
    for that reason, and the stage, the host record and doctor name
    ``sudo xcodebuild -license accept``."""
    from verifylib.evidence.receipt import host_capabilities
    p = run_params()
    with SimulatedMac(Scenario(coremlc="license"), tmp_path / "state"):
        reason, host = _blocked_compile(p, tmp_path / "run")
        row = _doctor_row("export.compile")
    assert reason.kind == "platform" and "license is not accepted" in reason.detail
    assert "sudo xcodebuild -license accept" in reason.detail
    assert host["xcode"]["license"] == "not-accepted" and host["coremlc"] is None
    assert host["capabilities"] == host_capabilities(host)  # verify re-derives the same
    assert row.status == "NOT_RUN(platform)" and row.fix == "sudo xcodebuild -license accept"


def test_clt_selected(tmp_path):
    """Xcode is installed but xcode-select points at the Command Line Tools: the reason
    says so and names ``sudo xcode-select -s <that Xcode>/Contents/Developer``."""
    state = tmp_path / "state"
    p = run_params()
    with SimulatedMac(Scenario(coremlc="clt-selected"), state):
        reason, host = _blocked_compile(p, tmp_path / "run")
        row = _doctor_row("export.compile")
    select = f"sudo xcode-select -s {state / 'Xcode.app'}/Contents/Developer"
    assert reason.kind == "platform" and "Command Line Tools" in reason.detail
    assert select in reason.detail, reason.detail
    assert host["xcode"]["state"] == "clt-selected"
    assert host["xcode"]["installed"] == [str(state / "Xcode.app")]
    assert row.fix == select


def test_mac_recorded_signal_verified_on_linux(tmp_path):
    """§6.2 a Mac's positive run killed by signal 10 (SIGBUS on macOS, SIGUSR1 on Linux),
    re-judged on this Linux host by the project's own rule from stored files: FAIL naming
    SIGBUS, and the record itself is sound (no "recorded signal disagrees"), because it
    names the table it was decoded with. The same record without that name reads as Linux's
    and is refused."""
    import hashlib

    from verifylib.evidence.records import EvidenceRef, EvidenceView
    from verifylib.evidence import registry as rules
    from verifylib.runtime import contracts
    model_arg = "/Users/me/run/fp32/ggml-model.bin"
    encoder = "/Users/me/run/fp32/ggml-model-encoder.mlmodelc"
    argv = ["/Users/me/cache/whisper-cli", "-m", model_arg, "-f", "/Users/me/jfk.wav", "-t",
            "4", "-l", "en", "-p", "1"]
    err = (f"whisper_init_state: loading Core ML model from '{encoder}'\n"
           "whisper_init_state: Core ML model loaded\n"
           "system_info: n_threads = 4 / 8 | WHISPER : COREML = 1 | OPENVINO = 0 |\n").encode()
    out = b" And so my fellow Americans\n"

    def record(rc, sig, stdout):
        return {"argv": argv, "returncode": rc, "signal": sig, "signal_table": "Darwin",
                "timed_out": False, "wall_s": 1.5, "encode_time_ms": None, "encode_runs": None,
                "stdout_sha256": hashlib.sha256(stdout).hexdigest(),
                "stderr_sha256": hashlib.sha256(err).hexdigest(),
                "stdout_bytes": len(stdout), "stderr_bytes": len(err)}
    measured = record(-10, "SIGBUS", b"")
    doc = {"schema": "verifylib-coreml-positive/1", "binary": argv[0],
           "binary_sha256": "1" * 64, "model_arg": model_arg,
           "mlmodelc": {"path": encoder, "tree_digest_before": "3" * 64,
                        "tree_digest_after": "3" * 64},
           "timeouts_s": {"warmup": 900.0, "measured": 30}, "warmup": record(0, None, out),
           "measured": measured, "outcome": "SIGBUS", "transcript_chars": 0}
    files = {"positive": canonical.dumps(doc), "measured_stderr": err, "measured_stdout": b"",
             "warmup_stderr": err, "warmup_stdout": out}
    refs = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        refs.append(EvidenceRef(name, name, hashlib.sha256(data).hexdigest()))
    j = rules.judge("canary.coreml_positive", EvidenceView(tmp_path, refs))
    assert j.status is gates.Status.FAIL
    assert j.detail == "killed by SIGBUS (return code -10)"
    assert contracts.record_problems(measured, err, b"") == []
    legacy = {k: v for k, v in measured.items() if k != "signal_table"}
    assert contracts.record_problems(legacy, err, b"") == [
        "recorded signal 'SIGBUS' disagrees with return code -10 (SIGUSR1 in the Linux signal "
        "table)"]


def test_long_tmpdir(tmp_path, monkeypatch):
    """A 100-character ``$TMPDIR`` (macOS's own is ``/var/folders/…/T/``): a real stage kernel
    starts and answers, every IPC socket it binds within macOS's 103 bytes."""
    import os
    import stat
    import tempfile

    from jupyter_core.utils import run_sync

    from verifylib import resources
    from verifylib.batch import kernel
    long_tmp = tmp_path / ("t" * (100 - len(str(tmp_path)) - 1))
    long_tmp.mkdir()
    assert len(str(long_tmp)) == 100
    monkeypatch.setenv("TMPDIR", str(long_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    old_place = long_tmp / f"verifylib-kernels-{os.getuid()}"
    assert kernel.longest_socket_path(old_place) > 103
    folder = kernel.socket_folder(system="Darwin")
    km = kernel.start_kernel(str(resources.notebooks_dir()))
    try:
        info = km.get_connection_info()
        sockets = [f"{info['ip']}-{info[k]}" for k in
                   ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
        kc = km.client()
        kc.start_channels()
        try:
            run_sync(kc.wait_for_ready)(timeout=120)  # a reply over the IPC sockets
        finally:
            kc.stop_channels()
        assert all(stat.S_ISSOCK(os.lstat(s_).st_mode) for s_ in sockets), sockets
        assert all(Path(s_).parent == folder for s_ in sockets), sockets
        assert max(len(os.fsencode(s_)) for s_ in sockets) <= 103, sockets
    finally:
        kernel.stop_kernel(km)


def test_case_collision(tmp_path, capsys):
    """APFS is case-insensitive by default: fixtures ``A`` and ``a`` (evidence files are named
    by id) and models ``Tiny`` and ``tiny`` (``reports/<name>/``) are refused, exit 2,
    naming both spellings; nothing is written."""
    import yaml

    from verifylib.cli.main import main
    data = yaml.safe_load(params.DEFAULT_PARAMETERS.read_text())
    jfk = next(f for f in data["fixtures"] if f["id"] == "jfk")
    reports = tmp_path / "reports"
    fixtures = dict(data, name="fixtures", fixtures=[dict(jfk, id="A"), dict(jfk, id="a")])
    (tmp_path / "fixtures.yaml").write_text(yaml.safe_dump(fixtures))
    assert main(["run", str(tmp_path / "fixtures.yaml"), "--reports", str(reports)]) == 2
    err = capsys.readouterr().err
    assert "'a' and 'A' differ only in case" in err, err
    for name, folder in (("Tiny", tmp_path / "one"), ("tiny", tmp_path / "two")):
        folder.mkdir()
        (folder / "model.yaml").write_text(yaml.safe_dump(dict(data, name=name,
                                                               fixtures=[jfk])))
    assert main(["run", str(tmp_path / "one" / "model.yaml"), str(tmp_path / "two" / "model.yaml"),
                 "--reports", str(reports)]) == 2
    err = capsys.readouterr().err
    assert "('Tiny', 'tiny')" in err and "differ only in case" in err, err
    assert not reports.exists()


# ---------------------------------------------------------------------------- the full audit

@pytest.mark.physical
@pytest.mark.notebook
def test_admissible_audit_end_to_end(published):
    """The default audit on the simulated Mac: all six notebooks through papermill,
    ADMISSIBLE, refused by ``verify`` unless ``allow_simulated``.

    The session's published run is that audit (tests/helpers/published_runs.py), with the
    scenarios' parameters (three fixtures, two canary runs, the fp32 variant alone): what
    is under test is every notebook and gate reaching ADMISSIBLE on a Mac, not the fixture
    count, which the Linux default audit runs at full size (this test took 13 min with all
    ten fixtures, twenty canary runs and the fp16 variant).
    """
    from verifylib.evidence.receipt import verify
    out = published.outcome
    assert set(out.stage_seconds) >= set(STAGES)  # each stage ran as a notebook
    assert sorted(p.name for p in (out.run_dir / "notebooks").iterdir()) == [
        f"{s}.ipynb" for s in STAGES]
    rec = canonical.read_json(out.run_dir / "receipt.json")
    bad = {g["id"]: (g["status"], g["reason"]) for g in rec["gates"]
           if gates.gate(g["id"]).required and g["status"] != "PASS"}
    assert bad == {}
    assert out.verdict.value == "ADMISSIBLE"
    run = canonical.read_json(out.run_dir / "run.json")
    assert run["host"]["simulated"] is True and run["host"]["system"] == "Darwin"
    refused = verify(out.run_dir)
    assert not refused.ok
    assert any("simulated" in x for x in refused.problems)
    assert verify(out.run_dir, allow_simulated=True).ok


# ---------------------------------------------------------------------------- the docs page

def markdown() -> str:
    """The matrix as a Markdown page (docs/scenarios.md)."""
    lines = ["# The fault matrix", "",
             "Generated from `tests/simmac/test_scenarios.py` (`python tests/simmac/test_scenarios.py "
             "--markdown`); `docs/runtime-contract.md` explains the sections cited.", "",
             "| scenario | host | covers | stages | gate | expected | reason contains | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for r in ROWS:
        host = "Linux" if r.sim is None else "simulated Mac"
        lines.append(f"| `{r.name}` | {host} | {r.covers} | {', '.join(r.stages)} | "
                     f"`{r.gate}` | {r.status} | {r.reason or '-'} | {r.verdict} |")
    for a in ARGV_ROWS:
        lines.append(f"| `{a.name}` | any | {a.covers} | (argv guard) | - | refused before "
                     f"launch | `{a.reason}` | - |")
    lines.append("| `missing-audio-exit-2` | simulated Mac | §6.2 exit 2 when the audio file "
                 "does not exist | (one Core ML run) | `canary.coreml_positive`'s classifier | "
                 "not a positive run | exit 2 | - |")
    lines.append("| `patch-drift` | Linux | §6.4 the patch file drifted from the manifest's "
                 "digest | 01_build | `build.patch_exact` | FAIL | - | REJECTED |")
    lines.append("| `interrupted-build` | Linux | §3 a staging folder left in the build "
                 "cache by an interrupted publication | 01_build | `build.ggml` | PASS | - | - |")
    lines.append("| `cmake-missing` | Linux | no cmake on PATH and no PyPI cmake package | "
                 "(preflight) | - | exit 2 before any work | `pip install cmake` | - |")
    lines.append("| `xcode-license` | simulated Mac | the Xcode license is not accepted "
                 "(`xcrun` exits 69) | (host check) | `export.compile` | NOT_RUN | "
                 "`sudo xcodebuild -license accept` | - |")
    lines.append("| `clt-selected` | simulated Mac | Xcode installed, the Command Line Tools "
                 "selected | (host check) | `export.compile` | NOT_RUN | "
                 "`sudo xcode-select -s …` | - |")
    lines.append("| `mac-recorded-signal-verified-on-linux` | Linux | §6.2 a Mac run's record "
                 "killed by signal 10 (SIGBUS there, SIGUSR1 here), naming its signal table | "
                 "(one stored positive run) | `canary.coreml_positive` | FAIL | killed by SIGBUS "
                 "| - |")
    lines.append("| `long-tmpdir` | any | a 100-character `$TMPDIR`: the kernel sockets stay "
                 "in a short private folder | (one kernel start) | - | every socket path "
                 "within 103 bytes | - | - |")
    lines.append("| `case-collision` | any | fixtures `A`/`a` and models `Tiny`/`tiny` on a "
                 "case-insensitive file system | (validation) | - | exit 2 before any work | "
                 "differ only in case | - |")
    lines.append("| `admissible-audit` | simulated Mac | the whole default audit through "
                 "papermill | all six | every required gate | PASS | - | ADMISSIBLE |")
    return "\n".join(lines) + "\n"


def test_docs_page_lists_the_matrix():
    assert (ROOT / "docs" / "scenarios.md").read_text() == markdown()


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        sys.stdout.write(markdown())
