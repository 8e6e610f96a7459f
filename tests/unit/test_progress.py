"""Progress lines (verifylib/runtime/progress.py): what a long step prints, how often, what
the command line receives of a stage kernel's output. Intervals are shrunk to milliseconds
so nothing here waits; what is asserted is the lines, not timing."""

from __future__ import annotations

import threading
import time

import pytest

from verifylib.runtime import progress
from verifylib.runtime.progress import LineRelay, Ticker, elapsed_text, ticking

pytestmark = pytest.mark.unit


def _collect():
    lines: list[str] = []
    lock = threading.Lock()

    def log(line):
        with lock:
            lines.append(line)
    return lines, log


def _wait_for(lines, n, timeout=5.0):
    t0 = time.monotonic()
    while len(lines) < n and time.monotonic() - t0 < timeout:
        time.sleep(0.005)
    return lines


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (42.9, "42 s"), (60, "1 min 00 s"),
                                           (185, "3 min 05 s")])
def test_elapsed_text(seconds, text):
    assert elapsed_text(seconds) == text


def test_a_ticker_names_its_step_and_carries_cmakes_percentage():
    lines, log = _collect()
    t = Ticker("building whisper-cli [ggml-asan]", log, interval=0.01)
    t.output(b"[ 12%] Building CXX object\n[ 47%] Linking CXX static library\n")
    t.start()
    _wait_for(lines, 2)
    t.stop()
    assert lines and all(line.startswith("building whisper-cli [ggml-asan]: ") for line in lines)
    assert lines[0].endswith(", [ 47%] …")
    n = len(lines)
    time.sleep(0.05)
    assert len(lines) == n  # stopped means silent


def test_a_python_step_ticks_until_it_ends():
    lines, log = _collect()
    with ticking("02_export converting the fp16 encoder to mlprogram", log, interval=0.01):
        _wait_for(lines, 3)
    n = len(lines)
    time.sleep(0.05)
    assert n >= 3 and len(lines) == n
    assert lines[0] == "02_export converting the fp16 encoder to mlprogram …"  # announced
    assert lines[1].startswith("02_export converting the fp16 encoder to mlprogram: 0 s")


def test_an_outer_ticker_is_silent_while_an_inner_step_prints(monkeypatch):
    monkeypatch.setattr(progress, "_last_inner", [0.0])
    lines, log = _collect()
    with ticking("01_build build.ggml", log, interval=0.02, outer=True):
        _wait_for(lines, 2)  # alone, the gate's catch-all prints
        with ticking("building whisper-cli [ggml]", log, interval=0.005):
            mark = len(lines)
            time.sleep(0.2)
            inner = lines[mark:]
    assert lines[0] == "01_build build.ggml …" and lines[1].startswith("01_build build.ggml: ")
    assert inner and all(line.startswith("building whisper-cli [ggml]") for line in inner)


def test_the_relay_hands_on_whole_lines_and_a_bars_last_drawing():
    got: list[str] = []
    relay = LineRelay(got.append)
    relay.write("obtaining the source … ")
    assert got == []  # a partial line waits for its end
    relay.write("done\nbuilding ")
    relay.write("whisper-cli\r\nA/B  10%|#\rA/B  50%|#####\rA/B 100%|##########\n")
    relay.write("no newline at the end")
    relay.flush()
    assert got == ["obtaining the source … done", "building whisper-cli", "A/B 100%|##########"]
    relay.close()
    assert got[-1] == "no newline at the end"
    relay.close()
    assert len(got) == 4
