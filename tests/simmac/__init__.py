"""A simulated Mac for the test suite: every macOS branch of verifylib, run end to end on Linux.

Nothing here is reachable from verifylib's command line, its parameter files or the
environment: a test activates the simulation in its own process (:meth:`SimulatedMac.
activate`) or hands :class:`SimulatedMac.kernel_manager` to ``orchestrate.run_one`` so the
stage kernels start with it. The host it reports is marked ``simulated`` (recorded in
``run.json``), and ``verifylib verify`` refuses such a run unless told
``--allow-simulated``.

The stand-ins replace only what needs Apple's software, each at the narrowest seam:

- the host: ``verifylib.runtime.capabilities.simulate`` (macOS, arm64, full Xcode unless the
  scenario says Command Line Tools only);
- the Core ML build: a ``WHISPER_COREML=1`` target is built by the real CMake/compiler
  without the Core ML sources (which need Apple frameworks), then marked; every launch of
  a marked binary runs under ``runtime.py``, which prints the Core ML build's lines around
  the real binary's own output, so transcripts and timings are physical;
- ``xcrun`` (``--find coremlc``, ``coremlc compile``): ``xcrun.py``, launched in place of
  ``xcrun`` by the same redirection of verifylib's child processes;
- ``coremltools.models.CompiledMLModel``: executes the compiled folder's program with
  verifylib's MIL executor (so runtime parity measures a real computation);
- ``MLComputePlan``: a plan over the program's operations.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace as NS

HERE = Path(__file__).resolve().parent
MARKER = b"\n\0verifylib-simulated-coreml-build\0\n"
"""Appended to a binary the simulated toolchain built for WHISPER_COREML=1."""


@dataclass(frozen=True)
class Scenario:
    """How the simulated Mac behaves.

    Attributes
    ----------
    name : str
        A label for messages.
    coreml : str
        Behaviour of the Core ML whisper-cli (``runtime.BEHAVIOURS``).
    clip : str or None
        The fixture id a ``nonsense`` behaviour applies to.
    coremlc : str
        The developer tools and compiler (``xcrun.py``): xcode, clt, fail, misname, other-os.
    compiled : str
        ``CompiledMLModel`` behaviour: ok, nil (no output), fp16 (float16 output),
        renamed (output under another name), oversized (extra frames), load-error.
    plan : str
        ``MLComputePlan`` behaviour: ok, no-cost (no op carries a cost), unbalanced
        (costs that do not sum to 1).
    macos : tuple of int
        The macOS version reported.
    """

    name: str = "mac"
    coreml: str = "ok"
    clip: str | None = None
    coremlc: str = "xcode"
    compiled: str = "ok"
    plan: str = "ok"
    macos: tuple = (15, 1)


def _is_marked(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() < len(MARKER):
                return False
            fh.seek(-len(MARKER), os.SEEK_END)
            return fh.read() == MARKER
    except OSError:
        return False


class _Subprocess:
    """verifylib.runtime.runner's view of ``subprocess``: marked binaries and xcrun run simulated."""

    def __init__(self, sim: "SimulatedMac"):
        self._sim = sim

    def __getattr__(self, name):
        return getattr(subprocess, name)

    def Popen(self, argv, *args, **kwargs):  # noqa: N802 - subprocess's name
        return subprocess.Popen(self._sim.redirect(list(argv)), *args, **kwargs)


