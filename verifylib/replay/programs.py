"""Two saved ML programs compared op by op and weight by weight.

A package's bytes carry conversion ids and timestamps, so two conversions of one model
never have the same tree digest; their *program* must be the same. Both programs are read
with :func:`verifylib.numerics.mil_exec.load_program` (the reader parity executes), then
compared: function inputs and outputs, every operation in order (type, bound inputs,
output names, dtypes and shapes), the compressed constants, and every constant by dtype,
shape and bytes. No package compares programs this way, hence this module.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

MAX_LISTED = 8
"""Differences named in full; the rest are counted."""


@dataclass(frozen=True)
class ProgramComparison:
    """The outcome of :func:`compare_programs`.

    Attributes
    ----------
    same : bool
        True when no difference was found.
    ops : int
        Operations compared (``const`` excluded).
    weights : int
        Constants compared.
    weight_bytes : int
        Bytes of constant data compared.
    differences : list of str
        The first :data:`MAX_LISTED` differences, named.
    more : int
        Differences beyond those listed.
    """

    same: bool
    ops: int
    weights: int
    weight_bytes: int
    differences: list[str] = field(default_factory=list)
    more: int = 0

    def summary(self) -> str:
        """One line: what was compared and the first difference, if any."""
        head = f"{self.ops} ops and {self.weights} weights ({self.weight_bytes} bytes)"
        if self.same:
            return f"{head}: identical"
        extra = f" (+{self.more} more)" if self.more else ""
        return f"{head}: {'; '.join(self.differences[:3])}{extra}"


def _value_key(value: Any) -> tuple[str, tuple[int, ...], str]:
    """(dtype, shape, sha256 of the bytes) of a constant, whatever its Python type."""
    import numpy as np

    if isinstance(value, str):
        return "str", (), hashlib.sha256(value.encode("utf-8")).hexdigest()
    arr = np.ascontiguousarray(np.asarray(value))
    return str(arr.dtype), tuple(arr.shape), hashlib.sha256(arr.tobytes()).hexdigest()


def _value_bytes(value: Any) -> int:
    import numpy as np

    return 0 if isinstance(value, str) else int(np.asarray(value).nbytes)


def compare_programs(recorded: str | os.PathLike[str], replayed: str | os.PathLike[str]
                     ) -> ProgramComparison:
    """Compare the ML programs of two saved ``.mlpackage`` folders.

    Parameters
    ----------
    recorded : path-like
        The run's published package.
    replayed : path-like
        The package converted again on this host.

    Returns
    -------
    ProgramComparison
        ``same`` is True only when structure, constants and weights all agree.

    Raises
    ------
    verifylib.numerics.mil_exec.MilExecError
        If either folder is not a readable ML program.
    """
    from verifylib.numerics.mil_exec import load_program

    a, b = load_program(recorded), load_program(replayed)
    diffs: list[str] = []
    if a.specification_version != b.specification_version:
        diffs.append(f"specification version {a.specification_version} vs "
                     f"{b.specification_version}")
    if a.inputs != b.inputs:
        diffs.append(f"inputs {a.inputs} vs {b.inputs}")
    if a.outputs != b.outputs:
        diffs.append(f"outputs {a.outputs} vs {b.outputs}")
    if a.op_counts != b.op_counts:
        changed = sorted(k for k in set(a.op_counts) | set(b.op_counts)
                         if a.op_counts.get(k) != b.op_counts.get(k))
        diffs.append("op counts differ: " + ", ".join(
            f"{k} {a.op_counts.get(k, 0)} vs {b.op_counts.get(k, 0)}" for k in changed))
    for i, (x, y) in enumerate(zip(a.ops, b.ops)):
        if x != y:
            diffs.append(f"op {i} ({x.type} -> {x.outputs[0].name if x.outputs else '?'}) "
                         f"differs from {y.type} -> {y.outputs[0].name if y.outputs else '?'}")
    if len(a.ops) != len(b.ops):
        diffs.append(f"{len(a.ops)} ops vs {len(b.ops)}")
    if a.constexprs != b.constexprs:
        diffs.append("the compressed constants (constexpr ops) differ")
    names = sorted(set(a.consts) | set(b.consts))
    weight_bytes = 0
    for name in names:
        if name not in a.consts or name not in b.consts:
            diffs.append(f"constant {name!r} only in the "
                         f"{'recorded' if name in a.consts else 'replayed'} program")
            continue
        ka, kb = _value_key(a.consts[name]), _value_key(b.consts[name])
        weight_bytes += _value_bytes(a.consts[name])
        if ka != kb or a.const_dtypes.get(name) != b.const_dtypes.get(name):
            what = "shape" if ka[:2] != kb[:2] else "bytes"
            diffs.append(f"weight {name!r}: {what} differ ({ka[0]}{list(ka[1])} vs "
                         f"{kb[0]}{list(kb[1])})")
    return ProgramComparison(same=not diffs, ops=len(a.ops), weights=len(names),
                             weight_bytes=weight_bytes, differences=diffs[:MAX_LISTED],
                             more=max(0, len(diffs) - MAX_LISTED))
