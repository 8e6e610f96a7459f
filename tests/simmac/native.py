"""The simulated Mac's ``coremltools.libcoremlpython``: the native proxies, and nothing else.

On macOS, coremltools' Python classes (``CompiledMLModel``, ``MLComputePlan``,
``MLComputePlanDeviceUsage``, ``MLComputePlanCost``, the ``MLModelStructure*`` dataclasses
and the ``ML*ComputeDevice`` classes) call a pybind11 extension, ``libcoremlpython``, that
wraps Core ML. Off macOS it does not load and coremltools sets its proxies to None. The
simulated Mac puts these proxies back (:meth:`tests.simmac.SimulatedMac.activate` patches
them where coremltools looks them up), so coremltools' REAL Python classes run in the tests,
with their own argument checks.

Each proxy keeps the binding's signature as coremltools 9.0's ``CoreMLPython.mm`` declares
it, and is no looser: a path is a ``str`` (a ``Path`` raises ``TypeError``, as pybind11
does for ``const std::string&``), compute units are the enum's *name* the Python class
passes (``"ALL"``, ``"CPU_ONLY"`` ...), and the objects a proxy returns are built the way
the extension builds them: by calling coremltools' own classes, looked up by name in
``coremltools.models.compute_plan`` and ``coremltools.models.compute_device`` at call time.

What the proxies do instead of Core ML:

- a compiled folder loads only if the simulated framework's memory knows it
  (:mod:`framework_memory`); otherwise ``RuntimeError``, as Core ML's load error;
- ``_MLModelProxy.predict`` executes the remembered program with the folder's own
  ``weights/weight.bin`` op by op with verifylib's MIL executor in float32, so runtime
  parity measures a real computation; the scenario's ``compiled`` key switches a defect on;
- ``_MLModelProxy.get_compute_plan`` plans every operation of the program, ``const``
  included, honouring the compute units asked for (see :func:`plan_rows`); the scenario's
  ``plan`` key switches a defect on.

Every load is appended to ``loads.jsonl`` in the simulated Mac's state folder (the API,
the path and the compute units asked for), so a test can see what verifylib asked Core ML.
"""

from __future__ import annotations

import importlib
import json
import math
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

try:  # imported as tests.simmac.native
    from . import framework_memory
    from .coremlc import opset_name
except ImportError:  # pragma: no cover - imported beside the scripts
    import framework_memory  # type: ignore[no-redef]
    from coremlc import opset_name  # type: ignore[no-redef]

COMPUTE_UNITS = ("ALL", "CPU_AND_GPU", "CPU_ONLY", "CPU_AND_NE")
"""The names ``setComputeUnit`` accepts (``coremltools.ComputeUnit`` member names)."""

UNIT_DEVICES = {"ALL": ("CPU", "GPU", "NE"), "CPU_AND_GPU": ("CPU", "GPU"),
                "CPU_ONLY": ("CPU",), "CPU_AND_NE": ("CPU", "NE")}
"""The devices a plan may use under each compute units value."""

NE_OPS = frozenset({"conv", "matmul", "linear", "add", "mul", "layer_norm", "softmax", "gelu",
                    "reshape", "transpose", "sub", "real_div", "einsum", "split", "concat"})
"""Operation types the simulated Neural Engine runs (in float16 only)."""

COST_TOTAL = 0.997
"""What the simulated plan's cost shares sum to: Core ML's are estimates, not exactly 1."""

NE_CORES = 16


def _incompatible(fn: str, signature: str, args: tuple) -> TypeError:
    # The message pybind11 gives when an argument does not convert to the C++ type.
    shown = ", ".join(repr(a) for a in args)
    return TypeError(f"{fn}(): incompatible function arguments. The following argument "
                     f"types are supported:\n    1. {signature}\n\nInvoked with: {shown}")


def _check(fn: str, signature: str, args: tuple, types: tuple) -> None:
    if len(args) != len(types) or not all(
            t is object or isinstance(a, t) for a, t in zip(args, types)):
        raise _incompatible(fn, signature, args)


def _coreml(module: str):
    return importlib.import_module(f"coremltools.models.{module}")


# ------------------------------------------------------------------ device proxies

