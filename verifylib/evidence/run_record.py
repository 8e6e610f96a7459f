"""The record of one launch, as every stage's evidence cites it.

:func:`verifylib.runtime.runner.run_record` writes it (argv, ending, stream digests and
lengths, the launch-ledger citation); the build probe, the canary runs, the WER runs and the
hybrid runs all store this one shape, read here once.
"""

from __future__ import annotations

from typing import Any

from verifylib.evidence.fields import (
    Schema,
    array_of,
    boolean,
    field,
    integer,
    integer_or_null,
    mapping,
    nullable,
    number,
    string,
    string_or_null,
    strings,
)

__all__ = ["Launch", "RunRecord", "SeamCall", "SeamProgramRef", "SeamExecutorRecord"]


class Launch(Schema, kw_only=True):
    """The launch-ledger citation of a run (:func:`verifylib.runtime.ledger.citation`).

    Attributes
    ----------
    seq : int
        The ledger entry's number.
    binary_sha256 : str
        The launched binary's digest, as the ledger recorded it.
    """

    _path = "launch"

    seq: int = field(integer)
    binary_sha256: str = field(string)


class RunRecord(Schema, kw_only=True):
    """One whisper-cli run as :func:`verifylib.runtime.runner.run_record` records it.

    Attributes
    ----------
    argv : tuple of str
        The exact argument vector (binary first).
    returncode : int or None
        Raw return code; None on timeout.
    signal : str or None
        Signal name when the child died by a signal.
    signal_table : str or None
        The OS whose signal numbers ``signal`` was decoded by
        (:func:`verifylib.runtime.contracts.termination` decodes with it); None (and absent
        from the JSON) in a record written before records named it.
    timed_out : bool
        Whether the child was killed for exceeding its timeout.
    wall_s : float
        Wall time in seconds.
    stdout_sha256, stderr_sha256 : str
        Digests of the stored streams.
    stdout_bytes, stderr_bytes : int
        Lengths of the streams.
    launch : Launch or None
        The ledger citation; None (and absent from the JSON) when the run was not recorded
        in a launch ledger.
    """

    _path = "run"

    argv: tuple[str, ...] = field(strings)
    returncode: int | None = field(integer_or_null)
    signal: str | None = field(string_or_null)
    signal_table: str | None = field(string, optional=True, default=None)
    timed_out: bool = field(boolean)
    wall_s: float = field(number)
    stdout_sha256: str = field(string)
    stderr_sha256: str = field(string)
    stdout_bytes: int = field(integer)
    stderr_bytes: int = field(integer)
    launch: Launch | None = field(Launch, optional=True, default=None)


class SeamCall(Schema, kw_only=True):
    """One ``encode`` call of a seam launch as its executor served it.

    Attributes
    ----------
    index : int
        1-based call number within the launch.
    n_ctx, n_mel : int
        The mel's shape as received.
    input_sha256 : str
        SHA-256 of the mel's float32 bytes.
    output_sha256 : str or None
        SHA-256 of the output's float32 bytes; None when the call was refused.
    output_shape : tuple of int
        The output's shape (empty when refused).
    seconds : float
        Execution wall time.
    refused : str or None
        Why the call got no output.
    """

    index: int = field(integer)
    n_ctx: int = field(integer)
    n_mel: int = field(integer)
    input_sha256: str = field(string)
    output_sha256: str | None = field(string_or_null)
    output_shape: tuple[int, ...] = field(array_of(integer))
    seconds: float = field(number)
    refused: str | None = field(string_or_null)


class SeamProgramRef(Schema, kw_only=True):
    """The program a seam launch's executor loaded.

    Attributes
    ----------
    kind : str
        ``mlmodelc`` or ``standin``.
    digest : str
        The tree digest of the compiled model or of the stand-in's package.
    source : dict
        Where it was read from.
    """

    kind: str = field(string)
    digest: str = field(string)
    source: dict[str, Any] = field(mapping)


class SeamExecutorRecord(Schema, kw_only=True):
    """What the seam's executor recorded for one launch.

    As :meth:`verifylib.numerics.seam_executor.SeamLaunch.to_json` writes it.

    Attributes
    ----------
    token : str
        The launch's token.
    folder : str
        The path the seam's ``init`` sent.
    output_floats : int
        whisper.cpp's encoder output size the launch was told (0: not told).
    loaded : bool
        Whether a program was loaded.
    refusal : str or None
        Why the load was refused.
    program : SeamProgramRef or None
        The loaded program.
    calls : tuple of SeamCall
        Every encode call, in order.
    freed : bool
        Whether ``free`` arrived.
    """

    token: str = field(string)
    folder: str = field(string)
    output_floats: int = field(integer)
    loaded: bool = field(boolean)
    refusal: str | None = field(string_or_null)
    program: SeamProgramRef | None = field(nullable(SeamProgramRef.from_json))
    calls: tuple[SeamCall, ...] = field(array_of(SeamCall.from_json))
    freed: bool = field(boolean)
