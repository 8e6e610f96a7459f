"""The simulated Mac's stand-ins are no looser than the real thing.

Only coremltools' native side is replaced (tests/simmac/native.py); its Python classes run
as on a Mac. These tests pin that: the classes verifylib gets back are coremltools' own,
their argument checks apply (a ``Path`` is refused), the proxies keep the bindings'
signatures, compute units change the plan, and the compiler writes coremlc's file set.
They compile one small fp16 ML program (casts at its input and output, a constant weight in
``weight.bin``) in process, in a private framework memory: seconds, no whisper.cpp.
"""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.simmac import Scenario, SimulatedMac, coremlc, framework_memory, native

pytestmark = pytest.mark.simmac

RNG = np.random.default_rng(20261203)
W = RNG.standard_normal((16, 32)).astype(np.float32)
B = RNG.standard_normal((16,)).astype(np.float32)


def _package(folder: Path) -> Path:
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 32))], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.linear(x=x, weight=W, bias=B, name="lin")
        return mb.relu(x=y, name="output")

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                       minimum_deployment_target=ct.target.macOS14, skip_model_load=True)
    pkg = folder / "tiny.mlpackage"
    model.save(str(pkg))
    return pkg


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A compiled folder, the framework memory that knows it, and its package."""
    base = tmp_path_factory.mktemp("stand-ins")
    pkg = _package(base)
    memory = base / "framework"
    folder = Path(coremlc.compile_package(str(pkg), str(base / "out"), memory=memory))
    return folder, memory, pkg


@pytest.fixture
def mac(compiled, tmp_path):
    def make(**scenario):
        return SimulatedMac(Scenario(**scenario), tmp_path / "state",
                            framework_dir=compiled[1])
    return make


def _loads(sim: SimulatedMac) -> list:
    path = sim.state_dir / "loads.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# ----------------------------------------------------------------------------- the classes

def test_verifylib_gets_coremltools_own_classes(compiled, mac):
    import coremltools as ct
    from coremltools.models import CompiledMLModel
    from coremltools.models.compute_device import MLComputeDevice
    from coremltools.models.compute_plan import (
        MLComputePlan,
        MLComputePlanCost,
        MLComputePlanDeviceUsage,
        MLModelStructureProgramOperation,
    )

    from verifylib.models.compute_plan import load_plan
    from verifylib.models.coreml_package import load_compiled
    folder, _, _ = compiled
    sim = mac()
    with sim:
        model = load_compiled(folder)
        plan = load_plan(folder)
        assert type(model) is CompiledMLModel and model.compute_unit is ct.ComputeUnit.ALL
        assert type(plan) is MLComputePlan
        ops = plan.model_structure.program.functions["main"].block.operations
        assert ops and all(type(op) is MLModelStructureProgramOperation for op in ops)
        placed = [plan.get_compute_device_usage_for_mlprogram_operation(op) for op in ops]
        placed = [u for u in placed if u is not None]
        assert placed and all(type(u) is MLComputePlanDeviceUsage for u in placed)
        assert all(isinstance(d, MLComputeDevice)
                   for u in placed for d in [u.preferred_compute_device,
                                             *u.supported_compute_devices])
        costs = [plan.get_estimated_cost_for_mlprogram_operation(op) for op in ops]
        assert all(type(c) is MLComputePlanCost for c in costs if c is not None)
    # verifylib asked Core ML for what whisper.cpp uses: compute units ALL, by str path.
    assert _loads(sim) == [{"api": "MLModel", "path": str(folder), "compute_units": "ALL"},
                           {"api": "MLComputePlan", "path": str(folder),
                            "compute_units": "ALL"}]


def test_the_compiled_model_computes_the_program(compiled, mac):
    import coremltools as ct
    folder, _, _ = compiled
    x = RNG.standard_normal((1, 32)).astype(np.float32)
    with mac():
        out = ct.models.CompiledMLModel(str(folder), ct.ComputeUnit.ALL).predict({"x": x})
    assert set(out) == {"output"} and out["output"].dtype == np.float32
    ref = np.maximum(x @ W.T + B, 0)
    # The weights are stored as float16: close to the float32 reference, not equal to it.
    assert np.allclose(out["output"], ref, atol=0.02) and not np.array_equal(out["output"], ref)


def test_paths_and_units_are_checked_as_the_real_classes_check_them(compiled, mac):
    import coremltools as ct
    from coremltools.models.compute_plan import MLComputePlan
    folder, _, _ = compiled
    with mac():
        # CompiledMLModel's own check, now that it runs.
        with pytest.raises(TypeError, match='"path" parameter must be of type "str"'):
            ct.models.CompiledMLModel(folder)
        with pytest.raises(TypeError, match="compute_units"):
            ct.models.CompiledMLModel(str(folder), compute_units="ALL")
        # load_from_path passes the path through: the binding refuses a Path.
        with pytest.raises(TypeError, match="incompatible function arguments"):
            MLComputePlan.load_from_path(path=folder)
        with pytest.raises(AttributeError):  # it reads compute_units.name
            MLComputePlan.load_from_path(path=str(folder), compute_units="ALL")


def test_the_proxies_keep_the_bindings_signatures(compiled, mac):
    """The calls coremltools makes are the ones the fake proxies accept, and nothing else:
    pinned on the real classes' source (their signatures and the call they make)."""
    import coremltools.models._compiled_model as cm
    import coremltools.models.compute_plan as cp
    folder, _, _ = compiled
    assert list(inspect.signature(cm.CompiledMLModel.__init__).parameters) == [
        "self", "path", "compute_units", "function_name", "optimization_hints", "asset"]
    assert "_MLModelProxy(\n            path, compute_units.name, function_name, " \
           "optimization_hints_str_vals, asset_proxy\n        )" in \
        inspect.getsource(cm.CompiledMLModel.__init__)
    assert list(inspect.signature(cp.MLComputePlan.load_from_path).parameters) == [
        "path", "compute_units"]
    assert "_MLModelProxy.get_compute_plan(path, compute_units.name)" in \
        inspect.getsource(cp.MLComputePlan.load_from_path)
    assert "isinstance(proxy, _MLComputePlanProxy)" in inspect.getsource(cp.MLComputePlan)
    with mac():
        _the_bindings_refuse_what_pybind11_refuses(cm._MLModelProxy, str(folder))


