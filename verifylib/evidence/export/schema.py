"""Schemas of the stage 02 (export) evidence documents the export judges read.

One frozen dataclass per document: :class:`ModelIntake` (``model``) and
:class:`GgmlModelEvidence` (``ggml``) of ``export.ggml_model``, :class:`ContractEvidence`
(``contract``, ``export.contract``, with :class:`ModelRef`, :class:`ExportVariant`,
:class:`Conversion`, :class:`ConversionFacts` and :class:`ModelCopy`) and
:class:`CompileEvidence` (``compile``, ``export.compile``, with :class:`CompiledVariant`
and :class:`CoremlcRecord`).

As in :mod:`verifylib.evidence.build.schema`: ``from_json`` is strict and fails closed
with a :class:`~verifylib.evidence.fields.SchemaError` naming the field path,
``to_json`` gives back exactly the dict the stage writes. Free-form records the judges
re-check with their own pure functions (a package ``description`` from
:func:`verifylib.models.coreml_contract.describe_mlpackage`, the stored ``contract``, the
conversion ``options``, the written ``hparams``) are kept as JSON objects.
"""

from __future__ import annotations

from typing import Any

from verifylib.evidence.fields import EXPECTED as _n
from verifylib.evidence.fields import Schema, field, req
from verifylib.evidence.run_record import RunRecord

__all__ = [
    "ModelIntake", "GgmlModelEvidence", "ModelRef", "Conversion",
    "ExportVariant", "ConversionFacts", "ModelCopy", "ContractEvidence", "CoremlcRecord",
    "CompiledVariant", "CompileEvidence", "PrebuiltEncoder", "EncoderArchive", "ArchiveFile",
    "PairInput", "PairFloor",
    "PairEvidence",
]


# ----------------------------------------------------------------------------- export.ggml_model

class ModelIntake(Schema):
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


class GgmlModelEvidence(Schema):
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
    ftype : str
        The file's tensor type (``f16`` for every file our writer makes; for a given file,
        what its header says: ``f32``, ``f16``, ``q5_0`` ...).
    given : str or None
        For model kind ``ggml``: the file the parameters named, placed here unchanged; None
        when the file was written from the model.
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
    ftype: str = field(_n.string, optional=True, default="f16")
    given: str | None = field(_n.string, optional=True, default=None)


# ----------------------------------------------------------------------------- export.contract

class ModelRef(Schema):
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


class Conversion(Schema):
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


class ExportVariant(Schema):
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
    conversion : Conversion or None
        How it was converted; None for an encoder audited as given.
    """

    precision: str = field(_n.string)
    path: str = field(_n.string)
    description: dict[str, Any] = field(_n.mapping)
    problems: tuple[str, ...] = field(_n.strings)
    placed: bool = field(_n.boolean)
    tree_digest: str | None = field(_n.string_or_null)
    conversion: Conversion | None = field(Conversion.from_json, optional=True, default=None)


class ConversionFacts(Schema):
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


class ModelCopy(Schema):
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


class ContractEvidence(Schema):
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
    prebuilt : PrebuiltEncoder or None
        For parameter ``encoder.path``: the encoder audited as given, and what it says about
        itself; None when the encoder was exported here.
    """

    model: ModelRef = field(ModelRef)
    config: dict[str, Any] = field(_n.mapping)
    contract: dict[str, Any] = field(_n.mapping)
    variants: tuple[ExportVariant, ...] = field(_n.array_of(ExportVariant.from_json))
    build: ConversionFacts = field(ConversionFacts)
    model_copies: dict[str, ModelCopy] = field(
        lambda v, p: _n.map_of(v, p, ModelCopy.from_json))
    prebuilt: "PrebuiltEncoder | None" = field(
        lambda v, p: PrebuiltEncoder.from_json(v, p), optional=True, default=None)

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


class ArchiveFile(Schema):
    """One regular file an encoder's zip listed, as its central directory declared it.

    Attributes
    ----------
    path : str
        Its path inside the ``.mlmodelc`` folder.
    bytes : int
        Its declared uncompressed size.
    crc32 : str
        Its declared CRC-32, eight lower-case hex digits.
    """

    path: str = field(_n.string)
    bytes: int = field(_n.integer)
    crc32: str = field(_n.string)


class EncoderArchive(Schema):
    """The ``prebuilt.archive`` entry: the ``….mlmodelc.zip`` the encoder was unpacked from.

    Attributes
    ----------
    sha256 : str
        SHA-256 of the zip file, hashed from the open file its members were read from.
    bytes : int
        The zip's size.
    top : str
        Its one top-level folder, ``<name>.mlmodelc``.
    files : tuple of ArchiveFile
        The regular files its central directory listed in that folder, sorted by path:
        ``verify`` holds the published folder against them (paths, sizes, CRC-32s).
    skipped : int
        Entries under ``__MACOSX/`` (Archive Utility's AppleDouble companions), checked
        and never unpacked.
    """

    _path = "prebuilt.archive"

    sha256: str = field(_n.string)
    bytes: int = field(_n.integer)
    top: str = field(_n.string)
    files: tuple[ArchiveFile, ...] = field(_n.array_of(ArchiveFile.from_json))
    skipped: int = field(_n.integer)


