"""YAML the user gives, read under limits before anything else looks at it.

A parameter file (and a pin manifest it names, ``runtime.manifest``) is hostile input until
validated, and what reads it first decides what it can cost. Unbounded, a 9-level alias
bomb grew past 4 GiB inside the schema validator's error messages (each holds the ``repr``
of its instance), 10^5 nested brackets crashed the composer with a RecursionError, and a
50 MB ``description`` was copied into every notebook and report of a 1.1 GB run. So the
file is refused, in one line and before any expansion, when it is larger than
:data:`MAX_FILE_BYTES`, uses a YAML alias, nests deeper than :data:`MAX_DEPTH` or holds
more than :data:`MAX_NODES` values; once read, no string may exceed
:data:`MAX_STRING_BYTES` (:func:`check_tree`, which also bounds trees that come from
elsewhere, a notebook's injected parameters).

The limits are far above what these files need: the shipped parameter files are 0.8 to
3 KB, at most 4 levels deep (``model.parts[0].subdir``), about 100 values, their longest
string the 310-byte ``description`` of ``parameters/base-multilingual.yaml``; the packaged
pin manifest is 2 KB, 4 levels deep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent

from verifylib.errors import ParametersInvalid

__all__ = ["MAX_FILE_BYTES", "MAX_STRING_BYTES", "MAX_DEPTH", "MAX_NODES", "read",
           "check_tree", "dotted", "shorten"]

PARAMETER_FILE = "parameter file"
"""What the messages call the file unless told otherwise."""

MAX_FILE_BYTES = 1 << 20
"""1 MiB: over 300 times the largest shipped file, read whole (and parsed by PyYAML's pure
Python scanner) in well under a second."""

MAX_STRING_BYTES = 16 << 10
"""16 KiB of UTF-8 per string (a key or a value). Every string is copied into ``run.json``,
each of the six executed notebooks and both reports; the longest legitimate ones are a
fixture's reference text (a clip is at most 30 s: a few hundred bytes) and a path (4 KiB
at most on Linux, 1 KiB on macOS)."""

MAX_DEPTH = 32
"""Nested mappings and lists, the top level counting 1: eight times the deepest key of the
schema, and far below the Python recursion limit the composer, both validators and
``copy.deepcopy`` recurse into."""

MAX_NODES = 10_000
"""Keys, values and items together (the shipped files hold about 100): about ten per
fixture, so some thousand fixtures. PyYAML's pure Python composer takes about a second
for 20,000 nodes on a loaded 2-core machine, before the schema validators walk them."""

_SHOWN = 80
"""Characters of a value or key echoed in a message before it is cut."""


def shorten(text: object, limit: int = _SHOWN) -> str:
    """Return ``str(text)`` cut to ``limit`` characters, marked when cut.

    Parameters
    ----------
    text : object
        What a message would show.
    limit : int
        Characters kept.

    Returns
    -------
    str
        The text, or its first ``limit`` characters followed by ``…`` and the full length.
    """
    s = str(text)
    return s if len(s) <= limit else f"{s[:limit]}… ({len(s)} characters)"


def dotted(path: Sequence[Any]) -> str:
    """Spell a key path as the messages do: ``fixtures[0].path``.

    Parameters
    ----------
    path : sequence
        Mapping keys (shown cut to a few dozen characters) and list indices.

    Returns
    -------
    str
        The dotted key, ``<top level>`` for an empty path.
    """
    parts: list[str] = []
    for p in path:
        parts.append(f"[{p}]" if isinstance(p, int) else (("." if parts else "") + shorten(p, 40)))
    return "".join(parts) or "<top level>"


def _where(mark: Any) -> str:
    return "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}: "


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing aliases, deep nesting and too many nodes as it composes.

    The checks sit in the composer, which sees each node before the next one is scanned: a
    refusal comes at the first node past a limit, before any expansion or deep recursion.
    """

    def __init__(self, stream: str, origin: str, what: str):
        super().__init__(stream)
        self.origin = origin
        self.what = what
        self.depth = 0
        self.nodes = 0

    def _refuse(self, mark: Any, reason: str) -> ParametersInvalid:
        return ParametersInvalid(f"{self.origin}: {_where(mark)}{reason}")

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            # An alias is a reference, copied wherever the tree is walked: nine levels of
            # ten make 10^9 strings. A parameter file has no use for one.
            raise self._refuse(event.start_mark, f"YAML alias *{shorten(event.anchor, 40)} "
                               f"refused: write the value out (a {self.what} takes no "
                               "anchors' aliases or merge keys)")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self._refuse(event.start_mark, f"more than {MAX_NODES} keys and values "
                               f"(the limit of a {self.what})")
        nested = isinstance(event, (MappingStartEvent, SequenceStartEvent))
        if nested and self.depth >= MAX_DEPTH:
            raise self._refuse(event.start_mark, f"nested deeper than {MAX_DEPTH} levels "
                               f"(the limit of a {self.what})")
        self.depth += nested
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= nested

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except ParametersInvalid:
            raise
        except (ValueError, OverflowError) as exc:
            # A scalar the safe constructor cannot turn into a value: an integer of more
            # digits than Python converts (4300), an impossible date.
            raise self._refuse(node.start_mark, f"a value cannot be read: "
                               f"{shorten(exc, 120)}") from None


