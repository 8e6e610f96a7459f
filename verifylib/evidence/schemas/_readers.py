"""Strict field readers shared by the stage 01 and 02 schemas (:mod:`.build`, :mod:`.export`).

Each reader takes a JSON object, a key and the path of the object, and either returns the
value as stored (an integer stays an integer, so ``to_json`` writes the same bytes) or
raises :class:`~verifylib.evidence.schemas._fields.SchemaError` (the one schema error of
every stage, an :class:`verifylib.errors.EvidenceInvalid`) naming the field. The problem
names the field's key beside its value (``probe.returncode: returncode True is not an
integer or null``), so a judge's reason shows both. It imports nothing from verifylib but
the schema error.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, TypeVar

from verifylib.evidence.schemas._fields import SchemaError

__all__ = ["SchemaError"]


_T = TypeVar("_T")


def _leaf(path: str) -> str:
    """Return the last key of ``path`` (``probe.returncode`` -> ``returncode``)."""
    return path.rsplit(".", 1)[-1]


def _wrong(path: str, value: Any, want: str) -> SchemaError:
    return SchemaError(path, f"{_leaf(path)} {value!r} is not {want}")


def join(path: str, key: str) -> str:
    """Return the path of ``key`` inside the object at ``path``."""
    return f"{path}.{key}" if path else key


def obj(value: Any, path: str) -> Mapping[str, Any]:
    """Return ``value`` if it is a JSON object, else raise naming ``path``."""
    if not isinstance(value, Mapping):
        if not path:
            raise SchemaError("", "evidence is not a JSON object")
        raise _wrong(path, value, "an object")
    return value


def get(doc: Mapping[str, Any], key: str, path: str) -> Any:
    """Return ``doc[key]``; a missing key raises naming ``path.key``."""
    if key not in doc:
        raise SchemaError(join(path, key), "missing")
    return doc[key]


def check(doc: Mapping[str, Any], key: str, path: str, ok: Callable[[Any], bool],
          want: str, nullable: bool) -> Any:
    """Return ``doc[key]`` if ``ok`` accepts it (or it is null and ``nullable``)."""
    value = get(doc, key, path)
    if (value is None and nullable) or (value is not None and ok(value)):
        return value
    raise _wrong(join(path, key), value, want + (" or null" if nullable else ""))


def is_int(v: Any) -> bool:
    """Tell whether ``v`` is a JSON integer (a boolean is not)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    """Tell whether ``v`` is a JSON number (a boolean is not)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def string(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    """Read a string field."""
    return check(doc, key, path, lambda v: isinstance(v, str), "a string", nullable)


def integer(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    """Read an integer field, kept as stored."""
    return check(doc, key, path, is_int, "an integer", nullable)


def number(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    """Read a number field, kept as stored (an integer stays an integer)."""
    return check(doc, key, path, is_num, "a number", nullable)


def boolean(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    """Read a boolean field."""
    return check(doc, key, path, lambda v: isinstance(v, bool), "a boolean", nullable)


def strings(doc: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    """Read an array of strings as a tuple."""
    value = check(doc, key, path, lambda v: isinstance(v, list), "an array", False)
    for i, x in enumerate(value):
        if not isinstance(x, str):
            raise _wrong(f"{join(path, key)}[{i}]", x, "a string")
    return tuple(value)


def mapping(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    """Read an object the schema does not type, as a deep-copied plain dict."""
    value = check(doc, key, path, lambda v: isinstance(v, Mapping), "an object", nullable)
    return None if value is None else copy.deepcopy(dict(value))


def array(doc: Mapping[str, Any], key: str, path: str,
          parse: Callable[[Any, str], _T]) -> tuple[_T, ...]:
    """Read an array, each item with ``parse(item, "<path>[i]")``."""
    value = check(doc, key, path, lambda v: isinstance(v, list), "an array", False)
    return tuple(parse(x, f"{join(path, key)}[{i}]") for i, x in enumerate(value))


def nested(doc: Mapping[str, Any], key: str, path: str, parse: Callable[[Any, str], _T],
           nullable: bool = False) -> Any:
    """Read a nested document with ``parse(value, "<path>.<key>")`` (or null if allowed)."""
    value = get(doc, key, path)
    if value is None and nullable:
        return None
    return parse(value, join(path, key))


def constant(doc: Mapping[str, Any], key: str, path: str, want: Any) -> Any:
    """Read a field that must be exactly ``want`` (``built``: true or false)."""
    value = get(doc, key, path)
    if value is not want:
        raise _wrong(join(path, key), value, repr(want))
    return value


def copy_json(value: Any) -> Any:
    """Return a deep copy of a JSON value, for ``to_json``."""
    return copy.deepcopy(value)
