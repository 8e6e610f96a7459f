#!/usr/bin/env python3
"""The simulated Mac's Core ML runtime: a Core ML build of whisper.cpp v1.8.5, run for real.

Launched in place of a binary the simulated toolchain built for ``WHISPER_COREML=1``. That
binary is upstream's ``whisper-cli`` (or ``whisper-bench``) compiled with
``WHISPER_USE_COREML`` against verifylib's Core ML seam (docs/runtime-contract.md §11)
instead of Apple's ``whisper-encoder.mm``, fallback OFF; a GGML build of the same tree and
options (its *twin*) is appended to it, then the marker (``tests/simmac/__init__.py``).
Usage: ``runtime.py SCENARIO_JSON [--seam-socket PATH] -- BINARY ARGS...``.

Every Core ML line a run prints is whisper.cpp's own: the load of the ``.mlmodelc`` derived
from ``-m``, "Core ML model loaded" or the failure line and the fail-closed exit 3,
``COREML = 1`` in ``system_info``; and an encoder that loaded runs the compiled program
(the seam's executor, served by the simulated Mac's process at ``--seam-socket``), so
hybrid transcripts carry the program's numbers. What the simulated framework cannot load
(``framework_memory.py``: compiled by the simulated ``coremlc`` for macOS, its
``model.mil`` unchanged, its weights there) the executor refuses, and whisper.cpp fails
closed by itself. The seam's own lines (``verifylib-seam: …``) are taken out: a real Core
ML build has none, and the Core ML rules refuse a stream that holds one.

The scenario's ``coreml`` key switches one defect on (see :data:`BEHAVIOURS`), applied on
top of that physical run; the behaviours' literals are this script's OWN (it never imports
verifylib, so a rule and its stand-in cannot share a mistake). ``stale`` runs the twin, a
build without Core ML; ``fallback`` runs the twin where the load fails and adds the lines a
build with fallback ON prints before it goes on with the GGML encoder.
"""

import json
import os
import re
import secrets
import signal
import struct
import subprocess
import sys
import tempfile
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

# whisper.cpp v1.8.5's lines, spelt here on their own (src/whisper.cpp, examples/cli).
LOADING = b"whisper_init_state: loading Core ML model from '"
FIRST_RUN = b"whisper_init_state: first run on a device may take a while ..."
LOADED = b"whisper_init_state: Core ML model loaded"
FAILED = b"whisper_init_state: failed to load Core ML model from '"
INIT_FAILED = b"error: failed to initialize whisper context"
SEAM_LINE = b"verifylib-seam: "
OTHER_RUN = b"/Users/someone/old-run/ggml-base.en-encoder.mlmodelc"

TRAILER = struct.Struct("<Q")
MARKER = b"\n\0verifylib-simulated-coreml-build\0\n"  # tests/simmac/__init__.py's


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


def twin(binary: str, state_dir: str) -> str:
    """The GGML build appended to the marked ``binary``, written out once as an executable."""
    with open(binary, "rb") as fh:
        fh.seek(-(len(MARKER) + TRAILER.size), os.SEEK_END)
        (size,) = TRAILER.unpack(fh.read(TRAILER.size))
        fh.seek(-(len(MARKER) + TRAILER.size + size), os.SEEK_END)
        data = fh.read(size)
    import hashlib
    folder = os.path.join(state_dir, "twins")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{hashlib.sha256(data).hexdigest()[:16]}-"
                                f"{os.path.basename(binary)}")
    if not os.path.isfile(path):
        fd, tmp = tempfile.mkstemp(dir=folder)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    return path


def _env(socket_path, give: bool) -> dict:
    """The run's environment: the caller's, with the seam's executor when the load may succeed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERIFYLIB_SEAM_")}
    if give and socket_path:
        env["VERIFYLIB_SEAM_SOCKET"] = socket_path
        env["VERIFYLIB_SEAM_LAUNCH"] = secrets.token_hex(8)
    return env


def _without_seam(stderr: bytes) -> bytes:
    return b"".join(line for line in stderr.splitlines(keepends=True)
                    if not line.startswith(SEAM_LINE))


def _run(argv: list, env: dict) -> tuple[bytes, bytes, int]:
    run = subprocess.run(argv, capture_output=True, env=env)
    return run.stdout, _without_seam(run.stderr), run.returncode


def _until(argv: list, env: dict, last: bytes) -> bytes:
    """Run ``argv`` until its stderr's line starting with ``last``, then stop it: that stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = []
    for line in iter(proc.stderr.readline, b""):
        if not line.startswith(SEAM_LINE):
            err.append(line)
        if line.startswith(last):
            break
    proc.kill()
    proc.stderr.close()
    proc.wait()
    return b"".join(err)


def _through(stderr: bytes, prefix: bytes) -> bytes:
    """``stderr`` up to and including its first line starting with ``prefix``."""
    at = stderr.find(b"\n" + prefix)
    if at < 0:
        return stderr
    end = stderr.find(b"\n", at + 1)
    return stderr if end < 0 else stderr[:end + 1]


