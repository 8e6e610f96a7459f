"""The record of one launch, as every stage's evidence cites it.

:func:`verifylib.runtime.runner.run_record` writes it (argv, ending, stream digests and
lengths, the launch-ledger citation); the build probe, the canary runs, the WER runs and the
hybrid runs all store this one shape, read here once.
"""

from __future__ import annotations

from verifylib.evidence.fields import (
    Schema,
    boolean,
    field,
    integer,
    integer_or_null,
    number,
    string,
    string_or_null,
    strings,
)

__all__ = ["Launch", "RunRecord"]


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