def _the_bindings_refuse_what_pybind11_refuses(proxy, folder: str) -> None:
    for args in [(Path(folder), "ALL", "", {}, None), (folder, 1, "", {}, None),
                 (folder, "ALL", None, {}, None), (folder, "ALL", "", None, None),
                 (folder, "ALL")]:
        with pytest.raises(TypeError, match="incompatible function arguments"):
            proxy(*args)
    with pytest.raises(RuntimeError, match="compute units"):
        proxy(folder, "GPU_ONLY", "", {}, None)
    loaded = proxy(folder, "ALL", "", {})  # the binding's four-argument overload
    with pytest.raises(TypeError, match="incompatible function arguments"):
        loaded.predict({"x": np.zeros((1, 32), np.float32)})  # the state argument is required
    with pytest.raises(RuntimeError, match="expects inputs"):
        loaded.predict({"x": np.zeros((1, 31), np.float32)}, None)
    for args in [(Path(folder), "ALL"), (folder,), (folder, "ALL", None)]:
        with pytest.raises(TypeError, match="incompatible function arguments"):
            proxy.get_compute_plan(*args)
    plan = proxy.get_compute_plan(folder, "ALL")
    with pytest.raises(RuntimeError, match="unable to cast"):
        plan.get_estimated_cost_for_mlprogram_operation(object())


