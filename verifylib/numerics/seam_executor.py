"""The seam's executor: whisper.cpp's Core ML calls answered by the ML-program executor.

A seam build of whisper.cpp (docs/runtime-contract.md §11) connects, in
``whisper_coreml_init``, to the Unix socket named by ``VERIFYLIB_SEAM_SOCKET`` and sends
the ``.mlmodelc`` path whisper.cpp derived; each ``whisper_coreml_encode`` sends the mel
exactly as whisper.cpp hands it and receives the program's ``output``, executed in float32
by :func:`verifylib.numerics.mil_exec.execute`. The wire format and every constant are the
contract's (:mod:`verifylib.runtime.contracts.seam`).

Why hand-written: nothing else speaks to whisper.cpp's Core ML entry points off macOS.
Why a socket served from the stage's own process: the stage already holds torch and the
programs; a launch then pays no interpreter start and no import (measured in
``benchmarks/seam.py``), and a program is loaded once per stage, not once per launch.

Every launch names itself with a token (``VERIFYLIB_SEAM_LAUNCH``); the executor files
what it did under that token (:class:`SeamLaunch`: the load, or why it was refused, and
each encode call with the SHA-256 of the mel it received and of the output it sent), which
the stage writes as evidence and the rules compare with the seam's own lines on the
launch's stderr.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from verifylib.runtime.contracts import COREML_INPUT_NAME, COREML_OUTPUT_NAME
from verifylib.runtime.contracts import seam as contract

__all__ = ["EncodeCall", "SeamExecutor", "SeamLaunch"]

_HEAD = struct.Struct("<4sQ")
_REPLY = struct.Struct("<IQ")


@dataclass(frozen=True)
class EncodeCall:
    """One ``whisper_coreml_encode`` call as the executor served it.

    Attributes
    ----------
    index : int
        1-based call number within the launch.
    n_ctx, n_mel : int
        The mel's shape as received (``[1, n_mel, n_ctx]``).
    input_sha256 : str
        SHA-256 of the mel's float32 bytes as received.
    output_sha256 : str or None
        SHA-256 of the float32 output bytes sent back; None when the call was refused.
    output_shape : tuple of int
        The executed program's output shape (empty when refused).
    seconds : float
        Execution wall time.
    refused : str or None
        Why the call got no output (a mel whose shape is not the program's input).
    """

    index: int
    n_ctx: int
    n_mel: int
    input_sha256: str
    output_sha256: str | None
    output_shape: tuple[int, ...]
    seconds: float
    refused: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the evidence record of the call.

        Returns
        -------
        dict
        """
        return {"index": self.index, "n_ctx": self.n_ctx, "n_mel": self.n_mel,
                "input_sha256": self.input_sha256, "output_sha256": self.output_sha256,
                "output_shape": list(self.output_shape), "seconds": round(self.seconds, 3),
                "refused": self.refused}


@dataclass
class SeamLaunch:
    """What the executor did for one launch (one ``init`` .. ``free``).

    Attributes
    ----------
    token : str
        The launch's token.
    folder : str
        The path ``init`` received.
    output_floats : int
        whisper.cpp's encoder output size the launch was told (0: not told); a larger
        output is refused.
    loaded : bool
        True when a program was loaded (``init`` returned a context).
    refusal : str or None
        Why the load was refused.
    program : dict or None
        ``kind``, ``digest`` and ``source`` of the loaded program.
    calls : list of EncodeCall
        Every encode call, in order.
    freed : bool
        True when ``free`` arrived.
    """

    token: str
    folder: str
    output_floats: int = 0
    loaded: bool = False
    refusal: str | None = None
    program: dict[str, Any] | None = None
    calls: list[EncodeCall] = field(default_factory=list)
    freed: bool = False

    def to_json(self) -> dict[str, Any]:
        """Return the evidence record of the launch.

        Returns
        -------
        dict
        """
        return {"token": self.token, "folder": self.folder,
                "output_floats": self.output_floats, "loaded": self.loaded,
                "refusal": self.refusal, "program": self.program,
                "calls": [c.to_json() for c in self.calls], "freed": self.freed}


def _recv_exact(conn: socket.socket, n: int) -> bytearray | None:
    # A bytearray: the mel read from it is a writable array, which torch takes as is.
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = conn.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
    return buf


def _strings(payload: bytes | bytearray, count: int) -> list[str]:
    out, pos = [], 0
    for _ in range(count):
        (n,) = struct.unpack_from("<I", payload, pos)
        pos += 4
        out.append(payload[pos:pos + n].decode("utf-8", "replace"))
        pos += n
    return out


class SeamExecutor:
    """A Unix-socket server that answers seam launches, for the life of a ``with`` block.

    Parameters
    ----------
    load : callable, optional
        ``folder -> SeamProgram`` (default
        :func:`verifylib.models.seam_encoder.load_seam_program`); a program is loaded
        once per folder and tree digest and kept for the executor's life.
    execute : callable, optional
        ``(program, mel) -> output array`` (default: the program executed in float32).
    """

    def __init__(self, load: Callable[[str], Any] | None = None,
                 execute: Callable[[Any, np.ndarray], np.ndarray] | None = None):
        self._load = load
        self._execute = execute or _execute_float32
        self._dir: Path | None = None
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._launches: dict[str, SeamLaunch] = {}
        self._programs: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._closing = False
        self.started_s: float | None = None

    # --------------------------------------------------------------------- lifecycle
    @property
    def socket_path(self) -> str:
        """The socket's path (a short private folder: AF_UNIX paths are limited)."""
        if self._dir is None:
            raise RuntimeError("the seam executor is not running")
        return str(self._dir / "s")

    def __enter__(self) -> "SeamExecutor":
        t0 = time.monotonic()
        # /tmp rather than $TMPDIR: a stage's TMPDIR may be deep, and macOS allows 104 bytes.
        self._dir = Path(tempfile.mkdtemp(prefix="vls-", dir="/tmp"))
        os.chmod(self._dir, 0o700)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.socket_path)
        self._sock.listen(8)
        self._thread = threading.Thread(target=self._accept, name="seam-executor",
                                        daemon=True)
        self._thread.start()
        self.started_s = time.monotonic() - t0
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and remove the socket's folder."""
        self._closing = True
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def launch_env(self) -> tuple[str, dict[str, str]]:
        """Return a fresh launch token and the environment a seam launch needs.

        Returns
        -------
        (str, dict)
            The token, and ``VERIFYLIB_SEAM_SOCKET`` / ``VERIFYLIB_SEAM_LAUNCH``.
        """
        token = secrets.token_hex(8)
        return token, {contract.SEAM_SOCKET_ENV: self.socket_path,
                       contract.SEAM_LAUNCH_ENV: token}

    def launch(self, token: str) -> SeamLaunch | None:
        """Return what the executor recorded for a launch token (None: it never connected).

        Parameters
        ----------
        token : str
            From :meth:`launch_env`.

        Returns
        -------
        SeamLaunch or None
        """
        with self._lock:
            return self._launches.get(token)

    def launches(self) -> tuple[SeamLaunch, ...]:
        """Return every launch the executor has served so far, in the order they connected.

        Returns
        -------
        tuple of SeamLaunch
        """
        with self._lock:
            return tuple(self._launches.values())

    def preload(self, folder: str | os.PathLike[str]) -> Any:
        """Load (or reuse) the program for ``folder`` ahead of the first launch.

        Parameters
        ----------
        folder : path-like
            A compiled model or a stand-in folder.

        Returns
        -------
        verifylib.models.seam_encoder.SeamProgram

        Raises
        ------
        verifylib.models.seam_encoder.SeamLoadRefused
            As the seam's ``init`` would be refused.
        """
        return self._program(str(folder))

    # --------------------------------------------------------------------- serving
    def _program(self, folder: str) -> Any:
        from verifylib.canonical import tree_digest
        from verifylib.models.seam_encoder import load_seam_program
        key = folder
        with self._lock:
            cached = self._programs.get(key)
        if cached is not None and Path(folder).is_dir() and \
                (tree_digest(Path(folder)) == cached[0]):
            return cached[1]
        prog = (self._load or load_seam_program)(folder)
        with self._lock:
            self._programs[key] = (tree_digest(Path(folder)), prog)
        return prog

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="seam-launch").start()

    def _reply(self, conn: socket.socket, status: int, payload: bytes) -> None:
        conn.sendall(_REPLY.pack(status, len(payload)))
        if payload:
            conn.sendall(payload)

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._converse(conn)
        except OSError:
            pass  # the launch ended first (it refused a reply, or died): its record says so
        finally:
            conn.close()

    def _converse(self, conn: socket.socket) -> None:
        launch: SeamLaunch | None = None
        prog: Any = None
        while True:
            head = _recv_exact(conn, _HEAD.size)
            if head is None:
                return
            op, n = _HEAD.unpack(head)
            if op == contract.OP_ENCODE:
                payload = bytearray() if n == 0 else _recv_exact(conn, n)
            elif n > contract.MAX_PATH_BYTES + 4096:
                return  # not a seam: drop the connection
            else:
                payload = bytearray() if n == 0 else _recv_exact(conn, n)
            if payload is None:
                return
            if op == contract.OP_LOAD:
                token, folder = _strings(payload, 2)
                (cap,) = struct.unpack_from("<Q", payload, len(payload) - 8)
                launch = SeamLaunch(token=token, folder=folder, output_floats=int(cap))
                with self._lock:
                    self._launches[token] = launch
                try:
                    prog = self._program(folder)
                except Exception as exc:  # every refusal is init's NULL, said why
                    launch.refusal = str(exc)
                    self._reply(conn, contract.STATUS_REFUSED, str(exc).encode())
                    return
                launch.loaded = True
                launch.program = {"kind": prog.kind, "digest": prog.digest,
                                  "source": dict(prog.source)}
                self._reply(conn, contract.STATUS_OK, prog.describe().encode())
            elif op == contract.OP_ENCODE and launch is not None and prog is not None:
                self._encode(conn, launch, prog, payload)
            elif op == contract.OP_FREE and launch is not None:
                launch.freed = True
                self._reply(conn, contract.STATUS_OK, b"")
                return
            else:
                return

    def _encode(self, conn: socket.socket, launch: SeamLaunch, prog: Any,
                payload: bytearray) -> None:
        n_ctx, n_mel = struct.unpack_from("<qq", payload, 0)
        raw = memoryview(payload)[16:]
        index = len(launch.calls) + 1
        in_sha = hashlib.sha256(raw).hexdigest()
        want = prog.input_shape
        if (1, n_mel, n_ctx) != tuple(want) or len(raw) != 4 * n_ctx * n_mel:
            why = (f"mel [1, {n_mel}, {n_ctx}] ({len(raw)} bytes) is not the program's "
                   f"input {list(want)}")
            launch.calls.append(EncodeCall(index, n_ctx, n_mel, in_sha, None, (), 0.0, why))
            self._reply(conn, contract.STATUS_REFUSED, why.encode())
            return
        mel = np.frombuffer(raw, dtype=np.float32).reshape(1, n_mel, n_ctx)
        t0 = time.monotonic()
        try:
            out = np.ascontiguousarray(self._execute(prog, mel), dtype=np.float32)
            why = None if out.ndim == 3 and out.shape[0] == 1 and 2 * out.shape[1] == n_ctx \
                else f"output {list(out.shape)} is not [1, n_ctx/2, n_state] for n_ctx {n_ctx}"
            if why is None and launch.output_floats and out.size > launch.output_floats:
                why = (f"output of {out.size} floats is larger than whisper.cpp's encoder "
                       f"output of {launch.output_floats}")
        except Exception as exc:  # the launch is told, and the evidence says why
            why = f"execution failed: {type(exc).__name__}: {exc}"
        seconds = time.monotonic() - t0
        if why is not None:
            launch.calls.append(EncodeCall(index, n_ctx, n_mel, in_sha, None, (), seconds, why))
            self._reply(conn, contract.STATUS_REFUSED, why.encode())
            return
        data = out.tobytes()
        launch.calls.append(EncodeCall(index, int(n_ctx), int(n_mel), in_sha,
                                       hashlib.sha256(data).hexdigest(), tuple(out.shape),
                                       seconds))
        self._reply(conn, contract.STATUS_OK, data)


def _execute_float32(prog: Any, mel: np.ndarray) -> np.ndarray:
    from verifylib.numerics.mil_exec import execute
    run = execute(prog.program, {COREML_INPUT_NAME: mel}, compute="float32")
    out: np.ndarray = run.outputs[COREML_OUTPUT_NAME]
    return out