class _MLCPUComputeDeviceProxy:
    """``libcoremlpython._MLCPUComputeDeviceProxy``: ``py::init()``."""


class _MLGPUComputeDeviceProxy:
    """``libcoremlpython._MLGPUComputeDeviceProxy``: ``py::init()``."""


class _MLNeuralEngineComputeDeviceProxy:
    """``libcoremlpython._MLNeuralEngineComputeDeviceProxy``: ``get_total_core_count``."""

    def get_total_core_count(self) -> int:
        """The simulated Neural Engine's core count."""
        return NE_CORES


class _MLModelStructureProgramOperationProxy:
    """``libcoremlpython._MLModelStructureProgramOperationProxy``: one operation of a
    loaded structure (the key its plan knows it by)."""

    def __init__(self, key: tuple):
        self._key = key


def _device(kind: str):
    """A device object as the extension makes one: coremltools' class around a proxy."""
    cd = _coreml("compute_device")
    cls, proxy = {"CPU": (cd.MLCPUComputeDevice, _MLCPUComputeDeviceProxy),
                  "GPU": (cd.MLGPUComputeDevice, _MLGPUComputeDeviceProxy),
                  "NE": (cd.MLNeuralEngineComputeDevice, _MLNeuralEngineComputeDeviceProxy)}[kind]
    return cls(proxy())


# ------------------------------------------------------------------ the program

def _spec_of(compiled: framework_memory.Compiled):
    from coremltools.proto import Model_pb2
    spec = Model_pb2.Model()
    spec.ParseFromString(compiled.spec.read_bytes())
    return spec


def _elements(value_type) -> int:
    if value_type.WhichOneof("type") != "tensorType":
        return 1
    return max(1, math.prod(d.constant.size if d.WhichOneof("dimension") == "constant" else 1
                            for d in value_type.tensorType.dimensions))


def _is_fp16(value_type) -> bool:
    from coremltools.proto import MIL_pb2
    return (value_type.WhichOneof("type") == "tensorType"
            and value_type.tensorType.dataType == MIL_pb2.DataType.FLOAT16)


def plan_rows(spec, compute_units: str, behaviour: str = "ok") -> list[tuple]:
    """The simulated plan of every operation of every function, in program order.

    Parameters
    ----------
    spec : coremltools.proto.Model_pb2.Model
        The program.
    compute_units : str
        A :data:`COMPUTE_UNITS` name.
    behaviour : str
        The scenario's ``plan`` key: ``ok``, ``no-cost`` (no operation carries a cost),
        ``unbalanced`` (the shares sum to about 2), ``no-device`` (one compute operation
        is costed but placed nowhere).

    Returns
    -------
    list of tuple
        ``(function, path, operator, (preferred, supported) or None, cost or None)`` per
        operation; ``path`` is its index path through nested blocks.

    Notes
    -----
    As Core ML gives them: a ``const`` has no usage and no cost; a ``cast`` is costed with
    no device; every other operation is supported by the CPU and the GPU, and by the
    Neural Engine when it is of a type the Neural Engine runs (:data:`NE_OPS`) and computes
    in float16 (the Neural Engine's only precision). The preferred device is the first of
    Neural Engine, GPU, CPU among the supported ones the compute units allow. An
    operation's cost is its share of all output elements, scaled to :data:`COST_TOTAL`.
    """
    allowed = UNIT_DEVICES[compute_units]
    found: list[tuple] = []

    def walk(fname, opset, block, path):
        for i, op in enumerate(block.operations):
            operator = "const" if op.type == "const" else f"{opset}.{op.type}"
            found.append((fname, path + (i,), operator, op))
            for j, inner in enumerate(op.blocks):
                walk(fname, opset, inner, path + (i, j))

    for fname, fn in spec.mlProgram.functions.items():
        walk(fname, opset_name(fn.opset), fn.block_specializations[fn.opset], ())
    sizes = {k: sum(_elements(o.type) for o in op.outputs)
             for k, (_f, _p, name, op) in enumerate(found) if name != "const"}
    total = float(sum(sizes.values())) or 1.0
    rows, unplaced_one = [], behaviour == "no-device"
    for k, (fname, path, operator, op) in enumerate(found):
        kind = op.type
        if kind == "const":
            rows.append((fname, path, operator, None, None))
            continue
        cost: float | None = COST_TOTAL * sizes[k] / total
        if behaviour == "no-cost":
            cost = None
        elif behaviour == "unbalanced":
            cost = 2 * cost
        if kind == "cast":
            rows.append((fname, path, operator, None, cost))
            continue
        if unplaced_one:
            unplaced_one = False
            rows.append((fname, path, operator, None, cost))
            continue
        ne = kind in NE_OPS and all(_is_fp16(o.type) for o in op.outputs)
        supported = tuple(d for d in ("CPU", "GPU", "NE") if d in allowed
                          and (d != "NE" or ne))
        preferred = next(d for d in ("NE", "GPU", "CPU") if d in supported)
        rows.append((fname, path, operator, (preferred, supported), cost))
    return rows