class SimulatedMac:
    """One simulated Mac: a scenario and a private state folder.

    Parameters
    ----------
    scenario : Scenario
    state_dir : path-like, optional
        Where run counters and the scenario file live (a new temporary folder by default).
    """

    def __init__(self, scenario: Scenario = Scenario(), state_dir: str | os.PathLike | None = None):
        self.scenario = scenario
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="verifylib-simmac-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.scenario_file = self.state_dir / "scenario.json"
        self.scenario_file.write_text(json.dumps(
            {**dataclasses.asdict(self.scenario), "state_dir": str(self.state_dir)}))
        self._undo: list = []

    @classmethod
    def from_file(cls, scenario_file: str | os.PathLike) -> "SimulatedMac":
        """The simulated Mac a scenario file describes (used by the stage kernels)."""
        data = json.loads(Path(scenario_file).read_text())
        state = data.pop("state_dir")
        data["macos"] = tuple(data["macos"])
        return cls(Scenario(**data), state)

    # ------------------------------------------------------------------ the host
    def host(self):
        """The simulated host's capabilities."""
        from verifylib.runtime.capabilities import HostCapabilities
        coremlc = (None if self.scenario.coremlc == "clt" else
                   str(self.state_dir / "Xcode.app/Contents/Developer/usr/bin/coremlc"))
        return HostCapabilities("Darwin", "arm64", tuple(self.scenario.macos), coremlc,
                                simulated=True)

    # ------------------------------------------------------------------ processes
    def redirect(self, argv: list) -> list:
        """The argv that runs instead of ``argv`` on this simulated Mac."""
        prog = os.fspath(argv[0])
        if prog == "xcrun":
            return [sys.executable, str(HERE / "xcrun.py"), str(self.scenario_file), *argv[1:]]
        if os.sep in prog and _is_marked(prog):
            return [sys.executable, str(HERE / "runtime.py"), str(self.scenario_file), "--",
                    *argv]
        return argv

    # ------------------------------------------------------------------ activation
    def _patch(self, obj, name, value) -> None:
        self._undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def activate(self) -> "SimulatedMac":
        """Install every stand-in in this process. Undo with :meth:`deactivate`."""
        import coremltools.models
        import coremltools.models.compute_plan as cp

        from verifylib.whispercpp import build
        from verifylib.runtime import capabilities, runner

        capabilities.simulate(self.host())
        self._undo.append((capabilities, "simulate", None))
        self._patch(runner, "subprocess", _Subprocess(self))
        self._patch(build, "_cmake_target", _coreml_cmake_target(build._cmake_target))
        self._patch(coremltools.models, "CompiledMLModel", _compiled_model_class(self))
        self._patch(cp, "MLComputePlan", _plan_class(self))
        return self

    def deactivate(self) -> None:
        """Remove the stand-ins installed by :meth:`activate`."""
        from verifylib.runtime import capabilities
        while self._undo:
            obj, name, old = self._undo.pop()
            if obj is capabilities and name == "simulate":
                capabilities.simulate(None)
            else:
                setattr(obj, name, old)

    def __enter__(self) -> "SimulatedMac":
        return self.activate()

    def __exit__(self, *exc) -> None:
        self.deactivate()

    # ------------------------------------------------------------------ kernels
    def kernel_manager(self):
        """A kernel manager class whose kernels start with this simulated Mac active."""
        from verifylib.batch.kernel import LocalKernelManager
        scenario_file = str(self.scenario_file)

        class SimulatedMacKernelManager(LocalKernelManager):
            def format_kernel_cmd(self, extra_arguments=None):
                return [sys.executable, str(HERE / "kernel.py"), scenario_file,
                        "-f", self.connection_file]

        return SimulatedMacKernelManager


# ---------------------------------------------------------------------- the Core ML build

def _coreml_cmake_target(real):
    """Build a WHISPER_COREML=1 target: the real GGML target from the same source and
    options minus the Core ML ones (the Core ML sources need Apple's frameworks), marked."""

    def build(src, bdir, opts, target, label, *, jobs, timeout, log):
        if opts.get("WHISPER_COREML") != "1":
            return real(src, bdir, opts, target, label, jobs=jobs, timeout=timeout, log=log)
        ggml = {k: v for k, v in opts.items() if not k.startswith("WHISPER_COREML")}
        built, configure = real(src, bdir, ggml, target, f"{label} (simulated Mac)",
                                jobs=jobs, timeout=timeout, log=log)
        with open(built, "ab") as fh:
            fh.write(MARKER)
        return built, configure

    return build


# ---------------------------------------------------------------------- Core ML runtime

def _program_of(mlmodelc: str, workdir: Path):
    """The compiled folder's ML program, read back through a package rebuilt from it."""
    import coremltools as ct
    from coremltools.proto import Model_pb2

    from verifylib.numerics.mil_exec import load_program

    spec = Model_pb2.Model()
    spec.ParseFromString((Path(mlmodelc) / "coremldata.bin").read_bytes())
    weights = Path(mlmodelc) / "weights"
    pkg = workdir / "program.mlpackage"
    ct.models.MLModel(spec, weights_dir=str(weights), skip_model_load=True).save(str(pkg))
    return load_program(pkg), spec


def _loadable(path: str) -> bool:
    sys.path.insert(0, str(HERE))
    try:
        from runtime import loadable
    finally:
        sys.path.remove(str(HERE))
    return loadable(path)


