"""MIL text (a compiled model's ``model.mil``) read as the encoder card needs it.

Only what :mod:`verifylib.models.encoder_card` derives from a program: the opset, a
function's signature, and each operation's type, output types and argument types. Written
by hand: coremltools reads MIL text only through the Core ML framework on macOS, and no
package on PyPI parses it elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from verifylib.errors import ParametersInvalid

__all__ = ["FLOAT_DTYPES", "MilOp", "MilTextError", "parse_mil_text"]

FLOAT_DTYPES = ("FLOAT16", "FLOAT32", "FLOAT64", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E5M2")
"""The floating-point element types a MIL program may hold."""


@dataclass(frozen=True)
class MilOp:
    """One operation as either reader sees it: type, output types, argument types."""

    type: str
    outputs: tuple[tuple[str, tuple], ...]
    args: Mapping[str, tuple[str, tuple] | None]


class MilTextError(ParametersInvalid):
    """``model.mil`` does not parse as MIL text (the encoder card reports it as a note)."""


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|->|[()\[\]{}<>;,=]')
_OPEN, _CLOSE = "([{<", ")]}>"
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def _split_top(text: str, sep: str, maxsplit: int = -1) -> list[str]:
    """Split at ``sep`` outside brackets and strings."""
    parts, depth, start = [], 0, 0
    for m in _TOKEN.finditer(text):
        t = m.group()
        if t[0] == '"' or t == "->":
            continue
        if t in _OPEN:
            depth += 1
        elif t in _CLOSE:
            depth -= 1
            if depth < 0:
                raise MilTextError(f"unbalanced {t!r}")
        elif t == sep and depth == 0 and maxsplit != 0:
            parts.append(text[start:m.start()])
            start = m.end()
            maxsplit -= 1
    if depth != 0:
        raise MilTextError("unbalanced brackets")
    parts.append(text[start:])
    return parts


def _matching(text: str, at: int) -> int:
    """Index of the bracket closing the one at ``at``."""
    depth = 0
    for m in _TOKEN.finditer(text, at):
        t = m.group()
        if t[0] == '"' or t == "->":
            continue
        if t in _OPEN:
            depth += 1
        elif t in _CLOSE:
            depth -= 1
            if depth == 0:
                return m.start()
    raise MilTextError(f"no bracket closes the one at offset {at}")


def _text_dtype(word: str) -> str:
    """MIL text type word -> the protobuf DataType name (``fp16`` -> ``FLOAT16``)."""
    w = word.strip().lower()
    if w == "bf16":
        return "BFLOAT16"
    if w.startswith("fp") and w[2:].isdigit():
        return f"FLOAT{w[2:]}"
    if w in ("bool", "string"):
        return w.upper()
    if re.fullmatch(r"u?int\d+", w):
        return w.upper()
    return "OTHER"


def _text_type(t: str) -> tuple[str, tuple]:
    """Parse ``tensor<fp16, [1, 384, 1, 1500]>`` or a scalar type word."""
    t = t.strip()
    m = re.fullmatch(r"tensor\s*<\s*(\w+)\s*,\s*\[([^\]]*)\]\s*>", t)
    if m:
        dims = tuple(int(d) if d.strip().isdigit() else d.strip()
                     for d in m.group(2).split(",") if d.strip())
        return _text_dtype(m.group(1)), dims
    if re.fullmatch(r"\w+", t):
        return _text_dtype(t), ()
    return "OTHER", ()


def _text_value_type(v: str, types: Mapping[str, tuple]) -> tuple[str, tuple] | None:
    """Type of an argument: a literal's declared type, or the named value's."""
    v = v.strip()
    if v.startswith("tensor"):
        lt = v.find("<")
        if lt < 0:
            return None
        return _text_type(v[:_matching(v, lt) + 1])
    m = re.match(rf"({_IDENT})\s*\(", v)
    if m:
        return _text_type(m.group(1))
    if re.fullmatch(_IDENT, v):
        return types.get(v)
    return None


def _text_args(s: str, types: Mapping[str, tuple]) -> dict[str, tuple | None]:
    out: dict[str, tuple | None] = {}
    if not s.strip():
        return out
    for part in _split_top(s, ","):
        kv = _split_top(part, "=", maxsplit=1)
        if len(kv) != 2:
            continue
        key = kv[0].strip()
        if key != "name":
            out[key] = _text_value_type(kv[1], types)
    return out


def parse_mil_text(text: str, function: str = "main") -> tuple[str, list, list[MilOp], list[str]]:
    """Read a compiled model's ``model.mil``: the function's signature and statements.

    Only what the card needs: the opset, the inputs' types, each statement's operation
    type, output types and argument types, and the function's outputs.

    Parameters
    ----------
    text : str
        The MIL text.
    function : str
        The function to read.

    Returns
    -------
    (opset, inputs, ops, outputs)
        ``inputs`` and ``outputs`` are lists of (name, (dtype, shape)); ``outputs`` are
        the values the function returns.

    Raises
    ------
    EncoderInvalid
        When the text does not parse (:func:`describe_encoder` catches it and reports
        the reason in the card).
    """
    m = re.search(rf"\bfunc\s+{re.escape(function)}\s*<\s*([\w.]+)\s*>\s*\(", text)
    if m is None:
        raise MilTextError(f"no 'func {function}<opset>(' header")
    opset = m.group(1)
    params_open = m.end() - 1
    params_close = _matching(text, params_open)
    types: dict[str, tuple] = {}
    inputs = []
    for decl in _split_top(text[params_open + 1:params_close], ","):
        if not decl.strip():
            continue
        t, _, n = decl.strip().rpartition(" ")
        if not re.fullmatch(_IDENT, n):
            raise MilTextError(f"input declaration {decl.strip()!r}")
        types[n] = _text_type(t)
        inputs.append((n, types[n]))
    body_open = text.find("{", params_close)
    if body_open < 0:
        raise MilTextError("no function body")
    body_close = _matching(text, body_open)
    tail = re.match(r"\s*->\s*\(([^)]*)\)", text[body_close + 1:])
    if tail is None:
        raise MilTextError("no '-> (outputs)' after the function body")
    returned = [o.strip() for o in tail.group(1).split(",") if o.strip()]
    ops: list[MilOp] = []
    for stmt in _split_top(text[body_open + 1:body_close], ";"):
        if not stmt.strip():
            continue
        lhs_rhs = _split_top(stmt, "=", maxsplit=1)
        if len(lhs_rhs) != 2:
            raise MilTextError(f"statement without '=': {stmt.strip()[:80]!r}")
        lhs, rhs = lhs_rhs
        om = re.match(rf"\s*({_IDENT})\s*\(", rhs)
        if om is None:
            raise MilTextError(f"no operation in {rhs.strip()[:80]!r}")
        lhs = lhs.strip()
        if lhs.startswith("(") and lhs.endswith(")"):
            lhs = lhs[1:-1]
        outs = []
        for decl in _split_top(lhs, ","):
            t, _, n = decl.strip().rpartition(" ")
            if not re.fullmatch(_IDENT, n) or not t:
                raise MilTextError(f"output declaration {decl.strip()[:80]!r}")
            types[n] = _text_type(t)
            outs.append(types[n])
        args_open = om.end() - 1
        args_close = _matching(rhs, args_open)
        args = _text_args(rhs[args_open + 1:args_close], types)
        rest = rhs[args_close + 1:].lstrip()
        if rest.startswith("["):  # attributes; iOS 16 constexpr ops carry their data here
            for k, v in _text_args(rest[1:_matching(rest, 0)], types).items():
                args.setdefault(k, v)
        ops.append(MilOp(om.group(1), tuple(outs), args))
    return opset, inputs, ops, [(n, types.get(n, ("OTHER", ()))) for n in returned]
