"""Tiny ML programs for the tests, written with coremltools' MIL Builder and saved."""

from __future__ import annotations

from pathlib import Path


def save_program(folder: Path, build, shape: tuple, name: str) -> Path:
    """Save an fp32 ML program whose body is ``build(mb, x)`` on one input of ``shape``.

    Parameters
    ----------
    folder : Path
        Where ``<name>.mlpackage`` is written.
    build : callable
        ``(mb, x) -> output``, with ``mb`` coremltools' MIL Builder.
    shape : tuple of int
        The input's shape.
    name : str
        The package's stem.

    Returns
    -------
    Path
        The saved ``.mlpackage``.
    """
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)])
    def prog(x):
        return build(mb, x)

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                       skip_model_load=True)
    path = Path(folder) / f"{name}.mlpackage"
    model.save(str(path))
    return path
