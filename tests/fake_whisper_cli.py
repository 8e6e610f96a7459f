#!/usr/bin/env python3
"""A scripted stand-in for whisper.cpp's ``whisper-cli``, for tests only.

It spells every line whisper-cli and libwhisper print as its OWN literals (it never
imports verifylib: a test that passes because both sides read one constant proves
nothing) and plays one scenario, chosen by the environment variable
``FAKE_WHISPER_SCENARIO`` or, when that is unset, by a file ``<argv[0]>.scenario`` beside
the executable (the canary stage launches binaries with a sanitized environment, so the
file is how a test steers a run it does not launch itself).

The honest behaviour follows the v1.8.5 sources: logs on stderr, the transcript on
stdout; ``-np`` silences every log line; ``-p N`` creates N states (N Core ML loads);
without ``-nfa`` DTW is disabled with a warning; ``-nfa -dtw large.v3`` on a 4-layer model
fails ``aheads_masks_init`` and frees the state before the batch is initialized; a Core ML
build derives ``<-m minus extension and -qX_Y>-encoder.mlmodelc`` from the argument string
and fails closed (exit 3) when it is missing. Scenarios switch defects on:

========================  ==================================================================
coreml                    Core ML build, fallback OFF, patched batch (the supported runtime)
coreml-abort              ... a failed init frees garbage: SIGABRT (the unpatched defect)
coreml-segv               ... SIGSEGV instead
coreml-exit134            ... the abort reported shell-style as exit status 134
coreml-hang               ... hangs while "loading" (never exits)
coreml-slow-first         ... the first run ever sleeps ``FAKE_SLOW_S`` (default 2) s loading
coreml-fallback           built with WHISPER_COREML_ALLOW_FALLBACK: logs the failure, goes on
coreml-no-failure-line    fails init (exit 3) without printing the Core ML failure line
coreml-no-init-line       prints the failure line, exits 3 without the CLI's init line
coreml-nil                loads, but the prediction is nil: empty transcript, exit 0
coreml-stale-log          replays another run's log (markers naming another model's path)
coreml-stdout-log         writes its log lines to stdout instead of stderr
ggml                      no Core ML code (COREML = 0), patched batch
ggml-unpatched            no Core ML code, unpatched: a failed init dies by SIGSEGV
ggml-flaky                patched-looking, but every third run dies by SIGABRT
ggml-asan                 AddressSanitizer build, patched: behaves like ``ggml``
ggml-unpatched-asan       AddressSanitizer build, unpatched: a failed init prints ASan's
                          report of the bad free in whisper_batch_free and exits 1
========================  ==================================================================
"""

import os
import signal
import sys
import time

TRANSCRIPT = (" And so my fellow Americans, ask not what your country can do for you, ask "
              "what you can do for your country.")
N_TEXT_LAYER = 4
ALIGNMENT_LAYERS = {"tiny.en": 2, "tiny": 2, "base.en": 4, "large.v3": 26}


def scenario() -> str:
    env = os.environ.get("FAKE_WHISPER_SCENARIO")
    if env:
        return env
    path = os.path.abspath(sys.argv[0]) + ".scenario"
    if os.path.isfile(path):
        with open(path) as fh:
            return fh.read().strip()
    return "coreml"


def parse(argv):
    opts = {"model": None, "files": [], "processors": 1, "no_prints": False,
            "flash_attn": True, "dtw": None, "threads": 4}
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a in ("-m", "--model"):
            opts["model"], i = nxt, i + 1
        elif a in ("-f", "--file"):
            opts["files"].append(nxt)
            i += 1
        elif a in ("-p", "--processors"):
            opts["processors"], i = int(nxt), i + 1
        elif a in ("-t", "--threads"):
            opts["threads"], i = int(nxt), i + 1
        elif a in ("-np", "--no-prints"):
            opts["no_prints"] = True
        elif a in ("-nfa", "--no-flash-attn"):
            opts["flash_attn"] = False
        elif a in ("-fa", "--flash-attn"):
            opts["flash_attn"] = True
        elif a in ("-dtw", "--dtw"):
            opts["dtw"], i = nxt, i + 1
        elif a in ("-l", "-bs", "-bo", "--temperature", "--temperature-inc", "-d", "-ac",
                   "--audio-ctx", "--language"):
            i += 1
        i += 1
    return opts


