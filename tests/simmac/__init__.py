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
  with whisper.cpp's Core ML path compiled in and verifylib's Core ML seam linked where
  Apple's ``whisper-encoder.mm`` would be (docs/runtime-contract.md §11), fallback OFF; a
  GGML build of the same tree and options (its twin, for the stale and fallback
  behaviours) and a marker are appended. Every launch of a marked binary runs under
  ``runtime.py``; its Core ML calls are answered by a seam executor this process serves
  (:meth:`SimulatedMac.activate`), which loads only what the simulated framework can load
  and runs the compiled program. So every Core ML line, transcript and timing is
  physical, and hybrid transcripts carry the program's numbers;
- ``xcrun`` (``--find coremlc``, ``coremlc compile``): ``xcrun.py``, launched in place of
  ``xcrun`` by the same redirection of verifylib's child processes;
- Core ML itself: only coremltools' native proxies (``libcoremlpython``'s ``_MLModelProxy``,
  ``_MLComputePlanProxy`` and the device proxies), patched where coremltools looks them up
  (``native.py``), and the macOS version coremltools reads. coremltools' real Python classes
  (``CompiledMLModel``, ``MLComputePlan``, the structure, usage, cost and device classes)
  run unchanged on top: a compiled model executes its program with verifylib's MIL
  executor (so runtime parity measures a real computation), a plan covers every operation
  of the program as Core ML gives them. What loads is what the simulated ``coremlc``
  compiled, remembered by the simulated framework (``framework_memory.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARKER = b"\n\0verifylib-simulated-coreml-build\0\n"
"""Ends a binary the simulated toolchain built for WHISPER_COREML=1 (after its GGML twin and
the twin's size, ``<Q``)."""

BUILD_RECIPE = "verifylib-simulated-coreml-build/2: the seam in Core ML's place, a GGML twin"
"""Enters the build key of a simulated Core ML build: a binary built by an older recipe
(the GGML binary, marked) is never taken from the cache for one of this recipe."""


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
        The developer tools and compiler (``xcrun.py``): xcode, clt, clt-selected, license,
        fail, misname, other-os.
    compiled : str
        ``CompiledMLModel`` behaviour: ok, nil (no output), fp16 (float16 output),
        renamed (output under another name), oversized (extra frames), load-error.
    plan : str
        ``MLComputePlan`` behaviour: ok, no-cost (no op carries a cost), unbalanced
        (costs that do not sum to 1), no-device (a costed compute op without a device).
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
        Where run counters, the scenario file and the log of Core ML loads live (a new
        temporary folder by default).
    framework_dir : path-like, optional
        The simulated Core ML framework's memory of compiled models
        (``framework_memory.default_dir()``, shared by every simulated Mac, by default).
    """

    def __init__(self, scenario: Scenario = Scenario(), state_dir: str | os.PathLike | None = None,
                 framework_dir: str | os.PathLike | None = None):
        from . import framework_memory
        self.scenario = scenario
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="verifylib-simmac-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.framework_dir = Path(framework_dir or framework_memory.default_dir())
        self.scenario_file = self.state_dir / "scenario.json"
        self.scenario_file.write_text(json.dumps(
            {**dataclasses.asdict(self.scenario), "state_dir": str(self.state_dir),
             "framework_dir": str(self.framework_dir)}))
        self._undo: list = []
        self._active = False
        self._executor = None

    @classmethod
    def from_file(cls, scenario_file: str | os.PathLike) -> "SimulatedMac":
        """The simulated Mac a scenario file describes (used by the stage kernels)."""
        data = json.loads(Path(scenario_file).read_text())
        state = data.pop("state_dir")
        framework_dir = data.pop("framework_dir", None)
        data["macos"] = tuple(data["macos"])
        return cls(Scenario(**data), state, framework_dir)

    # ------------------------------------------------------------------ the host
    def host(self):
        """The simulated host's capabilities, detected by verifylib from the simulated tools.

        The Mac's disk holds ``Xcode.app`` (its ``Contents/Developer`` folder, in the state
        folder) unless the scenario has the Command Line Tools alone; ``xcode-select -p``
        and ``xcrun`` answer as ``xcrun.py`` says. Which developer tools that makes, and
        whether full Xcode is there, is decided by verifylib's own detection
        (``capabilities.probe_xcode``), as on a real Mac.
        """
        from verifylib.runtime.capabilities import HostCapabilities, probe_xcode
        from verifylib.runtime.runner import run
        if self.scenario.coremlc != "clt":
            (self.state_dir / "Xcode.app" / "Contents" / "Developer").mkdir(parents=True,
                                                                          exist_ok=True)
        script = [sys.executable, str(HERE / "xcrun.py"), str(self.scenario_file)]

        def tool(argv):
            # Apple's two tools, answered by the scenario (xcode-select through xcrun.py too).
            return run([*script, *(argv if argv[0] == "xcode-select" else argv[1:])],
                       timeout=30)

        xcode = probe_xcode(tool=tool, environ={}, applications=(str(self.state_dir),))
        return HostCapabilities("Darwin", "arm64", tuple(self.scenario.macos), xcode.coremlc,
                                simulated=True, xcode=xcode)

    # ------------------------------------------------------------------ processes
    def redirect(self, argv: list) -> list:
        """The argv that runs instead of ``argv`` on this simulated Mac."""
        prog = os.fspath(argv[0])
        if prog == "xcrun":
            return [sys.executable, str(HERE / "xcrun.py"), str(self.scenario_file), *argv[1:]]
        if os.sep in prog and _is_marked(prog):
            seam = [] if not self._active else ["--seam-socket", self._seam_socket()]
            return [sys.executable, str(HERE / "runtime.py"), str(self.scenario_file), *seam,
                    "--", *argv]
        return argv

    def _seam_socket(self) -> str:
        """The socket of this Mac's Core ML step, served from here from the first launch on."""
        if self._executor is None:
            from verifylib.numerics.seam_executor import SeamExecutor
            self._executor = SeamExecutor(load=self.core_ml_load).__enter__()
        return self._executor.socket_path

    # ------------------------------------------------------------------ activation
    def _patch(self, obj, name, value) -> None:
        self._undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def activate(self) -> "SimulatedMac":
        """Install every stand-in in this process. Undo with :meth:`deactivate`."""
        from verifylib.runtime import capabilities, runner
        from verifylib.whispercpp import build, cmake_steps

        capabilities.simulate(self.host())
        self._undo.append((capabilities, "simulate", None))
        self._patch(runner, "subprocess", _Subprocess(self))
        self._patch(cmake_steps, "cmake_target", _coreml_cmake_target(cmake_steps.cmake_target))
        self._patch(build, "build_key", _recipe_keyed(build.build_key))
        self._active = True
        for module, name, value in self.native_patches():
            self._patch(module, name, value)
        return self

    def core_ml_load(self, folder: str):
        """Load an ``.mlmodelc`` for whisper.cpp's Core ML step, as this Mac's framework would.

        What the simulated framework cannot load (``framework_memory.recall``) is refused
        with its reason, so whisper.cpp's ``init`` gets NULL and fails closed; a folder it
        can load runs its compiled ``model.mil`` with the folder's own weights
        (:func:`verifylib.models.seam_encoder.load_seam_program`).
        """
        from verifylib.models.seam_encoder import SeamLoadRefused, load_seam_program

        from . import framework_memory
        try:
            framework_memory.recall(self.framework_dir, folder)
        except framework_memory.NotLoadable as exc:
            raise SeamLoadRefused(f"Core ML cannot load {folder}: {exc}") from None
        return load_seam_program(folder)

    def core_ml_launches(self) -> tuple:
        """What this Mac's Core ML step did for each launch of a Core ML build since
        :meth:`activate` (``SeamExecutor.launches``: the load or its refusal, each encode)."""
        return () if self._executor is None else self._executor.launches()

    def native_patches(self) -> list:
        """What :meth:`activate` puts where coremltools looks its native side up.

        Returns
        -------
        list of (module, name, value)
            The proxies of ``native.framework`` in each coremltools module that imported
            them from ``libcoremlpython`` on the code paths verifylib uses (compiled
            models, compute plans, compute devices), and the macOS version
            ``CompiledMLModel`` checks (coremltools asks ``sw_vers``). ``MLModel`` keeps
            no proxy: verifylib never predicts with a package.
        """
        import coremltools.models._compiled_model as compiled_model
        import coremltools.models.compute_device as compute_device
        import coremltools.models.compute_plan as compute_plan

        from . import native
        fw = native.framework({**dataclasses.asdict(self.scenario),
                               "framework_dir": str(self.framework_dir)},
                              self.state_dir, tuple(self.scenario.macos))
        macos = tuple(self.scenario.macos)
        return [
            (compiled_model, "_MLModelProxy", fw._MLModelProxy),
            (compiled_model, "_macos_version", lambda: macos),
            (compute_plan, "_MLModelProxy", fw._MLModelProxy),
            (compute_plan, "_MLComputePlanProxy", fw._MLComputePlanProxy),
            (compute_device, "_MLModelProxy", fw._MLModelProxy),
            (compute_device, "_MLCPUComputeDeviceProxy", fw._MLCPUComputeDeviceProxy),
            (compute_device, "_MLGPUComputeDeviceProxy", fw._MLGPUComputeDeviceProxy),
            (compute_device, "_MLNeuralEngineComputeDeviceProxy",
             fw._MLNeuralEngineComputeDeviceProxy),
        ]

    def deactivate(self) -> None:
        """Remove the stand-ins installed by :meth:`activate`."""
        from verifylib.runtime import capabilities
        self._active = False
        if self._executor is not None:
            self._executor.close()
            self._executor = None
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
    def kernel_manager(self, keep_reports: str | os.PathLike | None = None):
        """A kernel manager class whose kernels start with this simulated Mac active.

        Parameters
        ----------
        keep_reports : path-like, optional
            A folder where each kernel pickles the report its notebook's audit call
            returned (``<stage>.pickle``), for tests that compare it with what is read back.
        """
        from verifylib.batch.kernel import LocalKernelManager
        scenario_file = str(self.scenario_file)
        keep = [] if keep_reports is None else ["--keep-reports", str(keep_reports)]

        class SimulatedMacKernelManager(LocalKernelManager):
            def format_kernel_cmd(self, extra_arguments=None):
                return [sys.executable, str(HERE / "kernel.py"), scenario_file, *keep,
                        "-f", self.connection_file]

        return SimulatedMacKernelManager