def test_deactivate_puts_the_missing_native_side_back(compiled, mac):
    import coremltools.models._compiled_model as cm
    import coremltools.models.compute_device as cd
    import coremltools.models.compute_plan as cp
    before = [(m, n, getattr(m, n)) for m, n, _ in mac().native_patches()]
    assert all(v is None for m, n, v in before if n != "_macos_version")
    with mac():
        assert cm._MLModelProxy is not None and cd._MLCPUComputeDeviceProxy is not None
    assert [(m, n, getattr(m, n)) for m, n, _ in before] == before
    with pytest.raises(Exception, match="Unable to load any compiled models|macOS"):
        cm.CompiledMLModel(str(compiled[0]))
    assert cp._MLComputePlanProxy is None


# ----------------------------------------------------------------------------- the plan

def _analysis(folder, sim, units=None):
    import coremltools as ct
    from coremltools.models.compute_plan import MLComputePlan

    from verifylib.models import compute_plan as cpm
    with sim:
        plan = MLComputePlan.load_from_path(str(folder), units or ct.ComputeUnit.ALL)
        return cpm.analyze_plan(plan)


def test_the_plan_has_the_rows_core_ml_gives(compiled, mac):
    from verifylib.evidence.placement.rules import judge_plan
    from verifylib.models import compute_plan as cpm
    a = _analysis(compiled[0], mac())
    kinds = {o["operator"]: cpm.row_kind(o["operator"], o["preferred"], o["cost"])
             for o in a.ops}
    assert kinds == {"const": cpm.NOT_PLACED, "ios17.cast": cpm.NO_DEVICE,
                     "ios17.linear": cpm.PLACED, "ios17.relu": cpm.PLACED}
    consts = [o for o in a.ops if o["operator"] == "const"]
    assert len(consts) == 4 and all(o["cost"] is None and o["supported"] == [] for o in consts)
    casts = [o for o in a.ops if o["operator"] == "ios17.cast"]
    assert len(casts) == 2 and all(o["cost"] > 0 and o["preferred"] is None for o in casts)
    # fp16 and of a type the Neural Engine runs: planned there; relu is not such a type.
    rows = {o["operator"]: o for o in a.ops}
    assert rows["ios17.linear"]["preferred"] == "NeuralEngine"
    assert rows["ios17.linear"]["supported"] == ["CPU", "GPU", "NeuralEngine"]
    assert rows["ios17.relu"]["preferred"] == "GPU"
    # Estimates: the shares sum close to 1, not to exactly 1.
    assert a.cost_sum == pytest.approx(native.COST_TOTAL) and a.cost_sum != 1
    assert a.cost_without_device == pytest.approx(sum(o["cost"] for o in casts))
    j = judge_plan(cpm.placement_evidence(a, "fp16", "d" * 64))
    assert j.ok, j.detail
    assert "no device:" in j.detail and "(ios17.cast x2)" in j.detail


@pytest.mark.parametrize("units,preferred,supported", [
    ("CPU_ONLY", {"CPU"}, [["CPU"]]),
    ("CPU_AND_GPU", {"GPU"}, [["CPU", "GPU"]]),
    ("CPU_AND_NE", {"NeuralEngine", "CPU"}, [["CPU", "NeuralEngine"], ["CPU"]]),
])
def test_the_plan_honours_the_compute_units(compiled, mac, units, preferred, supported):
    import coremltools as ct
    sim = mac()
    a = _analysis(compiled[0], sim, getattr(ct.ComputeUnit, units))
    placed = [o for o in a.ops if o["preferred"] is not None]
    assert {o["preferred"] for o in placed} == preferred
    assert sorted({tuple(o["supported"]) for o in placed}) == sorted(map(tuple, supported))
    assert _loads(sim)[-1]["compute_units"] == units


def test_a_costed_compute_operation_without_a_device_fails_the_rule(compiled, mac):
    from verifylib.evidence.placement.rules import judge_plan
    from verifylib.models import compute_plan as cpm
    a = _analysis(compiled[0], mac(plan="no-device"))
    j = judge_plan(cpm.placement_evidence(a, "fp16", "d" * 64))
    assert not j.ok
    assert j.detail == "1 costed operation(s) without a preferred device: ios17.linear"


