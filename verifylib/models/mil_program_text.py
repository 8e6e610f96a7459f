"""A compiled model's ``model.mil`` read whole and strictly: every statement and literal.

:mod:`verifylib.models.mil_text` reads only the types the encoder card needs, and forgives
what it does not know. Executing a compiled program needs everything, exactly: each
operation's arguments (value names, inline literals, tuples of them), its attributes,
every constant's value (floats as coremlc writes them, in C99 hexadecimal notation such as
``0x1.5798eep-27``) and every reference into the weight file
(``BLOBFILE(path = …, offset = …)``). So this reader parses the whole grammar coremlc
writes (docs/facts.md, "The compiled model's model.mil") and refuses anything else with the
line and column where it stopped: a program it cannot read is never guessed at.

The grammar, as seen in real coremlc outputs (both literal spellings: ``tensor<string, []>("x")``
up to iOS 17, ``string("x")`` from iOS 18)::

    program(1.0)
    [buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"k", "v"}, ...})]
    {
        func main<ios16>(tensor<fp16, [1, 4]> a) {
                tensor<fp16, []> var_3 = const()[name = tensor<string, []>("op_3"),
                                                 val = tensor<fp16, []>(0x1p+1)];
                tensor<fp16, [1, 4]> y = mul(x = a, y = var_3)[name = tensor<string, []>("op_4")];
            } -> (y);
    }

(coremlc writes each statement on one line; the ``val`` is broken here for width.)

Written by hand: no package on PyPI parses MIL text, and coremltools reads it only through
the Core ML framework on macOS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Union

from verifylib.models.mil_text import MilTextError

__all__ = ["Arg", "BlobRef", "Literal", "MilType", "Statement", "TextFunction", "TextProgram",
           "blob_refs", "read_program_text"]

SCALAR_WORDS = frozenset({"fp16", "fp32", "fp64", "bf16", "bool", "string", "int4", "int8",
                          "int16", "int32", "int64", "uint1", "uint2", "uint3", "uint4", "uint6",
                          "uint8", "uint16", "uint32", "uint64"})
"""The element types MIL text spells (coremltools' ``builtin_to_string`` names)."""


@dataclass(frozen=True)
class MilType:
    """A MIL type as written: a tensor, a scalar, or another (dict, tuple, list) type.

    Attributes
    ----------
    kind : str
        ``tensor``, ``scalar`` or ``other``.
    dtype : str
        The element type word (``fp16``, ``int32``, ``string`` ...); for ``other``, the
        type's name (``dict``).
    shape : tuple
        Dimensions (ints; ``?`` or a name for a symbolic one); ``()`` for a scalar.
    """

    kind: str
    dtype: str
    shape: tuple = ()


@dataclass(frozen=True)
class BlobRef:
    """A reference into a weight file: ``BLOBFILE(path = "@model_path/…", offset = N)``.

    ``offset`` is that of the blob's metadata record, as in a package's protobuf
    (``blobFileValue.offset``).
    """

    path: str
    offset: int


@dataclass(frozen=True)
class Literal:
    """A typed literal: ``tensor<fp16, [2]>([0x1p+0, -0x1p-1])``, ``bool(true)``, a blob.

    Attributes
    ----------
    type : MilType
        The declared type.
    value : Any
        A :class:`BlobRef`, or the content: a scalar (int, float, bool, str), nested lists
        of them, or for a dict a list of ``[key, value]`` pairs; None when empty (``()``).
    """

    type: MilType
    value: Any


Arg = Union[str, Literal, tuple]
"""An operation argument: a value name, an inline literal, or a tuple of either."""


@dataclass(frozen=True)
class Statement:
    """One operation: ``outs = op(args)[attrs];``.

    Attributes
    ----------
    op : str
        The operation type.
    outputs : tuple of (str, MilType)
        The values it defines, in order.
    args : dict
        Argument name -> :data:`Arg`.
    attrs : dict
        Attribute name -> :class:`Literal` (``name`` included).
    line : int
        Line of the statement in ``model.mil`` (for messages).
    """

    op: str
    outputs: tuple[tuple[str, MilType], ...]
    args: dict[str, Arg]
    attrs: dict[str, Literal]
    line: int


@dataclass(frozen=True)
class TextFunction:
    """A function: its opset, inputs, statements in order and returned values."""

    name: str
    opset: str
    inputs: tuple[tuple[str, MilType], ...]
    statements: tuple[Statement, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Literal] = field(default_factory=dict)


@dataclass(frozen=True)
class TextProgram:
    """A whole ``model.mil``: the program version, its attributes and its functions.

    Attributes
    ----------
    version : str
        ``1.0``, ``1.3`` ... from ``program(…)``.
    build_info : dict
        The ``buildInfo`` attribute as a str -> str dict (``coremlc-version`` ...), empty
        when absent.
    functions : dict
        Function name -> :class:`TextFunction`.
    """

    version: str
    build_info: dict[str, str]
    functions: dict[str, TextFunction]


_TOKENS = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<hex>[-+]?0[xX][0-9a-fA-F]*(?:\.[0-9a-fA-F]*)?[pP][-+]?\d+)
  | (?P<number>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<word>[-+]?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<arrow>->)
  | (?P<punct>[()\[\]{}<>,=;?])
