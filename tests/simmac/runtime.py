#!/usr/bin/env python3
"""The simulated Mac's Core ML runtime: what a Core ML build of whisper.cpp v1.8.5 prints.

Launched in place of a binary the simulated toolchain built for ``WHISPER_COREML=1`` (a
real GGML ``whisper-cli`` or ``whisper-bench`` with a marker appended; the marker does not
change how the ELF runs). Usage: ``runtime.py SCENARIO_JSON -- BINARY ARGS...``.

The transcript, the timings and every GGML log line come from running that real binary
with the same arguments: hybrid transcripts are physical. Around them this script adds
what only the Core ML build prints, spelt as its OWN literals (it never imports verifylib,
so a rule and its stand-in cannot share a mistake), as v1.8.5 with
``WHISPER_COREML_ALLOW_FALLBACK`` OFF does:

- ``whisper_init_state`` tries the ``.mlmodelc`` derived from the ``-m`` string: it logs
  the load and either "Core ML model loaded" or the failure line, after which the state is
  freed and the CLI exits 3 with its init-failure line (fail closed);
- ``system_info`` says ``COREML = 1``.

A loadable ``.mlmodelc`` is one the simulated framework's memory knows
(``framework_memory.py``: compiled by the simulated ``coremlc`` for macOS, its ``model.mil``
unchanged, its weights there); any other folder fails to load. The scenario's ``coreml``
key switches one defect on (see :data:`BEHAVIOURS`).
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

# The fake whisper-cli in tests/helpers already spells whisper.cpp's derivation of the
# .mlmodelc path independently of verifylib; the simulated runtime uses the same one.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "helpers"))
from fake_whisper_cli import encoder_path  # noqa: E402

import framework_memory  # noqa: E402  (beside this script: sys.path[0])

BEHAVIOURS = {
    "ok": "the supported runtime",
    "stale": "a build without Core ML (COREML = 0, no Core ML lines): a stale binary",
    "fallback": "built with fallback ON: logs the failed load and goes on with the CPU encoder",
    "abort": "after a successful load, the run dies by SIGABRT",
    "segv": "after a successful load, the run dies by SIGSEGV",
    "exit134": "after a successful load, exits 134 (an abort reported shell-style)",
    "exit3-no-marker": "exits 3 without printing the Core ML failure line",
    "exit1": "exits 1 as on an argument error",
    "exit4": "exits 4 as on a grammar error",
    "exit10": "exits 10 as when processing fails",
    "hang": "hangs while loading the Core ML model",
    "nil": "loads, but the prediction is nil: an empty transcript, exit 0",
    "nonsense": "loads, but the clip named by 'clip' gets a non-empty nonsense transcript",
    "abort-first": "the first run that finds a loadable model (the warm-up) dies by SIGABRT while "
                   "loading; later runs are clean",
    "flaky": "every run that finds a loadable model fails the load after the first one",
    "slow-first": "the first run that finds a loadable model takes 3 s to load (on-device "
                  "compilation), then everything is clean",
    "stdout-log": "writes its log lines to stdout instead of stderr",
    "stale-log": "the load lines name another model's .mlmodelc (a log from another run)",
    "exit1-on-failure": "a failed Core ML load exits 1 with an error line, not 3",
}

NONSENSE = " Purple lighthouse gravel seventeen umbrella quietly orbit."


def _count(state_dir: str, key: str) -> int:
    """How many times ``key`` was seen before, counting this one (state kept in a file)."""
    path = os.path.join(state_dir, f"count-{key}")
    n = 0
    if os.path.isfile(path):
        with open(path) as fh:
            n = int(fh.read().strip() or 0)
    with open(path, "w") as fh:
        fh.write(str(n + 1))
    return n + 1


def _die(sig: int, stderr: bytes) -> None:
    sys.stderr.buffer.write(stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    time.sleep(5)
    os._exit(99)


def loadable(path: str, scenario: dict) -> bool:
    """Whether the simulated Core ML framework can load the compiled model at ``path``."""
    return framework_memory.loadable(framework_memory.framework_dir(scenario), path)


def _arg(argv, *names):
    for i, a in enumerate(argv):
        if a in names and i + 1 < len(argv):
            return argv[i + 1]
    return None


CORE_ML_STEP = b"whisper_init_state: compute buffer"
"""The first line after the point where a Core ML build of v1.8.5 tries its ``.mlmodelc``."""


def _run(argv: list, *, until_core_ml_step: bool) -> tuple[bytes, bytes, int | None]:
    """Run the real binary: stdout, stderr and its exit status.

    With ``until_core_ml_step`` it is stopped as it reaches the point where a Core ML build
    tries its ``.mlmodelc`` (:data:`CORE_ML_STEP`, which is left out): a build that cannot
    load it goes no further, so the real run's encoder and decoder would be computed only to
    be thrown away (a whisper-bench probe, about 20 s of one core). The status is then None.
    A run that never gets there is read to its end, as without.
    """
    if not until_core_ml_step:
        run = subprocess.run(argv, capture_output=True)
        return run.stdout, run.stderr, run.returncode
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: list[bytes] = []
    # stdout is drained beside stderr, so a full pipe never blocks the run.
    drain = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    drain.start()
    err = []
    stopped = False
    for line in iter(proc.stderr.readline, b""):
        if line.startswith(CORE_ML_STEP):
            proc.kill()
            stopped = True
            break
        err.append(line)
    proc.stderr.close()
    code = proc.wait()
    drain.join()
    return b"".join(out), b"".join(err), None if stopped else code


def _split(stderr: bytes) -> tuple[list[bytes], int]:
    """The real run's stderr lines, and where the Core ML block of whisper_init_state goes:
    after the KV-cache lines, before the compute buffers (or before system_info)."""
    lines = stderr.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(b"whisper_init_state: compute buffer") or \
                line.startswith(b"system_info:"):
            return lines, i
    return lines, len(lines)


def cli(scenario: dict, argv: list) -> int:
    behaviour = scenario.get("coreml", "ok")
    state = scenario["state_dir"]
    model = _arg(argv, "-m", "--model") or "models/ggml-base.en.bin"
    path = encoder_path(model)
    # Only a build that goes on past a failed load (fallback) or has no Core ML (stale)
    # needs the rest of the real run when the framework cannot load the encoder.
    # Asked once: the framework's answer does not change while the binary runs.
    model_there = os.path.isfile(model)
    can_load = model_there and loadable(path, scenario)
    fails_to_load = behaviour not in ("stale", "fallback") and model_there and not can_load
    run_out, run_err, code = _run(argv, until_core_ml_step=fails_to_load)
    if behaviour == "stale":
        sys.stdout.buffer.write(run_out)
        sys.stderr.buffer.write(run_err)
        return code
    lines, at = _split(run_err)
    head = b"".join(lines[:at])
    tail = b"".join(lines[at:])
    if code is not None and (not model_there
                             or code != 0 and b"whisper_init_state" not in head):
        # The model itself did not load: no Core ML step is reached.
        sys.stdout.buffer.write(run_out)
        sys.stderr.buffer.write(run_err)
        return code
    shown = ("/Users/someone/old-run/ggml-base.en-encoder.mlmodelc" if behaviour == "stale-log"
             else path)
    block = []
    if behaviour != "exit3-no-marker":
        block += [f"whisper_init_state: loading Core ML model from '{shown}'",
                  "whisper_init_state: first run on a device may take a while ..."]
    early = "".join(x + "\n" for x in block).encode()
    if behaviour == "hang":
        sys.stderr.buffer.write(head + early)
        sys.stderr.flush()
        time.sleep(3600)
    ok = can_load
    if behaviour == "abort-first" and ok and _count(state, "abort-first") == 1:
        # The first run that reaches a loadable model (the warm-up) crashes while loading.
        _die(signal.SIGABRT, head + early + b"libc++abi: terminating due to uncaught exception\n")
    if behaviour == "flaky" and ok and _count(state, "flaky") > 1:
        ok = False
    if behaviour in ("exit3-no-marker",):
        ok = False
    if behaviour == "slow-first" and ok and _count(state, "slow-first") == 1:
        time.sleep(3)
    if not ok:
        fail = (f"whisper_init_state: failed to load Core ML model from '{path}'\n".encode()
                if behaviour != "exit3-no-marker" else b"")
        if behaviour == "fallback":
            sys.stdout.buffer.write(run_out)
            sys.stderr.buffer.write(head + early + fail + tail.replace(b"COREML = 0", b"COREML = 1"))
            return code
        if behaviour == "exit1-on-failure":
            sys.stderr.buffer.write(head + early + fail + b"error: unknown failure\n")
            return 1
        sys.stderr.buffer.write(head + early + fail
                                + b"error: failed to initialize whisper context\n")
        return 3
    loaded = early + b"whisper_init_state: Core ML model loaded\n"
    err = head + loaded + tail.replace(b"COREML = 0", b"COREML = 1")
    out = run_out
    if behaviour == "nil":
        out = b"\n" if out.strip() else out
    if behaviour == "nonsense" and scenario.get("clip") and \
            os.path.basename(_arg(argv, "-f", "--file") or "").startswith(scenario["clip"]):
        out = (NONSENSE + "\n").encode()
    if behaviour == "abort":
        sys.stdout.buffer.write(out)
        _die(signal.SIGABRT, err[:len(head + loaded)] + b"free(): invalid pointer\n")
    if behaviour == "segv":
        sys.stdout.buffer.write(out)
        _die(signal.SIGSEGV, err[:len(head + loaded)])
    if behaviour == "stdout-log":
        out, err = err + out, b""
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(err)
    for status in (134, 1, 4, 10):
        if behaviour == f"exit{status}":
            return status
    return code


def bench(scenario: dict, argv: list) -> int:
    """whisper-bench of a Core ML build: its system_info says COREML = 1.

    v1.8.5's bench prints system_info first, then initializes the model: with no loadable
    ``.mlmodelc`` beside it (how stage 01 probes the build) the Core ML load fails, the
    context is not made and the bench exits 2 without benchmarking anything.
    """
    behaviour = scenario.get("coreml", "ok")
    model = _arg(argv, "-m", "--model") or "models/ggml-base.en.bin"
    path = encoder_path(model)
    fails_to_load = behaviour != "stale" and os.path.isfile(model) \
        and not loadable(path, scenario)
    out, err, code = _run(argv, until_core_ml_step=fails_to_load)
    sys.stdout.buffer.write(out)
    if behaviour != "stale":
        err = err.replace(b"COREML = 0", b"COREML = 1")
    if code is None:
        err += (f"whisper_init_state: loading Core ML model from '{path}'\n"
                "whisper_init_state: first run on a device may take a while ...\n"
                f"whisper_init_state: failed to load Core ML model from '{path}'\n"
                "error: failed to initialize whisper context\n").encode()
        code = 2
    sys.stderr.buffer.write(err)
    return code


def main() -> int:
    with open(sys.argv[1]) as fh:
        scenario = json.load(fh)
    argv = sys.argv[3:] if sys.argv[2] == "--" else sys.argv[2:]
    if os.path.basename(argv[0]).startswith("whisper-bench"):
        return bench(scenario, argv)
    return cli(scenario, argv)


if __name__ == "__main__":
    sys.exit(main())