def test_the_plan_needs_macos_14_4(compiled, mac):
    with pytest.raises(RuntimeError, match="14.4"):
        _analysis(compiled[0], mac(macos=(14, 0)))


# ----------------------------------------------------------------------------- loading

def _copy(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest)
    return dest


@pytest.mark.parametrize("damage,reason", [
    (lambda d: (d / "model.mil").write_text((d / "model.mil").read_text() + "\n"),
     "error parsing MIL model"),
    (lambda d: (d / "weights" / "weight.bin").unlink(), "could not open"),
    (lambda d: (d / "coremldata.bin").write_bytes(b"\x08\x01"), "not a compiled model"),
    (lambda d: (d / "coremldata.bin").write_bytes(framework_memory.coremldata("0" * 64)),
     "no simulated coremlc compiled it"),
    (lambda d: (d / "coremldata.bin").unlink(), "cannot read coremldata.bin"),
])
def test_a_folder_the_framework_cannot_read_does_not_load(compiled, mac, tmp_path, damage,
                                                          reason):
    import coremltools as ct
    from coremltools.models.compute_plan import MLComputePlan
    folder = _copy(compiled[0], tmp_path / "copy.mlmodelc")
    with mac():
        assert ct.models.CompiledMLModel(str(folder)) is not None  # a copy loads
        damage(folder)
        with pytest.raises(RuntimeError, match="cannot load") as err:
            ct.models.CompiledMLModel(str(folder))
        assert reason in str(err.value)
        with pytest.raises(RuntimeError, match=reason):
            MLComputePlan.load_from_path(str(folder))


def test_a_model_compiled_for_another_platform_does_not_load(compiled, mac, tmp_path):
    import coremltools as ct
    _, memory, pkg = compiled
    other = Path(coremlc.compile_package(str(pkg), str(tmp_path / "ios"), memory=memory,
                                         platform="iOS"))
    # The same program text, another compile: only the framework's memory tells them apart.
    assert (other / "model.mil").read_bytes() == (compiled[0] / "model.mil").read_bytes()
    assert (other / "metadata.json").read_bytes() == (compiled[0] / "metadata.json").read_bytes()
    with mac():
        with pytest.raises(RuntimeError, match="compiled for iOS"):
            ct.models.CompiledMLModel(str(other))


def test_a_package_is_not_loaded_as_a_compiled_model(compiled, mac):
    import coremltools as ct
    with mac():
        with pytest.raises(RuntimeError, match=r"compiled models \(.mlmodelc\) only"):
            ct.models.CompiledMLModel(str(compiled[2]))


# ----------------------------------------------------------------------------- the compiler

def test_the_compiler_writes_coremlcs_file_set_and_nothing_more(compiled):
    from coremltools.proto import Model_pb2

    from verifylib.models.encoder_reader import describe_encoder
    folder, _, pkg = compiled
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files == ["analytics/coremldata.bin", "coremldata.bin", "metadata.json",
                     "model.mil", "weights/weight.bin"]
    meta = json.loads((folder / "metadata.json").read_text())
    assert isinstance(meta, list) and len(meta) == 1 and "platform" not in meta[0]
    assert meta[0]["modelType"] == {"name": "MLModelType_mlProgram"}
    # coremldata.bin is a compiled binary, not the specification the package holds.
    spec = (pkg / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes()
    blob = (folder / "coremldata.bin").read_bytes()
    assert blob != spec and spec not in blob and len(blob) < 200
    parsed = Model_pb2.Model()
    try:
        parsed.ParseFromString(blob)
    except Exception:  # noqa: BLE001 - not parsing at all is the expected outcome too
        parsed = None
    assert parsed is None or not parsed.HasField("mlProgram")
    mil = (folder / "model.mil").read_text()
    assert mil.startswith("program(1.0)\n") and "func main<ios17>(tensor<fp32, [1, 32]> x)" in mil
    card = describe_encoder(folder)
    assert card.read_from == ("metadata.json", "model.mil")
    assert card.precision == "fp16" and card.notes == (), card.notes