# ---------------------------------------------------------------------- the Core ML build

def _coreml_cmake_target(real):
    """Build a WHISPER_COREML=1 target as the simulated Mac's Core ML build: whisper.cpp's
    Core ML path against verifylib's seam, with its GGML twin appended, marked.

    Apple's Core ML sources need Apple's frameworks, so the seam (the ``seam`` variant's
    options and files) stands where they would be; fallback stays OFF. The twin is the
    same target from the same source and options minus the Core ML ones: what a stale
    binary or a fallback build runs (``runtime.py``).
    """

    def build(src, bdir, opts, target, label, *, jobs, timeout, log, ggml=None, ccache=None):
        from verifylib.whispercpp import build_options, seam_sources
        if opts.get("WHISPER_COREML") != "1":
            return real(src, bdir, opts, target, label, jobs=jobs, timeout=timeout, log=log,
                        ggml=ggml, ccache=ccache)
        plain = {k: v for k, v in opts.items() if not k.startswith("WHISPER_COREML")}
        twin, _ = real(src, bdir.with_name(bdir.name + "-ggml-twin"), plain, target,
                       f"{label} (simulated Mac: its GGML twin)", jobs=jobs, timeout=timeout,
                       log=log, ggml=ggml, ccache=ccache)
        if not (src / seam_sources.SEAM_FOLDER).is_dir():
            seam_sources.lay_out(src)
        built, configure = real(src, bdir, {**plain, **build_options.variant_options("seam")},
                                target, f"{label} (simulated Mac: the seam in Core ML's place)",
                                jobs=jobs, timeout=timeout, log=log, ggml=ggml, ccache=ccache)
        data = twin.read_bytes()
        with open(built, "ab") as fh:
            fh.write(data + struct.pack("<Q", len(data)) + MARKER)
        return built, configure

    return build


def _recipe_keyed(real):
    """``build_key`` with :data:`BUILD_RECIPE` among a Core ML build's inputs."""

    def key(tree_id, patch_sha256, variant, options, compiler, ggml_key=None, *, launcher=None):
        if variant == "coreml":
            from verifylib.whispercpp.seam_sources import seam_digest
            options = {**options, "VERIFYLIB_SIMULATED_MAC": f"{BUILD_RECIPE}; {seam_digest()}"}
        return real(tree_id, patch_sha256, variant, options, compiler, ggml_key,
                    launcher=launcher)

    return key


__all__ = ["Scenario", "SimulatedMac", "MARKER"]