def _structure(spec, rows: list[tuple], plan_id: int):
    """The model structure as the extension builds it from Core ML's."""
    cp = _coreml("compute_plan")
    by_path = {(r[0], r[1]): r for r in rows}

    def named(name):
        return cp.MLModelStructureProgramNamedValueType(name, cp.MLModelStructureProgramValueType())

    def argument(arg):
        return cp.MLModelStructureProgramArgument([
            cp.MLModelStructureProgramBinding(b.name, None) if b.WhichOneof("binding") == "name"
            else cp.MLModelStructureProgramBinding(None, cp.MLModelStructureProgramValue())
            for b in arg.arguments])

    def block_of(fname, block, path, inputs):
        ops = []
        for i, op in enumerate(block.operations):
            here = path + (i,)
            ops.append(cp.MLModelStructureProgramOperation(
                {k: argument(v) for k, v in op.inputs.items()}, by_path[(fname, here)][2],
                [named(o.name) for o in op.outputs],
                [block_of(fname, b, here + (j,), [named(x.name) for x in b.inputs])
                 for j, b in enumerate(op.blocks)],
                _MLModelStructureProgramOperationProxy((plan_id, fname, here))))
        return cp.MLModelStructureProgramBlock(inputs, ops, list(block.outputs))

    functions = {}
    for fname, fn in spec.mlProgram.functions.items():
        functions[fname] = cp.MLModelStructureProgramFunction(
            [named(x.name) for x in fn.inputs],
            block_of(fname, fn.block_specializations[fn.opset], (), []))
    return cp.MLModelStructure(None, cp.MLModelStructureProgram(functions), None)


# ------------------------------------------------------------------ the framework

