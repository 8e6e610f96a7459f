"""Schemas of the stage 02 (export) evidence documents the export judges read.

One frozen dataclass per document: :class:`ModelIntake` (``model``) and
:class:`GgmlModelEvidence` (``ggml``) of ``export.ggml_model``, :class:`ContractEvidence`
(``contract``, ``export.contract``, with :class:`ModelRef`, :class:`ExportVariant`,
:class:`Conversion`, :class:`ConversionFacts` and :class:`ModelCopy`) and
:class:`CompileEvidence` (``compile``, ``export.compile``, with :class:`CompiledVariant`
and :class:`CoremlcRecord`).

As in :mod:`verifylib.evidence.schemas.build`: ``from_json`` is strict and fails closed
with a :class:`~verifylib.evidence.schemas.fields.SchemaError` naming the field path,
``to_json`` gives back exactly the dict the stage writes. Free-form records the judges
re-check with their own pure functions (a package ``description`` from
:func:`verifylib.models.coreml_export.describe_mlpackage`, the stored ``contract``, the
conversion ``options``, the written ``hparams``) are kept as JSON objects.
"""

from __future__ import annotations

from typing import Any

from verifylib.evidence.schemas.build import RunRecord
from verifylib.evidence.schemas.fields import NAMED as _n
from verifylib.evidence.schemas.fields import NamedSchema, field, req

__all__ = [
    "ModelIntake", "GgmlModelEvidence", "ModelRef", "Conversion",
    "ExportVariant", "ConversionFacts", "ModelCopy", "ContractEvidence", "CoremlcRecord",
    "CompiledVariant", "CompileEvidence",
]


# ----------------------------------------------------------------------------- export.ggml_model

class ModelIntake(NamedSchema):
    """The ``model`` document: the model as taken in (``obtain_model``).

    Attributes
    ----------
    kind : str
        ``hf-dir``, ``hf-hub``, ``ct2-pypi``, ...
    source_digest : str
        Digest of the Hugging Face folder.
    origin : dict
        Where it came from.
    hf_dir : str
        The folder.
    language : str or None
        The model's language, when it has one.
    cached : bool
        Reused from the cache.
    """

    kind: str = field(_n.string)
    source_digest: str = field(_n.string)
    origin: dict[str, Any] = field(_n.mapping)
    hf_dir: str = field(_n.string)
    language: str | None = field(_n.string_or_null)
    cached: bool = field(_n.boolean)


class GgmlModelEvidence(NamedSchema):
    """The ``ggml`` document: the written ``ggml-model.bin`` and its load probe.

    Attributes
    ----------
    path : str
        Run-relative path of the file.
    model_arg : str
        The ``-m`` argument the probe used.
    sha256 : str
        The file's digest.
    bytes : int
        Its length.
    hparams : dict
        The hyper-parameters written.
    n_tensors : int
        Tensors written.
    lossless : bool
        Whether storing the weights changed none.
    binary_sha256 : str
        The ``build.ggml`` binary that loaded it.
    probe : RunRecord
        The load run.
    """

    path: str = field(_n.string)
    model_arg: str = field(_n.string)
    sha256: str = field(_n.string)
    bytes: int = field(_n.integer)
    hparams: dict[str, Any] = field(_n.mapping)
    n_tensors: int = field(_n.integer)
    lossless: bool = field(_n.boolean)
    binary_sha256: str = field(_n.string)
    probe: RunRecord = field(RunRecord.from_json)


# ----------------------------------------------------------------------------- export.contract

class ModelRef(NamedSchema):
    """The ``model`` entry of the contract document (``artifacts.model_source``).

    Attributes
    ----------
    hf_dir : str
        The Hugging Face folder.
    source_digest : str
        Its digest.
    origin : str
        The ``from`` key: which record the folder came from.
    """

    _path = "model"

    hf_dir: str = field(_n.string)
    source_digest: str = field(_n.string)
    origin: str = field(_n.string, key="from")


class Conversion(NamedSchema):
    """How one variant was converted.

    Attributes
    ----------
    options : dict
        The ``ct.convert`` options.
    seconds : float
        Conversion time.
    """

    _path = "conversion"

    options: dict[str, Any] = field(_n.mapping)
    seconds: float = field(_n.number)


class ExportVariant(NamedSchema):
    """One exported variant (``fp32`` or ``fp16``) of the contract document.

    Attributes
    ----------
    precision : str
        ``fp32`` or ``fp16``.
    path : str
        Run-relative path of its ``.mlpackage``.
    description : dict
        What the saved package declares (``describe_mlpackage``).
    problems : tuple of str
        How it breaks the contract (empty when it holds).
    placed : bool
        Whether it was renamed into place.
    tree_digest : str or None
        The placed package's tree digest.
    conversion : Conversion
        How it was converted.
    """

    precision: str = field(_n.string)
    path: str = field(_n.string)
    description: dict[str, Any] = field(_n.mapping)
    problems: tuple[str, ...] = field(_n.strings)
    placed: bool = field(_n.boolean)
    tree_digest: str | None = field(_n.string_or_null)
    conversion: Conversion = field(Conversion.from_json)


