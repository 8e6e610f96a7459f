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
    run = subprocess.run(argv, capture_output=True)
    if behaviour == "stale":
        sys.stdout.buffer.write(run.stdout)
        sys.stderr.buffer.write(run.stderr)
        return run.returncode
    model = _arg(argv, "-m", "--model") or "models/ggml-base.en.bin"
    lines, at = _split(run.stderr)
    head = b"".join(lines[:at])
    tail = b"".join(lines[at:])
    if not os.path.isfile(model) or run.returncode != 0 and b"whisper_init_state" not in head:
        # The model itself did not load: no Core ML step is reached.
        sys.stdout.buffer.write(run.stdout)
        sys.stderr.buffer.write(run.stderr)
        return run.returncode
    path = encoder_path(model)
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
    ok = loadable(path, scenario)
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
            sys.stdout.buffer.write(run.stdout)
            sys.stderr.buffer.write(head + early + fail + tail.replace(b"COREML = 0", b"COREML = 1"))
            return run.returncode
        if behaviour == "exit1-on-failure":
            sys.stderr.buffer.write(head + early + fail + b"error: unknown failure\n")
            return 1
        sys.stderr.buffer.write(head + early + fail
                                + b"error: failed to initialize whisper context\n")
        return 3
    loaded = early + b"whisper_init_state: Core ML model loaded\n"
    err = head + loaded + tail.replace(b"COREML = 0", b"COREML = 1")
    out = run.stdout
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
    for code in (134, 1, 4, 10):
        if behaviour == f"exit{code}":
            return code
    return run.returncode


def bench(scenario: dict, argv: list) -> int:
    """whisper-bench of a Core ML build: its system_info says COREML = 1."""
    run = subprocess.run(argv, capture_output=True)
    sys.stdout.buffer.write(run.stdout)
    err = run.stderr
    if scenario.get("coreml", "ok") != "stale":
        err = err.replace(b"COREML = 0", b"COREML = 1")
    sys.stderr.buffer.write(err)
    return run.returncode


def main() -> int:
    with open(sys.argv[1]) as fh:
        scenario = json.load(fh)
    argv = sys.argv[3:] if sys.argv[2] == "--" else sys.argv[2:]
    if os.path.basename(argv[0]).startswith("whisper-bench"):
        return bench(scenario, argv)
    return cli(scenario, argv)


if __name__ == "__main__":
    sys.exit(main())
