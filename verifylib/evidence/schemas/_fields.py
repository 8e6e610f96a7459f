"""Strict field readers shared by the stage 04-06 schemas (parity, wer, placement).

Each reader takes the JSON value and the path it was found at, and either returns the
value (as stored: an integer stays an integer, so ``to_json`` writes the same bytes) or
raises :class:`SchemaError` naming the path. It imports nothing from verifylib but
:mod:`verifylib.errors`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, TypeVar

from verifylib.errors import EvidenceInvalid

__all__ = ["SchemaError"]

_T = TypeVar("_T")


class SchemaError(EvidenceInvalid):
    """An evidence document of stages 04-06 does not have the shape of its schema.

    Parameters
    ----------
    path : str
        The offending field, e.g. ``measurements[2].metrics.snr_db``; ``""`` for the
        document itself.
    problem : str
        What is wrong with it.

    Attributes
    ----------
    path, problem : str
        As given; ``str(exc)`` is ``"<path>: <problem>"``.
    """

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {value!r}"
    if isinstance(value, int):
        return f"integer {value!r}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        text = repr(value)
        return f"string {text if len(text) <= 40 else text[:37] + '...'}"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def wrong(path: str, want: str, value: Any) -> SchemaError:
    return SchemaError(path, f"expected {want}, got {describe(value)}")


def obj(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise wrong(path or "document", "an object", value)
    return value


def req(o: Mapping[str, Any], key: str, path: str, read: Callable[[Any, str], _T]) -> _T:
    """``read`` of the value at ``key``; a missing key is refused."""
    if key not in o:
        raise SchemaError(join(path, key), "missing")
    return read(o[key], join(path, key))


def opt(o: Mapping[str, Any], key: str, path: str,
        read: Callable[[Any, str], _T]) -> _T | None:
    """``read`` of the value at ``key``, or None when the document omits the key.

    A key that is present is read strictly (``null`` only if ``read`` accepts it), so a
    field the schema calls optional is either absent or well typed.
    """
    if key not in o:
        return None
    return read(o[key], join(path, key))


def string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise wrong(path, "a string", value)
    return value


def integer(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong(path, "an integer", value)
    return value


def number(value: Any, path: str) -> float:
    """Read a JSON number, kept as stored (an integer stays an integer)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong(path, "a number", value)
    return value


_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def real(value: Any, path: str) -> float:
    """Read a number as the canonical JSON stores it: ``"inf"``, ``"-inf"``, ``"nan"`` too.

    The strings come back as floats, which the canonical JSON writes as the same strings.
    """
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong(path, 'a number (or "inf", "-inf", "nan")', value)
    return value


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise wrong(path, "a boolean", value)
    return value


def nullable(read: Callable[[Any, str], _T]) -> Callable[[Any, str], _T | None]:
    """``read`` that also accepts ``null``."""
    def r(value: Any, path: str) -> _T | None:
        return None if value is None else read(value, path)
    return r


def array(value: Any, path: str, item: Callable[[Any, str], _T]) -> tuple[_T, ...]:
    if not isinstance(value, list):
        raise wrong(path, "an array", value)
    return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))


def strings(value: Any, path: str) -> tuple[str, ...]:
    return array(value, path, string)


def mapping(value: Any, path: str) -> dict[str, Any]:
    """Read an object, kept as a plain dict (a nested document the schema does not type)."""
    o = obj(value, path)
    for k in o:
        string(k, f"{path} key")
    return dict(o)


def number_map(value: Any, path: str) -> dict[str, float]:
    o = obj(value, path)
    return {string(k, f"{path} key"): number(v, join(path, str(k))) for k, v in o.items()}


def put(out: dict[str, Any], key: str, value: Any) -> None:
    """Set ``out[key]`` unless ``value`` is None (an optional key the document omitted)."""
    if value is not None:
        out[key] = value