def encoder_path(model: str) -> str:
    """whisper.cpp's derivation, written independently, on bytes like a std::string."""
    b = os.fsencode(model)
    if b.rfind(b".") >= 0:
        b = b[:b.rfind(b".")]
    d = b.rfind(b"-")
    if d >= 0 and len(b) - d == 5 and b[d + 1:d + 2] == b"q" and b[d + 3:d + 4] == b"_":
        b = b[:d]
    return os.fsdecode(b) + "-encoder.mlmodelc"


class Out:
    def __init__(self, silent: bool, to_stdout: bool):
        self.silent = silent
        self.stream = sys.stdout if to_stdout else sys.stderr

    def log(self, text: str) -> None:
        if not self.silent:
            self.stream.write(text + "\n")
            self.stream.flush()


def die(sig: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if sig == signal.SIGABRT:
        sys.stderr.write("free(): invalid pointer\n")
        sys.stderr.flush()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    time.sleep(5)
    os._exit(99)


def run_count() -> int:
    path = os.path.abspath(sys.argv[0]) + ".count"
    n = 0
    if os.path.isfile(path):
        with open(path) as fh:
            n = int(fh.read().strip() or 0)
    with open(path, "w") as fh:
        fh.write(str(n + 1))
    return n + 1


def asan_report() -> int:
    """What GCC's AddressSanitizer printed for the v1.8.5 defect (our measurement), then
    its exit: the pointers it frees are the allocator's fill bytes."""
    pid = os.getpid()
    frames = [
        "__asan::Allocator::Deallocate(void*, unsigned long, unsigned long, "
        "__sanitizer::BufferedStackTrace*, __asan::AllocType) "
        "../../../../src/libsanitizer/asan/asan_allocator.cpp:696",
        "__interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:53",
        "whisper_batch_free /whisper.cpp/src/whisper.cpp:499",
        "whisper_free_state /whisper.cpp/src/whisper.cpp:3824",
        "whisper_init_state /whisper.cpp/src/whisper.cpp:3433",
        "whisper_init_from_file_with_params /whisper.cpp/src/whisper.cpp:3741",
        "main /whisper.cpp/examples/cli/cli.cpp:1101",
    ]
    lines = ["AddressSanitizer:DEADLYSIGNAL", "=" * 65,
             f"=={pid}==ERROR: AddressSanitizer: BUS on unknown address (pc 0x7f3a1c0288b5 "
             f"bp 0xbebebebebebebeae sp 0x7ffd5e0e0a10 T0)",
             f"=={pid}==The signal is caused by a READ memory access."]
    lines += [f"    #{i} 0x{0x55d07dbd0000 + 16 * i:x} in {f}" for i, f in enumerate(frames)]
    lines += [f"    #{len(frames)} 0x55d07da1e180 in _start ({os.path.abspath(sys.argv[0])}+0x4a180)",
              "", "AddressSanitizer can not provide additional info.",
              "SUMMARY: AddressSanitizer: BUS ../../../../src/libsanitizer/asan/asan_allocator.cpp:696 "
              "in __asan::Allocator::Deallocate(void*, unsigned long, unsigned long, "
              "__sanitizer::BufferedStackTrace*, __asan::AllocType)",
              f"=={pid}==ABORTING"]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    return 1


def free_state_early(sc: str, out: Out) -> int:
    """whisper_init_state returned early: what the (un)patched teardown does."""
    if sc == "ggml-unpatched-asan":
        return asan_report()
    if sc in ("coreml-abort", "ggml-flaky"):
        die(signal.SIGABRT)
    if sc in ("coreml-segv", "ggml-unpatched"):
        die(signal.SIGSEGV)
    if sc == "coreml-exit134":
        sys.stderr.write("free(): invalid pointer\n")
        sys.stderr.flush()
        os._exit(134)
    if sc != "coreml-no-init-line":
        sys.stderr.write("error: failed to initialize whisper context\n")
    return 3


def main() -> int:
    sc = scenario()
    o = parse(sys.argv[1:])
    out = Out(o["no_prints"], sc == "coreml-stdout-log")
    coreml_build = sc.startswith("coreml")
    if sc == "ggml-flaky" and run_count() % 3 != 0:
        sc = "ggml"
    if not o["files"]:
        sys.stderr.write("error: no input files specified\n")
        return 2
    model = o["model"] or "models/ggml-base.en.bin"
    out.log(f"whisper_init_from_file_with_params_no_state: loading model from '{model}'")
    if not os.path.isfile(model):
        out.log(f"whisper_model_load: failed to open '{model}'")
        out.log("whisper_init_from_file_with_params_no_state: failed to load model")
        sys.stderr.write("error: failed to initialize whisper context\n")
        return 3
    dtw = o["dtw"]
    if dtw and o["flash_attn"]:
        out.log("whisper_init_with_params_no_state: dtw_token_timestamps is not supported "
                "with flash_attn - disabling")
        dtw = None
    out.log("whisper_model_load: n_vocab       = 51864")
    out.log(f"whisper_model_load: n_text_layer  = {N_TEXT_LAYER}")
    for _ in range(max(1, o["processors"])):
        out.log("whisper_init_state: kv self size  =    3.15 MB")
        if dtw:
            if ALIGNMENT_LAYERS.get(dtw, 1) > N_TEXT_LAYER:
                sys.stderr.write(f"aheads_masks_init: tried to set alignment head on text layer "
                                 f"{ALIGNMENT_LAYERS[dtw]}, but model only has {N_TEXT_LAYER} "
                                 "text layers")
                out.log("whisper_init_state: aheads_masks_init() failed for alignment heads masks")
                return free_state_early(sc, out)
        if not coreml_build:
            continue
        path = encoder_path(model)
        if sc == "coreml-stale-log":
            path = "/Users/someone/old-run/ggml-base.en-encoder.mlmodelc"
        if sc != "coreml-no-failure-line":
            out.log(f"whisper_init_state: loading Core ML model from '{path}'")
            out.log("whisper_init_state: first run on a device may take a while ...")
        if sc == "coreml-hang":
            time.sleep(3600)
        if sc == "coreml-slow-first":
            marker = os.path.abspath(sys.argv[0]) + ".warm"
            if not os.path.exists(marker):
                time.sleep(float(os.environ.get("FAKE_SLOW_S", "2")))
                open(marker, "w").close()
        if sc in ("coreml-abort-first", "coreml-fallback-first"):
            # Only the first run of this binary misbehaves: a retry would look clean.
            marker = os.path.abspath(sys.argv[0]) + ".warm"
            if not os.path.exists(marker):
                open(marker, "w").close()
                if sc == "coreml-abort-first":
                    sys.stderr.write("libc++abi: terminating due to uncaught exception\n")
                    sys.stderr.flush()
                    die(signal.SIGABRT)
                out.log(f"whisper_init_state: failed to load Core ML model from '{path}'")
                continue
        if sc == "coreml-stale-log" or os.path.isdir(encoder_path(model)):
            out.log("whisper_init_state: Core ML model loaded")
            continue
        if sc != "coreml-no-failure-line":
            out.log(f"whisper_init_state: failed to load Core ML model from '{path}'")
        if sc == "coreml-fallback":
            continue
        return free_state_early(sc, out)
    flag = 1 if coreml_build else 0
    out.log(f"system_info: n_threads = {o['threads']} / 8 | WHISPER : COREML = {flag} | "
            "OPENVINO = 0 | CPU : NEON = 1 | ARM_FMA = 1 | ACCELERATE = 1 |")
    for f in o["files"]:
        out.log(f"main: processing '{f}' (176000 samples, 11.0 sec), {o['threads']} threads, "
                f"{o['processors']} processors, 1 beams + best of 1, lang = en, task = "
                "transcribe, timestamps = 0 ...")
        if sc != "coreml-nil":
            sys.stdout.write(TRANSCRIPT + "\n")
        else:
            sys.stdout.write("\n")
    out.log("whisper_print_timings:     load time =    51.20 ms")
    out.log("whisper_print_timings:   encode time =    42.75 ms /     1 runs (    42.75 ms "
            "per run)")
    out.log("whisper_print_timings:    total time =   612.03 ms")
    return 0


def install(folder, scenario: str, name: str = "whisper-cli"):
    """Install this fake as ``folder/name`` playing ``scenario`` (for tests).

    The copy starts with a shebang naming the running interpreter and the scenario, and
    gets a ``<name>.scenario`` file beside it. Returns the executable's path.
    """
    import pathlib
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    body = pathlib.Path(__file__).read_text().split("\n", 1)[1]
    # The scenario is part of the bytes, so two fakes with different behaviour differ in
    # digest the way two real builds would.
    exe.write_text(f"#!{sys.executable}\n# plays: {scenario}\n" + body)
    exe.chmod(0o755)
    (folder / f"{name}.scenario").write_text(scenario + "\n")
    return exe


if __name__ == "__main__":
    sys.exit(main())
