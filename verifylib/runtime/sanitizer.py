"""AddressSanitizer runs: the options they get and the one reader of their reports.

Why a module of its own: the report format belongs to the sanitizer runtime (GCC's
libasan, LLVM's compiler-rt), not to whisper.cpp, so it has no place in the runtime
contract of :mod:`verifylib.runtime.contracts`; but like the contract's classifiers it is
read in exactly one place, here, by pure functions of a stored stream, so
``canary.sanitizer`` at run time, ``verifylib verify`` and ``verifylib pin-check`` all see
the same report.

What ASan shows for the batch-lifecycle defect is the free of garbage pointers that
``whisper_batch_free`` reads from a never-initialized member (docs/facts.md), not the
uninitialized read itself; :meth:`SanitizerReport.describe` therefore names ASan's own
words for the error and the first frame outside the sanitizer runtime, nothing more.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from verifylib.evidence import identities

SIDES = {"unpatched": ("ggml-unpatched-asan", identities.BINARY_GGML_UNPATCHED_ASAN),
         "patched": ("ggml-asan", identities.BINARY_GGML_ASAN)}
"""The two sides of ``canary.sanitizer``: side -> (build variant in
:data:`verifylib.whispercpp.build_options.ASAN_VARIANTS`, the identity that binds its binary's
digest). Kept here, in a runtime module that needs only the identity keys, so the stage
that builds, the one that runs and the rule that judges spell them one way."""

ASAN_OPTIONS = ("abort_on_error=0:halt_on_error=1:exitcode=1:detect_leaks=0:symbolize=1:"
                "color=never:disable_coredump=1")
"""The ``ASAN_OPTIONS`` of every sanitizer run, set explicitly so a host's own setting
cannot change the outcome. The first report ends the run with exit 1 (no abort, so no
signal and no core file); LeakSanitizer is off because leaks at exit are not the defect in
question and LSan's own report (and exit 23) would make a clean exit-3 run look dirty, and
it cannot run at all under ptrace on some CI hosts; frames are symbolized (by
``llvm-symbolizer`` when it is on ``PATH``, else by the runtime's internal symbolizer) and
printed without colour, so the text parses the same everywhere."""

RUNS_PER_SIDE = 3
"""Lifecycle-trigger runs per ASan build. The report is deterministic (the ASan allocator
fills fresh memory with the same byte, so the garbage pointers are the same every run):
one run shows it, three show that it repeats, at a few seconds per run. Repeated
physical runs are ``canary.lifecycle_ab``'s job, not this informational gate's."""

TOP_FRAMES = 16
"""Frames of the report's first stack kept as evidence. The measured report has 13: five
in the ASan runtime, the five whisper.cpp frames up to ``main``, three of the C start-up;
a deeper stack is cut, since its top is what the report is about."""

_ERROR_RE = re.compile(r"^==\d+==\s*ERROR: (\w*Sanitizer): (.*?)\s*$")
_SUMMARY_RE = re.compile(r"^SUMMARY: (\w*Sanitizer): (.*?)\s*$")
_FRAME_RE = re.compile(r"^\s*#(\d+) 0x[0-9a-fA-F]+(?: (.*?))?\s*$")
_FILE_LINE_RE = re.compile(r"^\S+:\d+(?::\d+)?$")
# Where the error text turns into addresses, thread names or registers.
_KIND_END_RE = re.compile(r":? (?:0x[0-9a-fA-F]+|\(pc\b).*$")
_RUNTIME_LOCATIONS = ("libsanitizer", "compiler-rt", "libasan", "libclang_rt.asan")
_RUNTIME_FUNCTIONS = ("__interceptor_", "___interceptor_", "__asan", "__sanitizer", "__lsan")


@dataclass(frozen=True)
class Frame:
    """One frame of a sanitizer stack (``#N 0x… in <function> <location>``).

    Attributes
    ----------
    index : int
        The ``#N``.
    function : str or None
        The symbolized function, as printed (C++ names with their parameter types).
    location : str or None
        ``file:line[:column]``, or ``module+0xoffset`` when there is no line information.
    """

    index: int
    function: str | None
    location: str | None

    @property
    def in_runtime(self) -> bool:
        """True for a frame of the sanitizer runtime itself (interceptors, allocator)."""
        loc = self.location or ""
        fn = self.function or ""
        return any(m in loc for m in _RUNTIME_LOCATIONS) or fn.startswith(_RUNTIME_FUNCTIONS)

    def text(self) -> str:
        """Render the frame as ``#N function location``, for tables and details.

        Returns
        -------
        str
            The index, function and location that are known, space-separated.
        """
        return " ".join(x for x in (f"#{self.index}", self.function, self.location) if x)

    def to_evidence(self) -> dict[str, Any]:
        """Return the frame as a JSON-able dict.

        Returns
        -------
        dict
            ``index``, ``function`` and ``location`` (the last two may be None).
        """
        return {"index": self.index, "function": self.function, "location": self.location}


@dataclass(frozen=True)
class SanitizerReport:
    """The first sanitizer report in a stream.

    Attributes
    ----------
    tool : str
        ``AddressSanitizer`` (or another ``…Sanitizer`` that printed an ``ERROR:`` line).
    kind : str
        The error in ASan's words without addresses, e.g. ``attempting free on address
        which was not malloc()-ed`` or ``SEGV on unknown address``.
    summary : str or None
        The ``SUMMARY:`` line after its prefix, if printed.
    frames : tuple of Frame
        The first stack after the ``ERROR:`` line, at most :data:`TOP_FRAMES`.
    """

    tool: str
    kind: str
    summary: str | None
    frames: tuple[Frame, ...]

    def first_app_frame(self) -> Frame | None:
        """Find the first frame outside the sanitizer runtime (where the program erred).

        Returns
        -------
        Frame or None
            The first frame whose :attr:`Frame.in_runtime` is false, or None when every
            frame (or no frame) was kept.
        """
        return next((f for f in self.frames if not f.in_runtime), None)

    def describe(self) -> str:
        """Describe the report in one line: tool, kind and first program frame with location.

        Returns
        -------
        str
            ``"<tool> <kind>"``, followed by ``" in <function> (<location>)"`` when
            :meth:`first_app_frame` has a function.
        """
        f = self.first_app_frame()
        where = ""
        if f is not None and f.function:
            where = f" in {f.function}" + (f" ({f.location})" if f.location else "")
        return f"{self.tool} {self.kind}{where}"

    def to_evidence(self) -> dict[str, Any]:
        """Return the report as a JSON-able dict (what ``canary.sanitizer`` stores per run).

        Returns
        -------
        dict
            ``tool``, ``kind``, ``summary``, ``frames`` (each :meth:`Frame.to_evidence`)
            and ``described`` (:meth:`describe`).
        """
        return {"tool": self.tool, "kind": self.kind, "summary": self.summary,
                "frames": [f.to_evidence() for f in self.frames],
                "described": self.describe()}


def _text(stream: bytes | str) -> str:
    return stream if isinstance(stream, str) else bytes(stream).decode("utf-8", "replace")


def _kind(message: str) -> str:
    kind = _KIND_END_RE.sub("", message).strip()
    # "attempting double-free on 0x…" reads better without the dangling preposition.
    return kind[:-3] if kind.endswith(" on") else kind


def parse_frame(line: str) -> Frame | None:
    """Read one stack line (``#N 0x… in <function> <location>``), or None if it is none.

    Parameters
    ----------
    line : str
        A line of a sanitizer report.

    Returns
    -------
    Frame or None
        The frame, or None when the line is not a ``#N 0x…`` stack line.
    """
    m = _FRAME_RE.match(line)
    if not m:
        return None
    rest = (m.group(2) or "").strip()
    function = location = None
    if rest.startswith("(") and rest.endswith(")"):
        location = rest[1:-1]
    elif rest.startswith("in "):
        body = rest[3:].strip()
        if body.endswith(")") and " (" in body:
            function, _, loc = body.rpartition(" (")
            location = loc[:-1]
        else:
            head, _, last = body.rpartition(" ")
            if head and _FILE_LINE_RE.match(last):
                function, location = head, last
            else:
                function = body
    elif rest:
        location = rest
    return Frame(int(m.group(1)), function or None, location or None)


def parse_report(stream: bytes | str) -> SanitizerReport | None:
    """Find the first sanitizer report in a run's output.

    A report is an ``==PID==ERROR: <Tool>Sanitizer: <message>`` line (or, failing that, a
    ``SUMMARY: <Tool>Sanitizer:`` line); its stack is the first run of ``#N 0x…`` lines
    after it.

    Parameters
    ----------
    stream : bytes or str
        The run's stderr (where the runtime writes), as stored.

    Returns
    -------
    SanitizerReport or None
        None when the stream holds no report.
    """
    lines = _text(stream).splitlines()
    summary = next((m for m in map(_SUMMARY_RE.match, lines) if m), None)
    summary_text = f"{summary.group(1)}: {summary.group(2)}" if summary else None
    for i, line in enumerate(lines):
        m = _ERROR_RE.match(line)
        if not m:
            continue
        frames: list[Frame] = []
        for later in lines[i + 1:]:
            f = parse_frame(later)
            if f is None:
                if frames:
                    break
                continue
            if len(frames) < TOP_FRAMES:
                frames.append(f)
        return SanitizerReport(m.group(1), _kind(m.group(2)), summary_text, tuple(frames))
    if summary:
        kind = summary.group(2).split(" ", 1)[0]
        return SanitizerReport(summary.group(1), kind, summary_text, ())
    return None


def report_evidence(stream: bytes | str) -> dict[str, Any] | None:
    """Parse a stream's first report straight into its evidence form.

    Parameters
    ----------
    stream : bytes or str
        The run's stderr, as stored.

    Returns
    -------
    dict or None
        :meth:`SanitizerReport.to_evidence` of :func:`parse_report`, or None when the
        stream holds no report.
    """
    rep = parse_report(stream)
    return None if rep is None else rep.to_evidence()


def links_asan_runtime(needed_libs: Iterable[Any]) -> bool:
    """Tell whether a binary's shared-library list names the ASan runtime.

    GCC and clang link it dynamically by default (``libasan.so.N``,
    ``libclang_rt.asan_osx_dynamic.dylib``): its presence shows the binary is
    instrumented, its absence that it is not (or was linked with ``-static-libasan``,
    which the suite never does).

    Parameters
    ----------
    needed_libs : iterable
        The binary's needed shared libraries (names or paths; items are read with ``str``).

    Returns
    -------
    bool
        True iff an item contains ``libasan`` or ``clang_rt.asan``.
    """
    return any("libasan" in str(lib) or "clang_rt.asan" in str(lib) for lib in needed_libs)


def external_symbolizer() -> str | None:
    """Find the ``llvm-symbolizer`` the runtime will use from ``PATH`` (recorded, not required).

    Returns
    -------
    str or None
        Its path, or None when there is none (the runtime's internal symbolizer is used).
    """
    return shutil.which("llvm-symbolizer")


def sanitizer_env() -> Mapping[str, str]:
    """Return the environment entries every sanitizer run gets on top of the runner's.

    Returns
    -------
    Mapping
        ``{"ASAN_OPTIONS": ASAN_OPTIONS}``.
    """
    return {"ASAN_OPTIONS": ASAN_OPTIONS}