""", re.VERBOSE)

_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "'": "'"}


@dataclass
class _Tok:
    kind: str
    text: str
    line: int
    col: int


def _tokens(text: str) -> list[_Tok]:
    out, pos, line, line_start = [], 0, 1, 0
    while pos < len(text):
        m = _TOKENS.match(text, pos)
        if m is None:
            raise MilTextError(f"model.mil line {line}, column {pos - line_start + 1}: "
                               f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind != "ws":
            out.append(_Tok(kind, m.group(), line, pos - line_start + 1))
        newlines = m.group().count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + m.group().rfind("\n") + 1
        pos = m.end()
    out.append(_Tok("end", "", line, pos - line_start + 1))
    return out


def _unquote(s: str) -> str:
    out, i = [], 1
    while i < len(s) - 1:
        c = s[i]
        if c == "\\":
            nxt = s[i + 1]
            if nxt not in _ESCAPES:
                raise MilTextError(f"unknown escape \\{nxt} in {s[:40]!r}")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Parser:
    """Recursive descent over the tokens; every method consumes what it names."""

    def __init__(self, text: str):
        self.toks = _tokens(text)
        self.i = 0

    # -- primitives
    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def fail(self, what: str) -> MilTextError:
        t = self.peek()
        got = repr(t.text) if t.kind != "end" else "the end of the text"
        return MilTextError(f"model.mil line {t.line}, column {t.col}: expected {what}, "
                            f"found {got}")

    def take(self, text: str) -> _Tok:
        t = self.peek()
        if t.text != text or t.kind == "string":
            raise self.fail(repr(text))
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        t = self.peek()
        if t.text == text and t.kind != "string":
            self.i += 1
            return True
        return False

    def word(self, what: str = "a name") -> str:
        t = self.peek()
        if t.kind != "word" or t.text[0] in "+-":
            raise self.fail(what)
        self.i += 1
        return t.text

    # -- types
    def type_(self) -> MilType:
        name = self.word("a type")
        if name == "tensor":
            self.take("<")
            dtype = self.word("an element type")
            if dtype not in SCALAR_WORDS:
                raise MilTextError(f"model.mil line {self.peek().line}: unknown element "
                                   f"type {dtype!r}")
            self.take(",")
            shape = self.dims()
            self.take(">")
            return MilType("tensor", dtype, shape)
        if name in SCALAR_WORDS:
            return MilType("scalar", name, ())
        if self.accept("<"):  # dict<K, V>, tuple<...>, list<...>: read, kept opaque
            self.type_arg()
            while self.accept(","):
                self.type_arg()
            self.take(">")
        return MilType("other", name, ())

    def type_arg(self) -> None:
        if self.peek().text == "[":
            self.dims()
        elif self.peek().kind == "number":
            self.i += 1
        else:
            self.type_()

    def dims(self) -> tuple:
        self.take("[")
        dims: list[Any] = []
        while not self.accept("]"):
            if dims:
                self.take(",")
            t = self.peek()
            if t.kind == "number" and t.text.isdigit():
                dims.append(int(t.text))
            elif t.text == "?" or t.kind == "word":
                dims.append(t.text)
            else:
                raise self.fail("a dimension")
            self.i += 1
        return tuple(dims)

    # -- literals
    def literal(self) -> Literal:
        typ = self.type_()
        self.take("(")
        if self.peek().text == "BLOBFILE":
            value: Any = self.blobfile()
        elif self.peek().text == ")":
            value = None
        else:
            value = self.content()
        self.take(")")
        return Literal(typ, value)

    def blobfile(self) -> BlobRef:
        self.take("BLOBFILE")
        self.take("(")
        kw: dict[str, Literal] = {}
        while not self.accept(")"):
            if kw:
                self.take(",")
            key = self.word("path or offset")
            self.take("=")
            kw[key] = self.literal()
        if set(kw) != {"path", "offset"}:
            raise self.fail("BLOBFILE(path = …, offset = …)")
        path, offset = kw["path"].value, kw["offset"].value
        if not isinstance(path, str) or not isinstance(offset, int) or \
                isinstance(offset, bool) or offset < 0:
            raise self.fail("a string path and a non-negative integer offset")
        return BlobRef(path, offset)

    def content(self) -> Any:
        first = self.item()
        if self.peek().text != ",":
            return first
        items = [first]
        while self.accept(","):
            items.append(self.item())
        return items

    def item(self) -> Any:
        t = self.peek()
        if t.text in ("[", "{") and t.kind == "punct":
            close = "]" if t.text == "[" else "}"
            self.i += 1
            items: list[Any] = []
            while not self.accept(close):
                if items:
                    self.take(",")
                items.append(self.item())
            return items
        self.i += 1
        if t.kind == "string":
            return _unquote(t.text)
        if t.kind == "hex":
            return float.fromhex(t.text)
        if t.kind == "number":
            is_int = re.fullmatch(r"[-+]?\d+", t.text) is not None
            return int(t.text) if is_int else float(t.text)
        if t.kind == "word":
            low = t.text.lower()
            if low in ("true", "false"):
                return low == "true"
            if low.lstrip("+-") in ("inf", "infinity", "nan"):
                return float(low)
        self.i -= 1
        raise self.fail("a value")

    def attrs(self) -> dict[str, Literal]:
        out: dict[str, Literal] = {}
        if not self.accept("["):
            return out
        while not self.accept("]"):
            if out:
                self.take(",")
            key = self.word("an attribute name")
            self.take("=")
            if key in out:
                raise self.fail(f"one {key!r} attribute")
            out[key] = self.literal()
        return out

    # -- statements
    def arg(self) -> Arg:
        t = self.peek()
        if t.text == "(" and t.kind == "punct":
            self.i += 1
            items: list[Arg] = []
            while not self.accept(")"):
                if items:
                    self.take(",")
                items.append(self.arg())
            return tuple(items)
        if t.kind == "word" and self.peek(1).text in ("(", "<") and (
                t.text in SCALAR_WORDS or t.text == "tensor"):
            return self.literal()
        return self.word("a value name or a literal")

    def decl(self) -> tuple[str, MilType]:
        typ = self.type_()
        return self.word("a value name"), typ

    def statement(self) -> Statement:
        line = self.peek().line
        outs: list[tuple[str, MilType]] = []
        wrapped = self.accept("(")
        outs.append(self.decl())
        while self.accept(","):
            outs.append(self.decl())
        if wrapped:
            self.take(")")
        self.take("=")
        op = self.word("an operation")
        self.take("(")
        args: dict[str, Arg] = {}
        while not self.accept(")"):
            if args:
                self.take(",")
            key = self.word("an argument name")
            self.take("=")
            if key in args:
                raise self.fail(f"one {key!r} argument")
            args[key] = self.arg()
        attrs = self.attrs()
        if self.peek().text == "{":
            raise MilTextError(f"model.mil line {line}: operation {op} holds a nested block "
                               "(control flow), which is not read")
        self.take(";")
        return Statement(op, tuple(outs), args, attrs, line)

    def function(self) -> TextFunction:
        self.take("func")
        name = self.word("a function name")
        self.take("<")
        opset = self.word("an opset")
        self.take(">")
        self.take("(")
        inputs: list[tuple[str, MilType]] = []
        while not self.accept(")"):
            if inputs:
                self.take(",")
            inputs.append(self.decl())
        fattrs = self.attrs()
        self.take("{")
        stmts = []
        while not self.accept("}"):
            stmts.append(self.statement())
        self.take("->")
        self.take("(")
        outs: list[str] = []
        while not self.accept(")"):
            if outs:
                self.take(",")
            outs.append(self.word("a returned value"))
        self.take(";")
        return TextFunction(name, opset, tuple(inputs), tuple(stmts), tuple(outs), fattrs)

    def program(self) -> TextProgram:
        self.take("program")
        self.take("(")
        t = self.peek()
        if t.kind != "number":
            raise self.fail("a program version")
        self.i += 1
        self.take(")")
        pattrs = self.attrs()
        self.take("{")
        functions: dict[str, TextFunction] = {}
        while not self.accept("}"):
            fn = self.function()
            if fn.name in functions:
                raise MilTextError(f"model.mil: function {fn.name!r} defined twice")
            functions[fn.name] = fn
        if self.peek().kind != "end":
            raise self.fail("the end of the text")
        return TextProgram(t.text, _build_info(pattrs), functions)


def _build_info(attrs: dict[str, Literal]) -> dict[str, str]:
    """``buildInfo``'s pairs as a dict (``{{"k", "v"}, …}``); empty when absent."""
    lit = attrs.get("buildInfo")
    if lit is None or lit.value is None or lit.value == []:
        return {}
    pairs = lit.value if isinstance(lit.value, list) and lit.value and \
        isinstance(lit.value[0], list) else [lit.value]
    out = {}
    for p in pairs:
        if not (isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)):
            raise MilTextError(f"model.mil: buildInfo entry {p!r} is not a pair of strings")
        out[p[0]] = p[1]
    return out


