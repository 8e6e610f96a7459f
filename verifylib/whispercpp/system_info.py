"""What a published whisper-cli says of itself: its ``system_info`` line, and the build evidence.

A brief real run (the tree's test model and sample) makes whisper-cli print the line that
names its compiled features, ``COREML`` among them, and log the ggml backend it chose;
:func:`build_evidence` joins that probe with the published build into the ``build.ggml``
(or ``build.coreml``) evidence. The launch goes through
:func:`verifylib.runtime.runner.run_whisper_cli`, so the bound launch ledger records it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verifylib.canonical import read_json
from verifylib.runtime import contracts
from verifylib.runtime.runner import RunResult, run_record, run_whisper_cli
from verifylib.whispercpp.build import BuildResult


def parse_system_info(text: str) -> tuple[str | None, int | None]:
    """Find whisper-cli's ``system_info:`` line and its ``COREML`` value.

    Parameters
    ----------
    text : str
        Captured output (stderr, or stderr and stdout together).

    Returns
    -------
    tuple
        The first line containing :data:`contracts.SYSTEM_INFO_PREFIX` (stripped) or None,
        and the integer after :data:`contracts.COREML_FLAG` on that line, or None.
    """
    for raw in text.splitlines():
        if contracts.SYSTEM_INFO_PREFIX in raw:
            line = raw.strip()
            m = re.search(re.escape(contracts.COREML_FLAG) + r"(\d+)", line)
            return line, (int(m.group(1)) if m else None)
    return None, None


@dataclass(frozen=True)
class SystemInfoProbe:
    """One whisper-cli run made to read its ``system_info`` line.

    Attributes
    ----------
    result : RunResult
        The complete run (exit, signal, both streams).
    system_info_line : str or None
        The ``system_info:`` line (stderr first, then stdout), or None.
    coreml : int or None
        Its ``COREML = <n>`` value, or None if absent.
    backend : str or None
        The ggml backends the launch logged choosing
        (:func:`verifylib.runtime.contracts.launch_backend` of both streams); None when
        not read.
    """

    result: RunResult
    system_info_line: str | None
    coreml: int | None
    backend: str | None = None

    def to_evidence(self) -> dict[str, Any]:
        """Return the run's record plus what the probe read, as a JSON-able dict.

        The record is :func:`verifylib.runtime.runner.run_record`'s, with its launch citation
        when the launch was recorded.

        Returns
        -------
        dict
            The run record with the probe's fields added (``backend`` only when read).
        """
        out = dict(run_record(self.result), system_info_line=self.system_info_line,
                   coreml=self.coreml)
        if self.backend is not None:
            out["backend"] = self.backend
        return out


def probe_system_info(binary: Path, model: Path, audio: Path,
                      timeout: float = 120.0) -> SystemInfoProbe:
    """Run a published whisper-cli briefly to read its ``system_info`` line.

    whisper-cli prints the line only after the model has loaded and the audio has been
    read, so a loadable model and real audio are needed (the tree's own
    ``models/for-tests-ggml-tiny.en.bin`` and ``samples/jfk.wav`` do). Runs greedy, on the
    first second, two threads; never with ``-np`` (it would hide the line) or ``-ac``.
    The run goes through :func:`verifylib.runtime.runner.run_whisper_cli`, so it is recorded in
    the bound launch ledger and :meth:`SystemInfoProbe.to_evidence` cites it.

    Like every gate run it keeps whisper-cli's defaults (``use_gpu`` true, no ``-ng``), so
    the backend it logs choosing is the one the binary's other launches get: a build
    without a GPU backend logs "no GPU found" and runs on the CPU, which is why ``-ng`` is
    not needed for ``cpu`` (``src/whisper.cpp``: ``whisper_backend_init_gpu`` only takes a
    device of GPU type, and with Metal compiled out the CPU device is the only one).

    Parameters
    ----------
    binary : Path
        The published binary, run from its final path.
    model : Path
        A ggml model file.
    audio : Path
        A 16 kHz WAV file.
    timeout : float
        Seconds before the run is killed.

    Returns
    -------
    SystemInfoProbe
        The run and what it said.
    """
    binary = Path(binary).resolve()
    argv = [str(binary), "-m", str(Path(model).resolve()), "-f", str(Path(audio).resolve()),
            "-bs", "1", "-bo", "1", "-d", "1000", "-t", "2"]
    res = run_whisper_cli(argv, cwd=binary.parent, timeout=timeout)
    line, coreml = parse_system_info(res.stderr_text)
    if line is None:
        line, coreml = parse_system_info(res.stdout_text)
    backend = contracts.launch_backend(res.stderr_text + "\n" + res.stdout_text)
    return SystemInfoProbe(result=res, system_info_line=line, coreml=coreml, backend=backend)


def build_evidence(build: BuildResult, probe: SystemInfoProbe) -> dict[str, Any]:
    """Assemble ``build.ggml`` (or ``build.coreml``) evidence.

    Parameters
    ----------
    build : BuildResult
        The published build.
    probe : SystemInfoProbe
        A probe of that binary.

    Returns
    -------
    dict
        ``{"built": True, "variant", "key", "binary", "sha256", "recorded_sha256",
        "static", "needed_libs", "options", "compiler", "cached", "seconds", "tree_id",
        "patch_sha256", "ggml", "ggml_backend", "probe": SystemInfoProbe.to_evidence()}``;
        ``ggml`` is the shared ggml's identity
        (:meth:`verifylib.whispercpp.shared_ggml.GgmlBuild.to_evidence`, None when built in
        one piece), ``ggml_backend`` the backend the options pin (left out when they pin
        none).
    """
    try:
        recorded = read_json(build.build_json).get("sha256")
    except (OSError, ValueError, AttributeError):
        recorded = None
    out = {"built": True, "variant": build.variant, "key": build.key, "binary": str(build.binary),
           "sha256": build.sha256, "recorded_sha256": recorded, "static": build.static,
           "needed_libs": list(build.needed_libs), "options": dict(build.options),
           "compiler": dict(build.compiler), "cached": build.cached,
           "seconds": round(build.seconds, 3), "tree_id": build.tree_id,
           "patch_sha256": build.patch_sha256}
    if build.ggml is not None:
        out["ggml"] = dict(build.ggml)
    if build.ggml_backend is not None:
        out["ggml_backend"] = build.ggml_backend
    out["probe"] = probe.to_evidence()
    return out
