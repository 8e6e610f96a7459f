"""Strict field readers shared by the stage 01 and 02 schemas (:mod:`.build`, :mod:`.export`).

Each reader takes a JSON object, a key and the path of the object, and either returns the
value as stored (an integer stays an integer, so ``to_json`` writes the same bytes) or
raises :class:`SchemaError` naming the field. The message puts the path next to the value
(``probe.returncode True: expected an integer or null``), so a judge's reason shows both.
It imports nothing from verifylib but :mod:`verifylib.errors`.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, TypeVar

from verifylib.errors import EvidenceInvalid

__all__ = ["SchemaError"]


class SchemaError(EvidenceInvalid):
    """An evidence document of stage 01 or 02 does not have the shape of its schema.

    Parameters
    ----------
    path : str
        The offending field, e.g. ``probe.returncode``; ``""`` for the document itself.
    problem : str
        What is wrong with it.

    Attributes
    ----------
    path, problem : str
        As given; ``str(exc)`` is ``"<path> <problem>"`` (just the problem for the document).
    """

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path} {problem}" if path else problem)


_T = TypeVar("_T")


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def obj(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SchemaError(path, f"{value!r}: expected an object" if path
                          else "evidence is not a JSON object")
    return value


def get(doc: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in doc:
        raise SchemaError(join(path, key), "is missing")
    return doc[key]


def check(doc: Mapping[str, Any], key: str, path: str, ok: Callable[[Any], bool],
           want: str, nullable: bool) -> Any:
    value = get(doc, key, path)
    if (value is None and nullable) or (value is not None and ok(value)):
        return value
    raise SchemaError(join(path, key), f"{value!r}: expected {want}"
                      + (" or null" if nullable else ""))


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def string(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    return check(doc, key, path, lambda v: isinstance(v, str), "a string", nullable)


def integer(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    return check(doc, key, path, is_int, "an integer", nullable)


def number(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    return check(doc, key, path, is_num, "a number", nullable)


def boolean(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    return check(doc, key, path, lambda v: isinstance(v, bool), "a boolean", nullable)


def strings(doc: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = check(doc, key, path, lambda v: isinstance(v, list), "an array", False)
    for i, x in enumerate(value):
        if not isinstance(x, str):
            raise SchemaError(f"{join(path, key)}[{i}]", f"{x!r}: expected a string")
    return tuple(value)


def mapping(doc: Mapping[str, Any], key: str, path: str, nullable: bool = False) -> Any:
    value = check(doc, key, path, lambda v: isinstance(v, Mapping), "an object", nullable)
    return None if value is None else copy.deepcopy(dict(value))


def array(doc: Mapping[str, Any], key: str, path: str,
          parse: Callable[[Any, str], _T]) -> tuple[_T, ...]:
    value = check(doc, key, path, lambda v: isinstance(v, list), "an array", False)
    return tuple(parse(x, f"{join(path, key)}[{i}]") for i, x in enumerate(value))


def nested(doc: Mapping[str, Any], key: str, path: str, parse: Callable[[Any, str], _T],
            nullable: bool = False) -> Any:
    value = get(doc, key, path)
    if value is None and nullable:
        return None
    return parse(value, join(path, key))


def constant(doc: Mapping[str, Any], key: str, path: str, want: Any) -> Any:
    value = get(doc, key, path)
    if value is not want:
        raise SchemaError(join(path, key), f"{value!r}: expected {want!r}")
    return value


def copy_json(value: Any) -> Any:
    return copy.deepcopy(value)