def _fallback(scenario: dict, argv: list, path: str) -> int:
    """A build with fallback ON that cannot load: the twin's run with the failed load logged."""
    out, err, code = _run([twin(argv[0], scenario["state_dir"]), *argv[1:]], _env(None, False))
    lines = err.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines)
               if line.startswith((b"whisper_init_state: compute buffer", b"system_info:"))),
              len(lines))
    block = (LOADING + path.encode() + b"'\n" + FIRST_RUN + b"\n" + FAILED + path.encode()
             + b"'\n")
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(b"".join(lines[:at]) + block
                            + b"".join(lines[at:]).replace(b"COREML = 0", b"COREML = 1"))
    return code


def cli(scenario: dict, argv: list, socket_path) -> int:
    behaviour = scenario.get("coreml", "ok")
    state = scenario["state_dir"]
    if behaviour == "stale":
        out, err, code = _run([twin(argv[0], state), *argv[1:]], _env(None, False))
        sys.stdout.buffer.write(out)
        sys.stderr.buffer.write(err)
        return code
    model = _arg(argv, "-m", "--model") or "models/ggml-base.en.bin"
    path = encoder_path(model)
    # Asked once: the framework's answer does not change while the binary runs.
    can_load = os.path.isfile(model) and loadable(path, scenario)
    if behaviour == "fallback" and os.path.isfile(model) and not can_load:
        return _fallback(scenario, argv, path)
    give = True
    if behaviour == "hang" and os.path.isfile(model):
        sys.stderr.buffer.write(_until(argv, _env(socket_path, False), FIRST_RUN))
        sys.stderr.flush()
        time.sleep(3600)
    if behaviour == "abort-first" and can_load and _count(state, "abort-first") == 1:
        # The first run that reaches a loadable model (the warm-up) crashes while loading.
        _die(signal.SIGABRT, _until(argv, _env(socket_path, False), FIRST_RUN)
             + b"libc++abi: terminating due to uncaught exception\n")
    if behaviour == "flaky" and can_load and _count(state, "flaky") > 1:
        give = False
    if behaviour == "exit3-no-marker":
        give = False
    if behaviour == "slow-first" and can_load and _count(state, "slow-first") == 1:
        time.sleep(3)
    out, err, code = _run(argv, _env(socket_path, give))
    if behaviour == "exit3-no-marker":
        err = b"".join(line for line in err.splitlines(keepends=True)
                       if not line.startswith((LOADING, FIRST_RUN, FAILED)))
    if behaviour == "stale-log":
        # The load line names another model; the failure line (if any) stays whisper.cpp's.
        err = re.sub(rb"(?m)^(" + re.escape(LOADING) + rb")[^'\n]*'", rb"\g<1>" + OTHER_RUN + b"'",
                     err)
    if behaviour == "exit1-on-failure" and code == 3 and FAILED in err:
        sys.stderr.buffer.write(err.replace(INIT_FAILED, b"error: unknown failure"))
        return 1
    if code != 0 or LOADED not in err:
        sys.stdout.buffer.write(out)
        sys.stderr.buffer.write(err)
        return code
    if behaviour == "nil":
        out = b"\n" if out.strip() else out
    if behaviour == "nonsense" and scenario.get("clip") and \
            os.path.basename(_arg(argv, "-f", "--file") or "").startswith(scenario["clip"]):
        out = (NONSENSE + "\n").encode()
    if behaviour in ("abort", "segv"):
        sys.stdout.buffer.write(out)
        loaded = _through(err, LOADED)
        _die(signal.SIGABRT if behaviour == "abort" else signal.SIGSEGV,
             loaded + (b"free(): invalid pointer\n" if behaviour == "abort" else b""))
    if behaviour == "stdout-log":
        out, err = err + out, b""
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(err)
    for status in (134, 1, 4, 10):
        if behaviour == f"exit{status}":
            return status
    return code


def bench(scenario: dict, argv: list, socket_path) -> int:
    """whisper-bench of the Core ML build: its system_info says COREML = 1, physically.

    v1.8.5's bench prints system_info first, then initializes the model: with no loadable
    ``.mlmodelc`` beside it (how stage 01 probes the build) the Core ML load fails, the
    context is not made and the bench exits 2 without benchmarking anything.
    """
    if scenario.get("coreml", "ok") == "stale":
        argv = [twin(argv[0], scenario["state_dir"]), *argv[1:]]
    out, err, code = _run(argv, _env(socket_path, True))
    sys.stdout.buffer.write(out)
    sys.stderr.buffer.write(err)
    return code


def main() -> int:
    with open(sys.argv[1]) as fh:
        scenario = json.load(fh)
    rest = sys.argv[2:]
    socket_path = None
    if rest[:1] == ["--seam-socket"]:
        socket_path, rest = rest[1], rest[2:]
    argv = rest[1:] if rest[:1] == ["--"] else rest
    if os.path.basename(argv[0]).startswith("whisper-bench"):
        return bench(scenario, argv, socket_path)
    return cli(scenario, argv, socket_path)


if __name__ == "__main__":
    sys.exit(main())
