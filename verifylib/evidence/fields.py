"""The strict field readers of every evidence schema, and the one schema error.

Each reader takes a JSON value and the path it was found at (``sides.patched.runs[2]``)
and either returns the value as stored (an integer stays an integer, so ``to_json`` writes
the same bytes) or raises :class:`SchemaError` naming the path. :func:`req` and :func:`opt`
read the value at a key of an object. A schema is a :class:`Schema` subclass whose fields
are declared once with :func:`field` (the reader, and the JSON key when it differs, whether
the key may be absent, a constant key); its generic ``from_json`` reads them in
declaration order and ``to_json`` writes them back in that order. Classes with real
cross-field logic override one of the two.

Why hand-written: no package among verifylib's dependencies reads JSON into frozen
dataclasses strictly, failing closed and naming the offending field's path in the format the
gate rules report. ``jsonschema`` and ``fastjsonschema`` are dependencies, but they validate
against a JSON Schema document and build no typed record, and their messages do not name the
field as ``a.b[2].c``; pydantic, msgspec, cattrs and dacite are not dependencies, and one
would be added for a few dozen lines. The module imports nothing from verifylib but
:mod:`verifylib.errors`.

One phrasing of a wrongly typed value for every document, :data:`EXPECTED`
(``<path>: expected an integer or null, got string '3'``), also bound to the module-level
readers below.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import (
    Any,
    Callable,
    ClassVar,
    Generic,
    Mapping,
    TypeGuard,
    TypeVar,
    cast,
    dataclass_transform,
)

from verifylib.errors import EvidenceInvalid

__all__ = [
    "SchemaError", "Readers", "EXPECTED", "describe", "join", "req", "opt", "put",
    "exactly", "nullable", "copy_json",
    "obj", "string", "string_or_null", "integer", "integer_or_null", "number",
    "number_or_null", "boolean", "boolean_or_null", "real", "array", "array_of", "strings",
    "mapping", "mapping_or_null", "number_map", "map_of", "field", "Schema",
]

_T = TypeVar("_T")
Read = Callable[[Any, str], _T]


class SchemaError(EvidenceInvalid):
    """An evidence document does not have the shape of its schema.

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
        As given; ``str(exc)`` is ``"<path>: <problem>"`` (the problem alone for ``""``).
    """

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


def describe(value: Any) -> str:
    """Name a JSON value for a message (``boolean True``, ``string 'x'``, ``array``).

    Parameters
    ----------
    value : Any
        The value.

    Returns
    -------
    str
    """
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
    """Return the path of ``key`` inside the object at ``path``.

    Parameters
    ----------
    path, key : str
        The object's path (``""`` for the document) and the key.

    Returns
    -------
    str
    """
    return f"{path}.{key}" if path else key


def req(o: Mapping[str, Any], key: str, path: str, read: Read[_T]) -> _T:
    """Read the value at ``key`` with ``read``; a missing key is refused.

    Parameters
    ----------
    o : mapping
        The object.
    key : str
        The key.
    path : str
        The object's path.
    read : callable
        ``read(value, path)``, a reader of this module or a schema's ``from_json``.

    Returns
    -------
    object
        What ``read`` returns.

    Raises
    ------
    SchemaError
        ``<path>.<key>: missing``, or what ``read`` raises.
    """
    if key not in o:
        raise SchemaError(join(path, key), "missing")
    return read(o[key], join(path, key))


def opt(o: Mapping[str, Any], key: str, path: str, read: Read[_T]) -> _T | None:
    """Read the value at ``key`` with ``read``, or None when the object omits the key.

    A key that is present is read strictly (``null`` only if ``read`` accepts it), so a
    field the schema calls optional is either absent or well typed.

    Parameters
    ----------
    o : mapping
        The object.
    key : str
        The key.
    path : str
        The object's path.
    read : callable
        ``read(value, path)``.

    Returns
    -------
    object or None
    """
    if key not in o:
        return None
    return read(o[key], join(path, key))


def put(out: dict[str, Any], key: str, value: Any) -> None:
    """Set ``out[key]`` unless ``value`` is None (an optional key the document omitted).

    Parameters
    ----------
    out : dict
        The dict ``to_json`` is building.
    key : str
        The key.
    value : Any
        The value, or None to leave the key out.
    """
    if value is not None:
        out[key] = value


def exactly(o: Mapping[str, Any], keys: tuple[str, ...], path: str) -> Mapping[str, Any]:
    """Refuse keys beyond ``keys`` (for parts whose every byte a rule compares).

    Parameters
    ----------
    o : mapping
        The object.
    keys : tuple of str
        Its fields.
    path : str
        Its path.

    Returns
    -------
    mapping
        ``o``.

    Raises
    ------
    SchemaError
        ``<path>.<key>: not a field of this record`` for the first other key.
    """
    extra = sorted(str(k) for k in o if k not in keys)
    if extra:
        raise SchemaError(join(path, extra[0]), "not a field of this record")
    return o


def nullable(read: Read[_T]) -> Read[_T | None]:
    """Return ``read`` that also accepts ``null`` (the message names only ``read``'s type).

    Parameters
    ----------
    read : callable
        ``read(value, path)``.

    Returns
    -------
    callable
    """
    def r(value: Any, path: str) -> _T | None:
        return None if value is None else read(value, path)
    return r


def copy_json(value: Any) -> Any:
    """Return a deep copy of a JSON value, for ``to_json``.

    Parameters
    ----------
    value : Any
        The value.

    Returns
    -------
    Any
    """
    return copy.deepcopy(value)


def _expected(path: str, want: str, value: Any) -> SchemaError:
    return SchemaError(path or "document", f"expected {want}, got {describe(value)}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class _Typed(Generic[_T]):
    """A reader of one JSON type: the value as stored, or the phrasing's refusal."""

    def __init__(self, ok: Callable[[Any], bool], want: str, null: bool,
                 wrong: Callable[[str, str, Any], SchemaError]):
        self._ok, self._null, self._wrong = ok, null, wrong
        self._want = want + (" or null" if null else "")

    def __call__(self, value: Any, path: str) -> _T:
        if (value is None and self._null) or (value is not None and self._ok(value)):
            # ``ok`` (or None where the reader allows null) is the check that makes it a _T.
            return cast(_T, value)
        raise self._wrong(path, self._want, value)


class Readers:
    """The readers of one phrasing of a wrongly typed value.

    Parameters
    ----------
    wrong : callable
        ``wrong(path, want, value)`` gives the :class:`SchemaError` of a value at ``path``
        that is not ``want`` (``"an integer or null"``).

    Attributes
    ----------
    string, integer, number, boolean : callable
        ``read(value, path)`` of a string, an integer, a number (an integer stays an
        integer), a boolean; a boolean is no integer and no number.
    string_or_null, integer_or_null, number_or_null, boolean_or_null : callable
        The same, accepting ``null`` (and saying so when they refuse).
    """

    def __init__(self, wrong: Callable[[str, str, Any], SchemaError]):
        self._wrong = wrong
        self.string: _Typed[str] = _Typed(lambda v: isinstance(v, str), "a string", False, wrong)
        self.string_or_null: _Typed[str | None] = _Typed(
            lambda v: isinstance(v, str), "a string", True, wrong)
        self.integer: _Typed[int] = _Typed(_is_int, "an integer", False, wrong)
        self.integer_or_null: _Typed[int | None] = _Typed(_is_int, "an integer", True, wrong)
        self.number: _Typed[float] = _Typed(_is_num, "a number", False, wrong)
        self.number_or_null: _Typed[float | None] = _Typed(_is_num, "a number", True, wrong)
        self.boolean: _Typed[bool] = _Typed(lambda v: isinstance(v, bool), "a boolean",
                                            False, wrong)
        self.boolean_or_null: _Typed[bool | None] = _Typed(
            lambda v: isinstance(v, bool), "a boolean", True, wrong)

    def obj(self, value: Any, path: str) -> Mapping[str, Any]:
        """Return ``value`` if it is a JSON object.

        Parameters
        ----------
        value : Any
            The value.
        path : str
            Its path (``""`` for the document).

        Returns
        -------
        mapping

        Raises
        ------
        SchemaError
            If it is not an object.
        """
        if not isinstance(value, Mapping):
            raise self._wrong(path, "an object", value)
        return value

    def real(self, value: Any, path: str) -> float:
        """Read a number as the canonical JSON stores it: ``"inf"``, ``"-inf"``, ``"nan"`` too.

        Parameters
        ----------
        value : Any
            The value.
        path : str
            Its path.

        Returns
        -------
        float
            The number as stored; the three strings as floats (which the canonical JSON
            writes as the same strings).

        Raises
        ------
        SchemaError
            If it is neither.
        """
        if isinstance(value, str) and value in _NONFINITE:
            return _NONFINITE[value]
        if not _is_num(value):
            raise self._wrong(path, 'a number (or "inf", "-inf", "nan")', value)
        return value

    def literal(self, want: Any) -> Read[Any]:
        """Return a reader of a field that must be exactly ``want`` (``built``: false).

        Parameters
        ----------
        want : Any
            ``True``, ``False`` or ``None``.

        Returns
        -------
        callable
        """
        def r(value: Any, path: str) -> Any:
            if value is not want:
                raise self._wrong(path, repr(want), value)
            return value
        return r

    def array(self, value: Any, path: str, item: Read[_T]) -> tuple[_T, ...]:
        """Read an array, each item with ``item(value, "<path>[i]")``.

        Parameters
        ----------
        value : Any
            The value.
        path : str
            Its path.
        item : callable
            The reader of one item.

        Returns
        -------
        tuple

        Raises
        ------
        SchemaError
            If it is not an array, or an item does not read.
        """
        if not isinstance(value, list):
            raise self._wrong(path, "an array", value)
        return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

    def array_of(self, item: Read[_T]) -> Read[tuple[_T, ...]]:
        """Return the reader of an array of ``item``.

        Parameters
        ----------
        item : callable
            The reader of one item.

        Returns
        -------
        callable
        """
        return lambda value, path: self.array(value, path, item)

    def strings(self, value: Any, path: str) -> tuple[str, ...]:
        """Read an array of strings as a tuple.

        Parameters
        ----------
        value : Any
            The value.
        path : str
            Its path.

        Returns
        -------
        tuple of str
        """
        return self.array(value, path, self.string)

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        """Read an object the schema does not type, as a deep-copied plain dict.

        Parameters
        ----------
        value : Any
            The value.
        path : str
            Its path.

        Returns
        -------
        dict
        """
        o = self.obj(value, path)
        for k in o:
            self.string(k, f"{path} key")
        return copy.deepcopy(dict(o))

    def mapping_or_null(self, value: Any, path: str) -> dict[str, Any] | None:
        """Read an untyped object or ``null`` (and say so when refusing).

        Parameters
        ----------
        value : Any
            The value.
        path : str
            Its path.

        Returns
        -------
        dict or None
        """
        if value is not None and not isinstance(value, Mapping):
            raise self._wrong(path, "an object or null", value)
        return None if value is None else self.mapping(value, path)

    def map_of(self, value: Any, path: str, item: Read[_T]) -> dict[str, _T]:
        """Read an object whose every value ``item`` reads (at ``<path>.<key>``).

        Parameters
        ----------
        value : Any
            The value.
        path : str
            Its path.
        item : callable
            The reader of one value.

        Returns
        -------
        dict
        """
        o = self.obj(value, path)
        return {self.string(k, f"{path} key"): item(v, join(path, str(k)))
                for k, v in o.items()}

    def number_map(self, value: Any, path: str) -> dict[str, float]:
        """Read an object of numbers.

        Parameters
        ----------
        value : Any
            The value.
        path : str
            Its path.

        Returns
        -------
        dict
        """
        return self.map_of(value, path, self.number)


EXPECTED = Readers(_expected)
"""``<path>: expected an integer or null, got string '3'``; a document that is not an
object is ``document: expected an object, got array``."""

obj = EXPECTED.obj
string = EXPECTED.string
string_or_null = EXPECTED.string_or_null
integer = EXPECTED.integer
integer_or_null = EXPECTED.integer_or_null
number = EXPECTED.number
number_or_null = EXPECTED.number_or_null
boolean = EXPECTED.boolean
boolean_or_null = EXPECTED.boolean_or_null
real = EXPECTED.real
array = EXPECTED.array
array_of = EXPECTED.array_of
strings = EXPECTED.strings
mapping = EXPECTED.mapping
mapping_or_null = EXPECTED.mapping_or_null
map_of = EXPECTED.map_of
number_map = EXPECTED.number_map


# ----------------------------------------------------------------------------- declarative

def field(read: Any, *, key: str | None = None, optional: bool = False,
          inline: bool = False, default: Any = dataclasses.MISSING, init: bool = True) -> Any:
    """Declare one field of a :class:`Schema`: its reader, and how it sits in the JSON.

    Parameters
    ----------
    read : callable or schema class
        ``read(value, path)`` (a reader of this module, or a schema's ``from_json``); a
        schema class stands for its ``from_json``.
    key : str, optional
        The JSON key when it is not the attribute's name.
    optional : bool
        The key may be absent (read as with :func:`opt`) and is omitted when the value is
        None (written as with :func:`put`).
    inline : bool
        The field is a schema read from, and written into, the same object as its owner.
    default : Any, optional
        The attribute's default.
    init : bool
        False for a constant key (``"built": true``): ``read`` checks it (``literal(True)``)
        and ``to_json`` writes ``default``; it is no constructor parameter.

    Returns
    -------
    dataclasses.Field
    """
    if isinstance(read, type):
        read = cast(Any, read).from_json
    meta = {"read": read, "key": key, "optional": optional, "inline": inline}
    if not init:
        return dataclasses.field(default=default, init=False, repr=False, compare=False,
                                 metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _write(value: Any) -> Any:
    if hasattr(value, "to_json"):  # a Schema, or a record with a hand-written to_json
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_write(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _write(v) for k, v in value.items()}
    return value


_S = TypeVar("_S", bound="Schema")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, field))
class Schema:
    """A frozen dataclass whose fields are declared with :func:`field`.

    Subclasses are made frozen dataclasses (``class X(Schema, kw_only=True)`` for
    keyword-only fields). ``from_json`` is strict and fails closed: a
    missing or wrongly typed field raises :class:`SchemaError` whose ``path`` names it.
    ``to_json`` gives back exactly the dict that was read, key for key.

    Attributes
    ----------
    _readers : Readers
        The phrasing of a document that is not an object (:data:`EXPECTED` by default).
    _path : str
        The default ``path`` of ``from_json``.
    _closed : str or None
        For a record whose every key is declared: the problem a key beyond its fields is
        refused with (``<path>.<key>: not a field of this record``), before any field is
        read. None (the default): other keys are not read.
    """

    _readers: ClassVar[Readers] = EXPECTED
    _path: ClassVar[str] = ""
    _closed: ClassVar[str | None] = None
    # Set on each subclass by ``dataclasses.dataclass`` (in ``__init_subclass__``); declared
    # so that a type checker reads a Schema as the dataclass it is.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __init_subclass__(cls, *, kw_only: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, kw_only=kw_only)(cls)

    @classmethod
    def from_json(cls: type[_S], doc: Any, path: str | None = None) -> _S:
        """Read the document (or the part of one at ``path``), field by field.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str, optional
            Where it sits in its document, for error messages (default ``_path``).

        Returns
        -------
        Schema
            An instance of the class.

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        path = cls._path if path is None else path
        d = cls._readers.obj(doc, path)
        if cls._closed is not None:
            keys = {f.metadata["key"] or f.name for f in dataclasses.fields(cls)
                    if "read" in f.metadata}
            extra = sorted(str(k) for k in d if k not in keys)
            if extra:
                raise SchemaError(join(path, extra[0]), cls._closed)
        values: dict[str, Any] = {}
        absent = set()
        for f in dataclasses.fields(cls):
            m = f.metadata
            if "read" not in m:
                continue
            key = m["key"] or f.name
            if m["inline"]:
                value = m["read"](d, path)
            elif m["optional"]:
                value = opt(d, key, path, m["read"])
                if key not in d:
                    absent.add(f.name)
                    if f.default is not dataclasses.MISSING:
                        value = f.default  # an absent key reads as the declared default
            else:
                value = req(d, key, path, m["read"])
            if f.init:
                values[f.name] = value
        obj = cls(**values)
        # Remembered so that ``to_json`` writes the document back as it was read: a default
        # filled in for an absent key is not written (not a field: equality ignores it).
        object.__setattr__(obj, "_absent", frozenset(absent))
        return obj

    def to_json(self) -> dict[str, Any]:
        """Return the dict as written: every field in declaration order.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            m = f.metadata
            if "read" not in m:
                continue
            value = getattr(self, f.name)
            if m["inline"]:
                out.update(value.to_json())
            elif m["optional"] and f.name in getattr(self, "_absent", ()) and value == f.default:
                continue
            elif not (m["optional"] and value is None):
                out[m["key"] or f.name] = _write(value)
        return out
