"""How a candidate encoder's intermediate value is read as the reference's tensor.

The Hugging Face reference holds every residual-stream value as ``(batch, frames,
channels)``. Converters lay the same numbers out otherwise: upstream whisper.cpp's
``--optimize-ane`` program computes every value between its 1x1 convs as ``(batch,
channels, 1, frames)``, and a channels-first program as ``(batch, channels, frames)``.
Every place that compares a candidate's intermediate with the reference (the per-layer
taps of stage 04, the pair measurement of ``export.pair``, the op-level drift attribution)
reads it through :func:`relayout_for`, so a layout is known in this one module.

A layout is never guessed: a candidate shape maps only when exactly the permutation of a
known layout gives the reference's shape. A shape no known layout maps is reported by the
caller as unmapped (with both shapes), never compared and never an error.

Why hand-written: the mapping is a fact about converters (which axes they move), not a
numeric operation any package provides; it works on numpy arrays and torch tensors alike
through their shared indexing and ``swapaxes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["Relayout", "LAYOUTS", "relayout_for", "unmapped_record"]


@dataclass(frozen=True)
class Relayout:
    """One known layout, and how a value in it is read as ``(batch, frames, channels)``.

    Attributes
    ----------
    name : str
        ``bsc`` (the reference's own order), ``bc1s`` (upstream's ANE layout), ``bcs``
        (channels first) or ``sc`` (no batch axis).
    description : str
        The layout in words, for the report.
    """

    name: str
    description: str
    _shape: Callable[[tuple[int, ...]], tuple[int, ...] | None]
    _read: Callable[[Any], Any]

    def shape_of(self, shape: Sequence[int]) -> tuple[int, ...] | None:
        """Return the ``(batch, frames, channels)`` shape a value of ``shape`` has here.

        Parameters
        ----------
        shape : sequence of int
            The candidate value's shape.

        Returns
        -------
        tuple of int or None
            None when a value of that shape cannot be in this layout.
        """
        return self._shape(tuple(int(d) for d in shape))

    def apply(self, value: Any) -> Any:
        """Read ``value`` (numpy array or torch tensor) as ``(batch, frames, channels)``.

        Parameters
        ----------
        value : numpy.ndarray or torch.Tensor
            A value of a shape :meth:`shape_of` accepts.

        Returns
        -------
        numpy.ndarray or torch.Tensor
            A view of the same numbers (no copy).
        """
        return self._read(value)


LAYOUTS: tuple[Relayout, ...] = (
    Relayout("bsc", "(batch, frames, channels), the reference's own order",
             lambda s: s if len(s) == 3 else None, lambda v: v),
    Relayout("bc1s", "(batch, channels, 1, frames), upstream's --optimize-ane layout",
             lambda s: (s[0], s[3], s[1]) if len(s) == 4 and s[2] == 1 else None,
             lambda v: v[:, :, 0, :].swapaxes(1, 2)),
    Relayout("bcs", "(batch, channels, frames), channels first",
             lambda s: (s[0], s[2], s[1]) if len(s) == 3 else None,
             lambda v: v.swapaxes(1, 2)),
    Relayout("sc", "(frames, channels), no batch axis",
             lambda s: (1, s[0], s[1]) if len(s) == 2 else None, lambda v: v[None]),
)
"""Every layout known, in the order they are tried: the reference's own order first, so a
value whose frames equal its channels is read as it is, never transposed."""


def relayout_for(shape: Sequence[int], reference_shape: Sequence[int]) -> Relayout | None:
    """Find the layout that reads a candidate value of ``shape`` as the reference's.

    Parameters
    ----------
    shape : sequence of int
        The candidate value's shape.
    reference_shape : sequence of int
        The reference value's shape: ``(batch, frames, channels)`` or ``(frames,
        channels)`` (then the batch must be 1).

    Returns
    -------
    Relayout or None
        The first layout of :data:`LAYOUTS` under which ``shape`` becomes
        ``reference_shape``; None when none does (the caller records the value as
        unmapped).

    Notes
    -----
    Apply the result, then drop the batch axis (``[0]``) when the reference has none.
    """
    want = tuple(int(d) for d in reference_shape)
    if len(want) == 2:
        want = (1, *want)
    if len(want) != 3:
        return None
    for layout in LAYOUTS:
        if layout.shape_of(shape) == want:
            return layout
    return None


def unmapped_record(label: str, value: str, shape: Sequence[int],
                    reference_shape: Sequence[int]) -> dict:
    """Describe, for the evidence, a candidate value no known layout maps.

    Parameters
    ----------
    label : str
        Where it sits (``block 2``).
    value : str
        The program's value name.
    shape, reference_shape : sequence of int
        The two shapes that did not meet.

    Returns
    -------
    dict
        ``{"label", "value", "shape", "reference_shape", "layouts_tried"}``.
    """
    return {"label": label, "value": value, "shape": [int(d) for d in shape],
            "reference_shape": [int(d) for d in reference_shape],
            "layouts_tried": [layout.name for layout in LAYOUTS]}