def _compiled_model_class(sim: SimulatedMac):
    behaviour = sim.scenario.compiled

    class SimulatedCompiledMLModel:
        """``CompiledMLModel`` on the simulated Mac: the program, executed op by op."""

        def __init__(self, path, compute_units=None, **_kw):
            if behaviour == "load-error" or not _loadable(str(path)):
                raise RuntimeError(f"Error compiling model: cannot load {path}")
            self._tmp = tempfile.TemporaryDirectory(prefix="verifylib-simmac-model-")
            self.program, spec = _program_of(str(path), Path(self._tmp.name))
            self.output_name = spec.description.output[0].name
            self.compute_units = compute_units

        def predict(self, inputs):
            import numpy as np

            from verifylib.numerics.mil_exec import execute
            if behaviour == "nil":
                return {}
            out = dict(execute(self.program, inputs, compute="float32").outputs)
            y = out[self.output_name]
            if behaviour == "fp16":
                out[self.output_name] = y.astype(np.float16)
            elif behaviour == "renamed":
                out = {"encoder_output": y}
            elif behaviour == "oversized":
                out[self.output_name] = np.concatenate([y, y[:, :1]], axis=1)
            return out

    return SimulatedCompiledMLModel


# ---------------------------------------------------------------------- MLComputePlan

class MLCPUComputeDevice:
    """Named like Core ML's CPU device class (devices are named by class)."""


class MLGPUComputeDevice:
    """Named like Core ML's GPU device class."""


class MLNeuralEngineComputeDevice:
    """Named like Core ML's Neural Engine device class."""

    total_core_count = 16


_CPU, _GPU, _ANE = MLCPUComputeDevice(), MLGPUComputeDevice(), MLNeuralEngineComputeDevice()
_ANE_OPS = ("conv", "matmul", "linear", "add", "mul", "layer_norm", "softmax", "gelu",
            "reshape", "transpose", "sub", "real_div")


def _plan_class(sim: SimulatedMac):
    behaviour = sim.scenario.plan

    class SimulatedMLComputePlan:
        """``MLComputePlan`` on the simulated Mac: one row per operation of the program.

        Constants get no device and no cost. Other operations prefer the Neural Engine when
        their type is one it runs (matrix products, convolutions, norms, elementwise), the
        CPU otherwise; an operation's cost is its share of all output elements.
        """

        def __init__(self, ops, rows):
            block = NS(operations=ops, inputs=[], output_names=[])
            self.model_structure = NS(program=NS(functions={"main": NS(block=block, inputs=[])}),
                                      neuralnetwork=None, pipeline=None)
            self._rows = rows

        @classmethod
        def load_from_path(cls, path, compute_units=None, **_kw):
            with tempfile.TemporaryDirectory(prefix="verifylib-simmac-plan-") as tmp:
                program, _ = _program_of(str(path), Path(tmp))
            ops, sizes = [], {}
            for op in program.ops:
                node = NS(operator_name=op.type, outputs=[NS(name=v.name) for v in op.outputs],
                          blocks=[], inputs={})
                ops.append(node)
                sizes[id(node)] = max(1, sum(math.prod(v.shape) for v in op.outputs))
            total = float(sum(sizes.values())) or 1.0
            rows = {}
            for node in ops:
                if id(node) not in sizes:
                    rows[id(node)] = (None, None)
                    continue
                kind = node.operator_name.split(".")[-1]
                dev = _ANE if kind in _ANE_OPS else _CPU
                cost = sizes[id(node)] / total
                if behaviour == "no-cost":
                    cost = None
                elif behaviour == "unbalanced":
                    cost *= 2
                rows[id(node)] = ((dev, [_CPU, _GPU] + ([_ANE] if dev is _ANE else [])), cost)
            return cls(ops, rows)

        def get_compute_device_usage_for_mlprogram_operation(self, op):
            usage = self._rows[id(op)][0]
            return None if usage is None else NS(preferred_compute_device=usage[0],
                                                 supported_compute_devices=usage[1])

        def get_estimated_cost_for_mlprogram_operation(self, op):
            cost = self._rows[id(op)][1]
            return None if cost is None else NS(weight=cost)

    return SimulatedMLComputePlan


__all__ = ["Scenario", "SimulatedMac", "MARKER"]