class ConversionFacts(NamedSchema):
    """The ``build`` entry: versions the conversion depends on (``build_facts``).

    Attributes
    ----------
    coremltools, torch, transformers, numpy : str
        Versions (``"absent"`` for a missing package).
    torch_max_tested_by_coremltools : str or None
        The newest torch coremltools was tested with (None: could not be queried).
    torch_above_tested : bool or None
        Whether torch is above it.
    torch_version_warning : tuple of str
        coremltools' warning lines (or a note that it could not be queried).
    trace_seconds : float
        Time to trace the encoder.
    """

    _path = "build"

    coremltools: str = field(_n.string)
    torch: str = field(_n.string)
    transformers: str = field(_n.string)
    numpy: str = field(_n.string)
    torch_max_tested_by_coremltools: str | None = field(_n.string_or_null)
    torch_above_tested: bool | None = field(_n.boolean_or_null)
    torch_version_warning: tuple[str, ...] = field(_n.strings)
    trace_seconds: float = field(_n.number)


class ModelCopy(NamedSchema):
    """A copy or hard link of ``ggml-model.bin`` beside a variant.

    Attributes
    ----------
    source : str
        The ``from`` key: the run-relative file it copies.
    how : str
        ``hard link`` or ``copy``.
    sha256 : str
        The copy's digest.
    """

    source: str = field(_n.string, key="from")
    how: str = field(_n.string)
    sha256: str = field(_n.string)


class ContractEvidence(NamedSchema):
    """The ``contract`` document of ``export.contract``.

    Attributes
    ----------
    model : ModelRef
        The model folder the encoder came from.
    config : dict
        The five model values the contract is derived from (``EncoderContract.values``).
    contract : dict
        The contract as stored (``EncoderContract.as_dict``).
    variants : tuple of ExportVariant
        The exported variants, in export order.
    build : ConversionFacts
        Versions and the torch-above-tested warning.
    model_copies : dict of str to ModelCopy
        Run-relative path -> copy of ``ggml-model.bin``.
    """

    model: ModelRef = field(ModelRef)
    config: dict[str, Any] = field(_n.mapping)
    contract: dict[str, Any] = field(_n.mapping)
    variants: tuple[ExportVariant, ...] = field(_n.array_of(ExportVariant.from_json))
    build: ConversionFacts = field(ConversionFacts)
    model_copies: dict[str, ModelCopy] = field(
        lambda v, p: _n.map_of(v, p, ModelCopy.from_json))

    @classmethod
    def from_json(cls, doc: Any, path: str | None = None) -> "ContractEvidence":
        """Read the ``contract`` document; ``model_copies`` is checked to be an object first.

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        req(_n.obj(doc, ""), "model_copies", "", _n.mapping)
        return super().from_json(doc)


# ----------------------------------------------------------------------------- export.compile

class CoremlcRecord(NamedSchema):
    """The ``xcrun coremlc compile`` run of one variant.

    Attributes
    ----------
    argv : tuple of str
        The command line.
    returncode : int or None
        Exit status.
    signal : str or None
        Terminating signal.
    timed_out : bool
        Whether it timed out.
    wall_s : float
        Wall time.
    stderr_sha256 : str or None
        Digest of the stored stderr (None: key absent, as in records made before streams
        were bound; the judge then refuses a stored stderr).
    """

    _path = "coremlc"

    argv: tuple[str, ...] = field(_n.strings)
    returncode: int | None = field(_n.integer_or_null)
    signal: str | None = field(_n.string_or_null)
    timed_out: bool = field(_n.boolean)
    wall_s: float = field(_n.number)
    stderr_sha256: str | None = field(_n.string, optional=True, default=None)


class CompiledVariant(NamedSchema):
    """One compiled ``.mlmodelc``.

    Attributes
    ----------
    precision : str
        ``fp32`` or ``fp16``.
    package : str
        Run-relative path of the compiled ``.mlpackage``.
    package_tree_digest : str or None
        Its tree digest.
    model_arg : str
        The ``-m`` string the runtime will be given.
    derived_path : str
        What ``coreml_encoder_path`` derived from it at run time (shown only).
    placed_path : str
        Where the ``.mlmodelc`` was placed.
    tree_digest : str or None
        Its tree digest.
    coremlc : CoremlcRecord
        The compile run.
    """

    precision: str = field(_n.string)
    package: str = field(_n.string)
    package_tree_digest: str | None = field(_n.string_or_null)
    model_arg: str = field(_n.string)
    derived_path: str = field(_n.string)
    placed_path: str = field(_n.string)
    tree_digest: str | None = field(_n.string_or_null)
    coremlc: CoremlcRecord = field(CoremlcRecord.from_json)


class CompileEvidence(NamedSchema):
    """The ``compile`` document of ``export.compile``.

    Attributes
    ----------
    variants : tuple of CompiledVariant
        One entry per compiled package.
    coremlc : str or None
        The ``coremlc`` the host capability check found.
    """

    variants: tuple[CompiledVariant, ...] = field(_n.array_of(CompiledVariant.from_json))
    coremlc: str | None = field(_n.string_or_null)