def framework(scenario: dict, state_dir: Path, macos: tuple) -> SimpleNamespace:
    """The proxy classes of one simulated Mac.

    Parameters
    ----------
    scenario : dict
        The scenario (its ``compiled`` and ``plan`` keys, its ``framework_dir``).
    state_dir : Path
        Where ``loads.jsonl`` is appended.
    macos : tuple of int
        The macOS version (``MLComputePlan`` needs 14.4).

    Returns
    -------
    types.SimpleNamespace
        ``_MLModelProxy``, ``_MLComputePlanProxy`` and the device proxy classes, by the
        names coremltools imports them under.
    """
    memory = framework_memory.framework_dir(scenario)
    compiled_behaviour = scenario.get("compiled", "ok")
    plan_behaviour = scenario.get("plan", "ok")
    plans = iter(range(1, 1 << 62))

    def log(api: str, path: str, units: str) -> None:
        with open(Path(state_dir) / "loads.jsonl", "a") as fh:
            fh.write(json.dumps({"api": api, "path": path, "compute_units": units}) + "\n")

    def recall(path: str) -> framework_memory.Compiled:
        if not path.rstrip("/").endswith(".mlmodelc"):
            raise RuntimeError(f"{path}: the simulated Core ML loads compiled models "
                               "(.mlmodelc) only; compile with xcrun coremlc")
        try:
            return framework_memory.recall(memory, path)
        except framework_memory.NotLoadable as exc:
            raise RuntimeError(f"Error loading the model: cannot load {exc}") from None

    class _MLComputePlanProxy:
        """``libcoremlpython._MLComputePlanProxy``: a loaded plan."""

        def __init__(self, structure, rows: dict):
            self._structure = structure
            self._rows = rows

        @property
        def model_structure(self):
            """The structure the plan was made for (the same object every time)."""
            return self._structure

        def _row(self, operation, fn: str):
            proxy = getattr(operation, "__proxy__", None)
            if not isinstance(proxy, _MLModelStructureProgramOperationProxy):
                raise RuntimeError(f"{fn}(): unable to cast the operation's __proxy__ "
                                   f"({type(proxy).__name__}) to "
                                   "ModelStructureProgramOperation")
            return self._rows.get(proxy._key)

        def get_compute_device_usage_for_mlprogram_operation(self, operation):
            """Usage of one operation: ``MLComputePlanDeviceUsage`` or None."""
            row = self._row(operation, "get_compute_device_usage_for_mlprogram_operation")
            if row is None or row[3] is None:
                return None
            preferred, supported = row[3]
            return _coreml("compute_plan").MLComputePlanDeviceUsage(
                _device(preferred), [_device(d) for d in supported])

        def get_compute_device_usage_for_neuralnetwork_layer(self, layer):
            """A program has no neural-network layers."""
            raise RuntimeError("get_compute_device_usage_for_neuralnetwork_layer(): unable "
                               "to cast the layer's __proxy__ to "
                               "ModelStructureNeuralNetworkLayer")

        def get_estimated_cost_for_mlprogram_operation(self, operation):
            """Estimated cost of one operation: ``MLComputePlanCost`` or None."""
            row = self._row(operation, "get_estimated_cost_for_mlprogram_operation")
            if row is None or row[4] is None:
                return None
            return _coreml("compute_plan").MLComputePlanCost(row[4])

    class _MLModelProxy:
        """``libcoremlpython._MLModelProxy``: a loaded compiled model, and the static calls.

        ``__init__(path: str, compute_units: str, function_name: str,
        optimization_hints: dict, asset: object)`` as ``CompiledMLModel`` calls it.
        """

        def __init__(self, *args):
            sig = ("(self, arg0: str, arg1: str, arg2: str, arg3: dict, "
                   "arg4: object = None) -> None")
            if len(args) == 4:
                args = (*args, None)
            _check("__init__", sig, args, (str, str, str, dict, object))
            path, units, function_name, hints, asset = args
            if units not in COMPUTE_UNITS:
                raise RuntimeError(f"unknown compute units {units!r}")
            if asset is not None:
                raise RuntimeError("the simulated Core ML loads no MLModelAsset")
            if function_name not in ("", "main"):
                raise RuntimeError(f"the model has no function {function_name!r}")
            log("MLModel", path, units)
            t0 = time.perf_counter_ns()
            if compiled_behaviour == "load-error":
                raise RuntimeError(f"Error loading the model: cannot load {path}")
            compiled = recall(path)
            self._path, self.compute_units = path, units
            self._spec = _spec_of(compiled)
            self._tmp = tempfile.TemporaryDirectory(prefix="verifylib-simmac-model-")
            self._program = _executable(self._spec, Path(path), Path(self._tmp.name))
            self._load_ns = time.perf_counter_ns() - t0
            self._predict_ns: int | None = None

        def predict(self, *args):
            """Predict once: ``predict(input: dict, state) -> dict``."""
            _check("predict", "(self, arg0: dict, arg1: State) -> dict", args, (dict, object))
            data, state = args
            if state is not None:
                raise RuntimeError("the model has no state")
            return self._predict(data)

        def batchPredict(self, *args):  # noqa: N802 - the binding's name
            """Predict each of a list: ``batchPredict(batch: list) -> list``."""
            _check("batchPredict", "(self, arg0: list) -> list", args, (list,))
            return [self._predict(d) for d in args[0]]

        def get_compiled_model_path(self) -> str:
            """The folder the model was loaded from."""
            return self._path

        def get_load_duration_in_nano_seconds(self) -> int:
            """How long the load took."""
            return self._load_ns

        def get_last_predict_duration_in_nano_seconds(self) -> int | None:
            """How long the last prediction took."""
            return self._predict_ns

        def _predict(self, data: dict) -> dict:
            import numpy as np

            from verifylib.numerics.mil_exec import execute
            t0 = time.perf_counter_ns()
            want = {f.name: tuple(f.type.multiArrayType.shape)
                    for f in self._spec.description.input}
            got = {k: tuple(np.shape(v)) for k, v in data.items()}
            if set(got) != set(want) or any(got[k] != want[k] for k in want):
                raise RuntimeError(f"the model expects inputs {want}, got {got}")
            if compiled_behaviour == "nil":
                return {}
            feeds = {k: np.asarray(v, dtype=np.float32) for k, v in data.items()}
            outputs = execute(self._program, feeds, compute="float32").outputs
            out = {f.name: np.asarray(outputs[f.name], dtype=np.float32)
                   for f in self._spec.description.output}
            name = self._spec.description.output[0].name
            y = out[name]
            if compiled_behaviour == "fp16":
                out[name] = y.astype(np.float16)
            elif compiled_behaviour == "renamed":
                out = {"encoder_output": y}
            elif compiled_behaviour == "oversized":
                out[name] = np.concatenate([y, y[:, :1]], axis=1)
            self._predict_ns = time.perf_counter_ns() - t0
            return out

        @staticmethod
        def get_compute_plan(*args):
            """``get_compute_plan(path: str, compute_units: str)``: an ``MLComputePlan``."""
            _check("get_compute_plan", "(arg0: str, arg1: str) -> object", args, (str, str))
            path, units = args
            if tuple(macos) < (14, 4):
                raise RuntimeError("MLComputePlan is only available on macOS >= 14.4")
            if units not in COMPUTE_UNITS:
                raise RuntimeError(f"unknown compute units {units!r}")
            log("MLComputePlan", path, units)
            spec = _spec_of(recall(path))
            plan_id = next(plans)
            rows = plan_rows(spec, units, plan_behaviour)
            structure = _structure(spec, rows, plan_id)
            keyed = {(plan_id, r[0], r[1]): r for r in rows}
            return _coreml("compute_plan").MLComputePlan(_MLComputePlanProxy(structure, keyed))

        @staticmethod
        def get_model_structure(*args):
            """``get_model_structure(path: str)``: an ``MLModelStructure``."""
            _check("get_model_structure", "(arg0: str) -> object", args, (str,))
            if tuple(macos) < (14, 4):
                raise RuntimeError("MLModelStructure is only available on macOS >= 14.4")
            spec = _spec_of(recall(args[0]))
            return _structure(spec, plan_rows(spec, "ALL"), next(plans))

        @staticmethod
        def get_all_compute_devices() -> list:
            """Every device of the simulated Mac."""
            return [_device(d) for d in ("CPU", "GPU", "NE")]

        @staticmethod
        def get_available_compute_devices() -> list:
            """The devices Core ML may use on the simulated Mac."""
            return [_device(d) for d in ("CPU", "GPU", "NE")]

    return SimpleNamespace(
        _MLModelProxy=_MLModelProxy, _MLComputePlanProxy=_MLComputePlanProxy,
        _MLCPUComputeDeviceProxy=_MLCPUComputeDeviceProxy,
        _MLGPUComputeDeviceProxy=_MLGPUComputeDeviceProxy,
        _MLNeuralEngineComputeDeviceProxy=_MLNeuralEngineComputeDeviceProxy,
        _MLModelStructureProgramOperationProxy=_MLModelStructureProgramOperationProxy)


def _executable(spec, mlmodelc: Path, workdir: Path) -> Any:
    """The remembered program with the folder's own weights, read by verifylib's executor.

    The executor reads packages, so one is written from the specification with the
    compiled folder's ``weights/`` (the bytes Core ML would read).
    """
    import coremltools as ct

    from verifylib.numerics.mil_exec import load_program

    pkg = workdir / "program.mlpackage"
    weights = mlmodelc / "weights"
    if not weights.is_dir():  # a program without a weight file
        weights = workdir / "no-weights"
        weights.mkdir()
    ct.models.MLModel(spec, weights_dir=str(weights), skip_model_load=True).save(str(pkg))
    return load_program(pkg)


__all__ = ["framework", "plan_rows", "COMPUTE_UNITS", "UNIT_DEVICES", "NE_OPS", "COST_TOTAL"]