class PrebuiltEncoder(Schema):
    """The ``prebuilt`` entry: an encoder audited as given (parameter ``encoder.path``).

    Attributes
    ----------
    given : str
        The path the parameters named (a folder, or a ``….mlmodelc.zip``).
    format : str
        ``mlpackage`` or ``mlmodelc``.
    source_tree_digest : str
        Tree digest of the given folder, before it was copied (of a zip: of the folder
        unpacked from it).
    card : dict
        What the encoder says about itself (``EncoderCard.to_json``): converter, declared
        precision, weight compression, layout, IO contract.
    precision : str
        The declared compute precision the policies are chosen by (from the card).
    parity_policy : str
        The policy ``parity.program`` is judged under, chosen from the card and the model
        file's ftype before anything was measured.
    archive : EncoderArchive or None
        The zip the encoder was unpacked from; None for a folder (and in runs made before
        zips were accepted, which omit the key).
    """

    _path = "prebuilt"

    given: str = field(_n.string)
    format: str = field(_n.string)
    source_tree_digest: str = field(_n.string)
    card: dict[str, Any] = field(_n.mapping)
    precision: str = field(_n.string)
    parity_policy: str = field(_n.string)
    archive: EncoderArchive | None = field(
        lambda v, p: EncoderArchive.from_json(v, p), optional=True, default=None)


# ----------------------------------------------------------------------------- export.compile

class CoremlcRecord(Schema):
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


class CompiledVariant(Schema):
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
    coremlc : CoremlcRecord or None
        The compile run; None for a ``.mlmodelc`` audited as given (nothing compiled).
    """

    precision: str = field(_n.string)
    package: str = field(_n.string)
    package_tree_digest: str | None = field(_n.string_or_null)
    model_arg: str = field(_n.string)
    derived_path: str = field(_n.string)
    placed_path: str = field(_n.string)
    tree_digest: str | None = field(_n.string_or_null)
    coremlc: CoremlcRecord | None = field(CoremlcRecord.from_json, optional=True, default=None)


class CompileEvidence(Schema):
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


# ----------------------------------------------------------------------------- export.pair

class PairInput(Schema):
    """One log-mel through both encoders of ``export.pair``.

    Attributes
    ----------
    input : str
        ``fixture`` (the runtime tree's sample through the file's own mel filters) or
        ``random`` (seeded).
    logmel_sha256 : str
        Digest of the log-mel's float32 bytes.
    snr_db : float
        SNR of the candidate output against the rebuilt encoder's, float64, no floor.
    cosine : float
        Cosine similarity of the two outputs.
    max_abs_error : float
        Largest absolute difference.
    block_snr_db : tuple of float
        SNR of the residual stream after each encoder block (empty when the candidate's
        blocks could not be tapped).
    first_divergent_block : int or None
        The first block below the floor, None when none is.
    """

    input: str = field(_n.string)
    logmel_sha256: str = field(_n.string)
    snr_db: float = field(_n.real)
    cosine: float = field(_n.real)
    max_abs_error: float = field(_n.real)
    block_snr_db: tuple[float, ...] = field(_n.array_of(_n.real))
    first_divergent_block: int | None = field(_n.integer_or_null)


class PairFloor(Schema):
    """The ``floor`` entry: which row of ``pair-v1`` applies, and its thresholds.

    Attributes
    ----------
    ftype : str
        The model file's tensor type.
    precision : str
        The encoder's declared compute precision.
    snr_db_min : float
        SNR each input must reach.
    cosine_min : float
        Cosine each input must reach.
    """

    _path = "floor"

    ftype: str = field(_n.string)
    precision: str = field(_n.string)
    snr_db_min: float = field(_n.real)
    cosine_min: float = field(_n.real)


class PairEvidence(Schema):
    """The ``pair`` document of ``export.pair``.

    Attributes
    ----------
    policy : dict
        ``id``, ``sha256`` and ``rules`` of ``pair-v1``, recorded before measuring.
    model_file : str
        Run-relative path of the audited ``.bin``.
    model_sha256 : str
        Its digest.
    encoder : str
        Run-relative path of the audited encoder.
    encoder_tree_digest : str
        Its tree digest.
    reference : str
        How the reference was built (the encoder rebuilt from the file's weights).
    execution : str
        ``program-float32`` (the ML program, executed here) or ``coreml-all``.
    floor : PairFloor
        The applicable thresholds.
    inputs : tuple of PairInput
        The fixture log-mel first, then the random one.
    seconds : float
        Time of the whole measurement.
    program_source : dict or None
        For a given ``.mlmodelc`` executed from its ``model.mil`` (off macOS): the file read
        (``read_from``), the digests of ``model.mil`` and ``weights/weight.bin``, the
        program version, opset and coremlc's build info. Absent otherwise.
    """

    policy: dict[str, Any] = field(_n.mapping)
    model_file: str = field(_n.string)
    model_sha256: str = field(_n.string)
    encoder: str = field(_n.string)
    encoder_tree_digest: str = field(_n.string)
    reference: str = field(_n.string)
    execution: str = field(_n.string)
    floor: PairFloor = field(PairFloor)
    inputs: tuple[PairInput, ...] = field(_n.array_of(PairInput.from_json))
    seconds: float = field(_n.number)
    program_source: dict[str, Any] | None = field(_n.mapping, optional=True, default=None)
