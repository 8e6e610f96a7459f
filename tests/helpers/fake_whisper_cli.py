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
and fails closed (exit 3) when it cannot load it. "Loadable" means what the simulated
toolchain's ``coremlc`` writes and Core ML needs first: a folder holding a readable
``coremldata.bin`` and ``model.mil``; an empty folder, a folder missing either file or one
the process cannot read takes the failed-load path.

Every build also models whisper-cli's own exits (``examples/cli/cli.cpp: main``): a lone
``@FILE`` argument is a response file (exit 1 if it cannot be opened); an unknown option or
one missing its value prints usage and exits **0**; every ``-f`` that does not exist is
dropped with a line, and none left is exit 2; an unknown ``-dtw`` preset is exit 3 before
the model loads; a missing or unreadable ``-m`` is exit 3 after two library lines; a
``--grammar`` that does not parse is exit 4; ``-ac N`` above the model's 1500 is exit 10;
``-ac N`` below it with the Core ML encoder loaded is a silent garbage transcript, exit 0.
The usage text stops after its ``options:`` header (no test reads the option table).

A scenario may carry arguments: ``NAME:key=value,key=value``. Scenarios switch defects on:

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
coreml-abort-first        the first run of this binary dies by SIGABRT while loading
coreml-fallback-first     the first run logs a failed load and goes on (fallback), then clean
coreml-nonsense           loads, but a non-empty nonsense transcript: for every file, or with
                          ``clip=PREFIX`` only for ``-f`` files whose name starts with PREFIX
coreml-flaky              Core ML loads or fails to load (exit 3, fail closed) by launch
                          number: ``runs=LLF`` (L loads, F fails; past its end the last letter
                          repeats; default ``LF``), counted in ``coreml-flaky.count`` in
                          ``state=DIR``, else ``$FAKE_WHISPER_STATE_DIR``, else beside argv[0]
ggml                      no Core ML code (COREML = 0), patched batch
ggml-unpatched            no Core ML code, unpatched: a failed init dies by SIGSEGV
ggml-flaky                patched-looking, but every third run dies by SIGABRT
ggml-asan                 AddressSanitizer build, patched: behaves like ``ggml``
ggml-unpatched-asan       AddressSanitizer build, unpatched: a failed init prints ASan's
                          report of the bad free in whisper_batch_free and exits 1