def read(path: Path, what: str = PARAMETER_FILE) -> Any:
    """Read a YAML file the user gives under the limits of this module.

    Parameters
    ----------
    path : Path
        The file.
    what : str
        What the messages call it (``parameter file``, ``manifest``).

    Returns
    -------
    Any
        The parsed document (its validation comes next, :func:`check_tree` first).

    Raises
    ------
    ParametersInvalid
        In one line naming the file and, for a YAML-level refusal, the line and column:
        a file unreadable, too large, not UTF-8, not YAML, with an alias, nested too deep
        or too big.
    """
    origin = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ParametersInvalid(f"{origin}: {size} bytes, above the limit of "
                                    f"{MAX_FILE_BYTES} for a {what}")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ParametersInvalid(f"{origin}: cannot read {what}: "
                                f"{exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:  # it grew after the stat
        raise ParametersInvalid(f"{origin}: above the limit of {MAX_FILE_BYTES} bytes for a "
                                f"{what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParametersInvalid(f"{origin}: not UTF-8 text") from None
    loader = _BoundedLoader(text, origin, what)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        detail = "; ".join(shorten(t, 120) for t in (exc.context, exc.problem) if t)
        raise ParametersInvalid(f"{origin}: not valid YAML: "
                                f"{_where(exc.problem_mark or exc.context_mark)}{detail}"
                                ) from None
    except yaml.YAMLError as exc:
        raise ParametersInvalid(f"{origin}: not valid YAML: "
                                f"{shorten(' '.join(str(exc).split()), 160)}") from None
    finally:
        loader.dispose()


def check_tree(data: Any, origin: str, what: str = PARAMETER_FILE) -> None:
    """Refuse a parameter tree past the limits, whatever it was read from.

    Walked without recursion, so a tree deeper than the limit is refused rather than
    crashing the walk; shared sub-trees (a YAML alias, a Python object used twice) are
    counted each time they are reached, as every later reader would reach them.

    Parameters
    ----------
    data : Any
        The parsed parameters.
    origin : str
        The file (or other origin) the messages name.
    what : str
        What the messages call it.

    Raises
    ------
    ParametersInvalid
        Naming ``origin`` and the key of the first string above :data:`MAX_STRING_BYTES`,
        or where the tree passes :data:`MAX_DEPTH` or :data:`MAX_NODES`.
    """
    too_many = ParametersInvalid(f"{origin}: more than {MAX_NODES} keys and values (the "
                                 f"limit of a {what})")
    stack: list[tuple[Any, tuple, int]] = [(data, (), 1)]
    nodes = 0
    while stack:
        value, path, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise too_many
        if isinstance(value, str):
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_STRING_BYTES:
                raise ParametersInvalid(f"{origin}: key {dotted(path)}: a string of {size} "
                                        f"bytes, above the limit of {MAX_STRING_BYTES}")
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise ParametersInvalid(f"{origin}: key {dotted(path)}: nested deeper than "
                                    f"{MAX_DEPTH} levels (the limit of a {what})")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        children = []
        for key, child in items:
            if isinstance(value, dict):
                nodes += 1
                size = len(key.encode("utf-8", "surrogatepass")) if isinstance(key, str) else 0
                if size > MAX_STRING_BYTES:
                    raise ParametersInvalid(f"{origin}: key {dotted(path + (key,))}: a key of "
                                            f"{size} bytes, above the limit of "
                                            f"{MAX_STRING_BYTES}")
            children.append((child, path + (key,), depth + 1))
            if nodes + len(stack) + len(children) > MAX_NODES:
                raise too_many
        stack.extend(reversed(children))