def read_program_text(text: str) -> TextProgram:
    """Parse a whole ``model.mil``.

    Parameters
    ----------
    text : str
        The MIL text, as coremlc writes it.

    Returns
    -------
    TextProgram
        The program version, its build info and every function, statement by statement.

    Raises
    ------
    verifylib.models.mil_text.MilTextError
        Naming the line and column where the text departs from the grammar (a nested
        block, an unknown element type, a malformed literal, trailing text ...).
    """
    return _Parser(text).program()


def blob_refs(text: str) -> list[BlobRef]:
    """Every weight reference of a ``model.mil``, read by this grammar's ``BLOBFILE`` rule.

    Only the text's tokens and each ``BLOBFILE(…)`` are read, so the references of a
    program the whole grammar would refuse are found as well (parameter validation holds
    them inside the folder whatever the executor makes of the rest).

    Parameters
    ----------
    text : str
        The MIL text.

    Returns
    -------
    list of BlobRef
        In text order.

    Raises
    ------
    verifylib.models.mil_text.MilTextError
        A character no MIL token holds, or a ``BLOBFILE`` that is not
        ``BLOBFILE(path = string, offset = non-negative integer)``.
    """
    parser = _Parser(text)
    refs = []
    for i, tok in enumerate(parser.toks):
        if tok.kind == "word" and tok.text == "BLOBFILE":
            parser.i = i
            refs.append(parser.blobfile())
    return refs