========================  ==================================================================
"""

import os
import re
import signal
import sys
import time

TRANSCRIPT = (" And so my fellow Americans, ask not what your country can do for you, ask "
              "what you can do for your country.")
# Not a whisper.cpp string: any fluent text no reference contains will do.
NONSENSE = " Purple lighthouse gravel seventeen umbrella quietly orbit the accountant."
N_TEXT_LAYER = 4
N_AUDIO_CTX = 1500  # every standard Whisper model's encoder length (hparams.n_audio_ctx)
ALIGNMENT_LAYERS = {"tiny.en": 2, "tiny": 2, "base.en": 4, "large.v3": 26}
# cli.cpp: main maps exactly these -dtw names to presets; anything else is exit 3.
DTW_PRESETS = ("tiny", "tiny.en", "base", "base.en", "small", "small.en", "medium",
               "medium.en", "large.v1", "large.v2", "large.v3", "large.v3.turbo")

# cli.cpp: whisper_params_parse -- every option v1.8.5 knows, by how its value is read
# (std::stoi, std::stof, kept as text, or none). The fake needs the table to reproduce what
# the real parser does with an unknown flag or a missing value, not to act on each option.
_INT, _FLOAT, _TEXT = "int", "float", "text"
OPTIONS = {}
for _kind, _key, *_flags in [
        (_INT, "threads", "-t", "--threads"), (_INT, "processors", "-p", "--processors"),
        (_INT, "offset_t", "-ot", "--offset-t"), (_INT, "offset_n", "-on", "--offset-n"),
        (_INT, "duration", "-d", "--duration"), (_INT, "max_context", "-mc", "--max-context"),
        (_INT, "max_len", "-ml", "--max-len"), (_INT, "best_of", "-bo", "--best-of"),
        (_INT, "beam_size", "-bs", "--beam-size"), (_INT, "audio_ctx", "-ac", "--audio-ctx"),
        (_INT, "device", "-dev", "--device"),
        (_INT, "vad_min_speech", "-vspd", "--vad-min-speech-duration-ms"),
        (_INT, "vad_min_silence", "-vsd", "--vad-min-silence-duration-ms"),
        (_INT, "vad_pad", "-vp", "--vad-speech-pad-ms"),
        (_FLOAT, "word_thold", "-wt", "--word-thold"),
        (_FLOAT, "entropy_thold", "-et", "--entropy-thold"),
        (_FLOAT, "logprob_thold", "-lpt", "--logprob-thold"),
        (_FLOAT, "no_speech_thold", "-nth", "--no-speech-thold"),
        (_FLOAT, "temperature", "-tp", "--temperature"),
        (_FLOAT, "temperature_inc", "-tpi", "--temperature-inc"),
        (_FLOAT, "grammar_penalty", "--grammar-penalty"),
        (_FLOAT, "vad_threshold", "-vt", "--vad-threshold"),
        (_FLOAT, "vad_max_speech", "-vmsd", "--vad-max-speech-duration-s"),
        (_FLOAT, "vad_overlap", "-vo", "--vad-samples-overlap"),
        (_TEXT, "font_path", "-fp", "--font-path"), (_TEXT, "output_file", "-of", "--output-file"),
        (_TEXT, "language", "-l", "--language"), (_TEXT, "prompt", "--prompt"),
        (_TEXT, "model", "-m", "--model"), (_TEXT, "files", "-f", "--file"),
        (_TEXT, "ov_device", "-oved", "--ov-e-device"), (_TEXT, "dtw", "-dtw", "--dtw"),
        (_TEXT, "suppress_regex", "--suppress-regex"), (_TEXT, "grammar", "--grammar"),
        (_TEXT, "grammar_rule", "--grammar-rule"), (_TEXT, "vad_model", "-vm", "--vad-model")]:
    OPTIONS.update({f: (_kind, _key) for f in _flags})
for _key, _value, *_flags in [
        ("debug", True, "-debug", "--debug-mode"), ("translate", True, "-tr", "--translate"),
        ("diarize", True, "-di", "--diarize"), ("tinydiarize", True, "-tdrz", "--tinydiarize"),
        ("split_on_word", True, "-sow", "--split-on-word"),
        ("no_fallback", True, "-nf", "--no-fallback"),
        ("output_txt", True, "-otxt", "--output-txt"), ("output_vtt", True, "-ovtt", "--output-vtt"),
        ("output_srt", True, "-osrt", "--output-srt"),
        ("output_wts", True, "-owts", "--output-words"),
        ("output_lrc", True, "-olrc", "--output-lrc"), ("output_csv", True, "-ocsv", "--output-csv"),
        ("output_json", True, "-oj", "--output-json"),
        ("output_json_full", True, "-ojf", "--output-json-full"),
        ("no_prints", True, "-np", "--no-prints"), ("print_special", True, "-ps", "--print-special"),
        ("print_colors", True, "-pc", "--print-colors"),
        ("print_confidence", True, "--print-confidence"),
        ("print_progress", True, "-pp", "--print-progress"),
        ("no_timestamps", True, "-nt", "--no-timestamps"),
        ("detect_language", True, "-dl", "--detect-language"),
        ("carry_initial_prompt", True, "--carry-initial-prompt"),
        ("log_score", True, "-ls", "--log-score"), ("no_gpu", True, "-ng", "--no-gpu"),
        ("flash_attn", True, "-fa", "--flash-attn"), ("flash_attn", False, "-nfa", "--no-flash-attn"),
        ("suppress_nst", True, "-sns", "--suppress-nst"), ("vad", True, "--vad")]:
    OPTIONS.update({f: (_key, _value) for f in _flags})


class Exit(Exception):
    """whisper-cli stopped before transcribing: ``main`` returns ``code``."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def err(text: str) -> None:
    """A line whisper-cli writes with ``fprintf(stderr, ...)``: not a log line, so neither
    ``-np`` nor a log redirection touches it."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def usage() -> None:
    """cli.cpp: whisper_print_usage, up to its ``options:`` header (the table is left out)."""
    for line in ("", f"usage: {sys.argv[0]} [options] file0 file1 ...",
                 "supported audio formats: flac, mp3, ogg, wav", "", "options:"):
        err(line)


def split_scenario(raw: str) -> tuple:
    """``NAME:key=value,...`` -> (NAME, {key: value}); a plain name has no arguments."""
    name, _, rest = raw.partition(":")
    return name, dict(kv.split("=", 1) for kv in rest.split(",") if "=" in kv)


def scenario() -> str:
    env = os.environ.get("FAKE_WHISPER_SCENARIO")
    if env:
        return env
    path = os.path.abspath(sys.argv[0]) + ".scenario"
    if os.path.isfile(path):
        with open(path) as fh:
            return fh.read().strip()
    return "coreml"


def _number(kind: str, text: str):
    """std::stoi / std::stof as the parser calls them: a numeric prefix is enough ("12ab" is
    12); no digits, or out of range, throws -- and nothing catches it, so the process
    aborts. The terminate line is libc++'s (macOS), not whisper.cpp's; the abort is what
    matters: a typo in a number is a SIGABRT, never an exit status."""
    pat = (r"[ \t\n\v\f\r]*[+-]?\d+" if kind == _INT else
           r"[ \t\n\v\f\r]*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)")
    m = re.match(pat, text, re.IGNORECASE)
    fn = "stoi" if kind == _INT else "stof"
    value = None
    if m:
        value = int(m.group()) if kind == _INT else float(m.group())
        spelled_inf = "inf" in m.group().lower()
        if kind == _INT and not -2**31 <= value < 2**31 or \
                kind == _FLOAT and not spelled_inf and abs(value) > 3.4028234663852886e38:
            die(signal.SIGABRT, "libc++abi: terminating due to uncaught exception of type "
                                f"std::out_of_range: {fn}: out of range")
    if value is None:
        die(signal.SIGABRT, "libc++abi: terminating due to uncaught exception of type "
                            f"std::invalid_argument: {fn}: no conversion")
    return value


def response_file_args(argv: list) -> list:
    """cli.cpp: main -- a lone argument ``@FILE`` is replaced by FILE's lines, one argument
    per line (std::getline: split on newline only, no trailing empty argument); a file
    that cannot be opened is ``error: response file '...' not found``, exit 1."""
    if len(argv) != 1 or not argv[0].startswith("@"):
        return argv
    name = argv[0][1:]
    if os.path.isdir(name):
        return []  # an ifstream opens a folder, and reads no line from it
    try:
        with open(name, "rb") as fh:
            text = fh.read().decode("utf-8", "surrogateescape")
    except OSError:
        err(f"error: response file '{name}' not found")
        raise Exit(1)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def parse(argv):
    """cli.cpp: whisper_params_parse. It never returns false in v1.8.5: ``-h``, an unknown
    option and an option without its value all print usage and ``exit(0)``; a non-option
    argument is an input file."""
    opts = {"model": "models/ggml-base.en.bin", "files": [], "processors": 1,
            "no_prints": False, "flash_attn": True, "dtw": "", "threads": 4, "audio_ctx": 0,
            "grammar": "", "language": "en"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-" or not a.startswith("-"):
            opts["files"].append(a)
        elif a in ("-h", "--help"):
            usage()
            raise Exit(0)
        elif a not in OPTIONS:
            err(f"error: unknown argument: {a}")
            usage()
            raise Exit(0)
        elif OPTIONS[a][0] in (_INT, _FLOAT, _TEXT):
            kind, key = OPTIONS[a]
            if i + 1 >= len(argv):
                err(f"error: argument {a} requires value")
                raise Exit(0)
            i += 1
            value = argv[i] if kind == _TEXT else _number(kind, argv[i])
            if key == "files":
                opts["files"].append(value)
            else:
                opts[key] = value.lower() if key == "language" else value
        else:
            key, value = OPTIONS[a]
            opts[key] = value
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


def die(sig: int, note: str = "free(): invalid pointer") -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if sig == signal.SIGABRT:
        sys.stderr.write(note + "\n")
        sys.stderr.flush()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    time.sleep(5)
    os._exit(99)


def run_count(path: str = "") -> int:
    path = path or os.path.abspath(sys.argv[0]) + ".count"
    n = 0
    if os.path.isfile(path):
        with open(path) as fh:
            n = int(fh.read().strip() or 0)
    with open(path, "w") as fh:
        fh.write(str(n + 1))
    return n + 1


def opens(path: str) -> bool:
    """Whether C++ can open ``path`` for reading (a folder opens too; reading it fails)."""
    if os.path.isdir(path):
        return os.access(path, os.R_OK)
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


def loadable(mlmodelc: str) -> bool:
    """Whether Core ML would load this compiled model: both files a compiled ML program
    cannot do without are there and readable (the layout the simulated ``coremlc`` writes).
    A file, an empty folder, or a folder missing either one is a failed load."""
    for name in ("coremldata.bin", "model.mil"):
        try:
            with open(os.path.join(mlmodelc, name), "rb") as fh:
                fh.read(1)
        except OSError:
            return False
    return True


def flaky_load_fails(args: dict) -> bool:
    """coreml-flaky: count this launch and read its letter of ``runs`` (L loads, F fails)."""
    pattern = args.get("runs", "LF")
    folder = (args.get("state") or os.environ.get("FAKE_WHISPER_STATE_DIR")
              or os.path.dirname(os.path.abspath(sys.argv[0])))
    n = run_count(os.path.join(folder, "coreml-flaky.count"))
    return pattern[min(n, len(pattern)) - 1] == "F"


def _skip_space(src: str, pos: int, newline_ok: bool) -> int:
    # grammar-parser.cpp: parse_space -- blanks, tabs and '#' comments (up to, not past,
    # the line end); line ends only where the caller allows them.
    while pos < len(src) and (src[pos] in " \t#" or newline_ok and src[pos] in "\r\n"):
        if src[pos] == "#":
            while pos < len(src) and src[pos] not in "\r\n":
                pos += 1
        else:
            pos += 1
    return pos


def grammar_head_problem(src: str):
    """grammar-parser.cpp: parse, as far as the first rule's ``::=``. Returns the exception
    text ``parse`` prints, ``""`` for a text with no rule at all (no message, no rules), or
    None when the head is well-formed (the fake models no further)."""
    pos = _skip_space(src, 0, True)
    if pos == len(src):
        return ""
    end = pos
    word = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"
    while end < len(src) and src[end] in word:
        end += 1
    if end == pos:
        return "expecting name at " + src[pos:]
    pos = _skip_space(src, end, False)
    if not src.startswith("::=", pos):
        return "expecting ::= at " + src[pos:]
    return None


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
    sc, sargs = split_scenario(scenario())
    try:
        o = parse(response_file_args(sys.argv[1:]))
    except Exit as e:
        return e.code
    out = Out(o["no_prints"], sc == "coreml-stdout-log")
    coreml_build = sc.startswith("coreml")
    if sc == "ggml-flaky" and run_count() % 3 != 0:
        sc = "ggml"
    # cli.cpp: main -- before any model work, each -f that is_file_exist() (an ifstream
    # that opens) rejects is dropped with its own line; none left is exit 2.
    files = []
    for f in o["files"]:
        if f != "-" and not opens(f):
            err(f"error: input file not found '{f}'")
            continue
        files.append(f)
    if not files:
        err("error: no input files specified")
        usage()
        return 2
    dtw = o["dtw"]
    # cli.cpp: main -- an unknown preset returns 3 before the model is even opened: an
    # exit 3 with no library line at all.
    if dtw and dtw not in DTW_PRESETS:
        err(f"error: unknown DTW preset '{dtw}'")
        return 3
    model = o["model"]
    # whisper.cpp: whisper_init_from_file_with_params_no_state -- logs the path, and if the
    # ifstream does not open, one error line and a null context; cli.cpp: main turns that
    # into its init-failure line and exit 3. (A folder would open and fail on its magic
    # instead; the fake does not model that.)
    out.log(f"whisper_init_from_file_with_params_no_state: loading model from '{model}'")
    if not os.path.isfile(model) or not opens(model):
        out.log(f"whisper_init_from_file_with_params_no_state: failed to open '{model}'")
        err("error: failed to initialize whisper context")
        return 3
    if dtw and o["flash_attn"]:
        out.log("whisper_init_with_params_no_state: dtw_token_timestamps is not supported "
                "with flash_attn - disabling")
        dtw = None
    out.log("whisper_model_load: n_vocab       = 51864")
    out.log(f"whisper_model_load: n_text_layer  = {N_TEXT_LAYER}")
    coreml_loaded = False
    flaky_fail = coreml_build and sc == "coreml-flaky" and flaky_load_fails(sargs)
    for _ in range(max(1, o["processors"])):
        out.log("whisper_init_state: kv self size  =    3.15 MB")
        if dtw:
            if ALIGNMENT_LAYERS.get(dtw, 1) > N_TEXT_LAYER:
                # whisper.cpp: aheads_masks_init -- its format string has no newline.
                if not out.silent:
                    out.stream.write(f"aheads_masks_init: tried to set alignment head on text "
                                     f"layer {ALIGNMENT_LAYERS[dtw]}, but model only has "
                                     f"{N_TEXT_LAYER} text layers")
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
        # whisper.cpp: whisper_init_state -- ctx_coreml is null for anything Core ML cannot
        # load (missing, not a compiled model, unreadable); with fallback OFF the state is
        # freed and init fails, and cli.cpp: main exits 3.
        if sc == "coreml-stale-log" or loadable(encoder_path(model)) and not flaky_fail:
            out.log("whisper_init_state: Core ML model loaded")
            coreml_loaded = True
            continue
        if sc != "coreml-no-failure-line":
            out.log(f"whisper_init_state: failed to load Core ML model from '{path}'")
        if sc == "coreml-fallback":
            continue
        return free_state_early(sc, out)
    if o["grammar"]:
        # cli.cpp: main -- after init: the argument is a file if one opens, else the text;
        # grammar-parser.cpp: parse prints what it threw and returns no rules; no rules is
        # exit 4.
        g = o["grammar"]
        text = g
        if opens(g):
            text = ""
            if not os.path.isdir(g):
                with open(g, "rb") as fh:
                    text = fh.read().decode("utf-8", "surrogateescape")
        problem = grammar_head_problem(text)
        if problem is None:
            err("fake_whisper_cli: a well-formed --grammar is not modelled")
            return 97
        if problem:
            err(f"parse: error parsing grammar: {problem}")
        err(f'error: failed to parse grammar "{g}"')
        return 4
    flag = 1 if coreml_build else 0
    ac = o["audio_ctx"]
    for f in files:
        if os.path.isdir(f):
            # common-whisper.cpp: read_audio_data (no ffmpeg) fails on it; cli.cpp: main
            # says so and goes on with the next file -- the run still exits 0.
            err(f"error: failed to read audio data from ({f})")
            err(f"error: failed to read audio file '{f}'")
            continue
        out.log("")
        out.log(f"system_info: n_threads = {o['threads'] * o['processors']} / 8 | WHISPER : "
                f"COREML = {flag} | OPENVINO = 0 | CPU : NEON = 1 | ARM_FMA = 1 | ACCELERATE = 1 |")
        out.log("")
        out.log(f"main: processing '{f}' (176000 samples, 11.0 sec), {o['threads']} threads, "
                f"{o['processors']} processors, 1 beams + best of 1, lang = en, task = "
                "transcribe, timestamps = 0 ...")
        out.log("")
        if ac > N_AUDIO_CTX:
            # whisper.cpp: whisper_full_with_state returns -5; cli.cpp: main prints its
            # argv[0] with the failure and returns 10 at once (later files are not tried).
            out.log(f"whisper_full_with_state: audio_ctx is larger than the maximum allowed "
                    f"({ac} > {N_AUDIO_CTX})")
            err(f"{sys.argv[0]}: failed to process audio")
            return 10
        text = TRANSCRIPT
        if sc == "coreml-nil":
            text = ""
        elif coreml_loaded and 0 < ac < N_AUDIO_CTX:
            # whisper.cpp: whisper_build_graph_conv makes the mel 2 * audio_ctx wide, and
            # coreml/whisper-encoder.mm: whisper_coreml_encode hands that to an encoder
            # whose input is fixed at 3000: the prediction fails (error:nil), nothing is
            # copied, and the decoder reads a stale encoder output. No line says so.
            text = NONSENSE
        elif sc == "coreml-nonsense" and coreml_loaded and \
                os.path.basename(f).startswith(sargs.get("clip", "")):
            text = NONSENSE
        sys.stdout.write(text + "\n")
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
