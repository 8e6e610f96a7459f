"""Small tables for the Explore cells: a result shown as an HTML table, not a Python repr.

Why hand-written and not pandas: the Explore cells show a few mappings and lists of tuples
(gate -> files, label -> SNR, clip -> WER); rendering them is one template, while pandas
would add a large dependency to every install for that alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Table:
    """Rows under named columns; an HTML table in a notebook, aligned text elsewhere.

    Attributes
    ----------
    columns : tuple of str
    rows : tuple of tuple of str
        Each value already formatted (floats to 6 significant digits, sequences joined).
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def _repr_html_(self) -> str:
        from verifylib.views import render

        return render("table.html.j2", columns=self.columns, rows=self.rows)

    def __repr__(self) -> str:
        widths = [max([len(c)] + [len(r[i]) for r in self.rows])
                  for i, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in self.rows]
        return "\n".join(line.rstrip() for line in lines)


def table(data: Mapping[Any, Any] | Iterable[Sequence[Any]] | None,
          columns: Sequence[str] = ("key", "value")) -> Table | None:
    """Make a table of a mapping (one row per key) or of rows (tuples).

    Parameters
    ----------
    data : mapping, iterable of sequences, or None
        What an Explore cell would otherwise print as a repr; None gives None (a gate that
        did not run leaves its variables None).
    columns : sequence of str
        Column names: two for a mapping, one per element for rows.

    Returns
    -------
    Table or None
    """
    if data is None:
        return None
    if isinstance(data, Mapping):
        rows = [(_cell(k), _cell(v)) for k, v in data.items()]
    else:
        rows = [tuple(_cell(v) for v in r) for r in data]
    return Table(tuple(columns), tuple(tuple(r) for r in rows))
