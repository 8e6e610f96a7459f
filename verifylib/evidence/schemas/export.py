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

from dataclasses import dataclass
from typing import Any

from verifylib.evidence.schemas.build import RunRecord
from verifylib.evidence.schemas.fields import NAMED as _n
from verifylib.evidence.schemas.fields import SchemaError, copy_json, opt, req

__all__ = [
    "SchemaError", "ModelIntake", "GgmlModelEvidence", "ModelRef", "Conversion",
    "ExportVariant", "ConversionFacts", "ModelCopy", "ContractEvidence", "CoremlcRecord",
    "CompiledVariant", "CompileEvidence",
]


# ----------------------------------------------------------------------------- export.ggml_model

@dataclass(frozen=True)
class ModelIntake:
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

    kind: str
    source_digest: str
    origin: dict[str, Any]
    hf_dir: str
    language: str | None
    cached: bool

    @classmethod
    def from_json(cls, doc: Any) -> "ModelIntake":
        """Parse the ``model`` document.

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        ModelIntake

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, "")
        return cls(kind=req(d, "kind", "", _n.string),
                   source_digest=req(d, "source_digest", "", _n.string),
                   origin=req(d, "origin", "", _n.mapping), hf_dir=req(d, "hf_dir", "", _n.string),
                   language=req(d, "language", "", _n.string_or_null),
                   cached=req(d, "cached", "", _n.boolean))

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
        """
        return {"kind": self.kind, "source_digest": self.source_digest,
                "origin": copy_json(self.origin), "hf_dir": self.hf_dir,
                "language": self.language, "cached": self.cached}


@dataclass(frozen=True)
class GgmlModelEvidence:
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

    path: str
    model_arg: str
    sha256: str
    bytes: int
    hparams: dict[str, Any]
    n_tensors: int
    lossless: bool
    binary_sha256: str
    probe: RunRecord

    @classmethod
    def from_json(cls, doc: Any) -> "GgmlModelEvidence":
        """Parse the ``ggml`` document.

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        GgmlModelEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, "")
        return cls(path=req(d, "path", "", _n.string),
                   model_arg=req(d, "model_arg", "", _n.string),
                   sha256=req(d, "sha256", "", _n.string), bytes=req(d, "bytes", "", _n.integer),
                   hparams=req(d, "hparams", "", _n.mapping),
                   n_tensors=req(d, "n_tensors", "", _n.integer),
                   lossless=req(d, "lossless", "", _n.boolean),
                   binary_sha256=req(d, "binary_sha256", "", _n.string),
                   probe=req(d, "probe", "", RunRecord.from_json))

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
        """
        return {"path": self.path, "model_arg": self.model_arg, "sha256": self.sha256,
                "bytes": self.bytes, "hparams": copy_json(self.hparams),
                "n_tensors": self.n_tensors, "lossless": self.lossless,
                "binary_sha256": self.binary_sha256, "probe": self.probe.to_json()}


# ----------------------------------------------------------------------------- export.contract

@dataclass(frozen=True)
class ModelRef:
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

    hf_dir: str
    source_digest: str
    origin: str

    @classmethod
    def from_json(cls, doc: Any, path: str = "model") -> "ModelRef":
        """Parse the entry.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits.

        Returns
        -------
        ModelRef

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(hf_dir=req(d, "hf_dir", path, _n.string),
                   source_digest=req(d, "source_digest", path, _n.string),
                   origin=req(d, "from", path, _n.string))

    def to_json(self) -> dict[str, Any]:
        """Return the entry as written.

        Returns
        -------
        dict
            ``{"hf_dir", "source_digest", "from"}``.
        """
        return {"hf_dir": self.hf_dir, "source_digest": self.source_digest,
                "from": self.origin}


@dataclass(frozen=True)
class Conversion:
    """How one variant was converted.

    Attributes
    ----------
    options : dict
        The ``ct.convert`` options.
    seconds : float
        Conversion time.
    """

    options: dict[str, Any]
    seconds: float

    @classmethod
    def from_json(cls, doc: Any, path: str = "conversion") -> "Conversion":
        """Parse the entry.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits.

        Returns
        -------
        Conversion

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(options=req(d, "options", path, _n.mapping),
                   seconds=req(d, "seconds", path, _n.number))

    def to_json(self) -> dict[str, Any]:
        """Return the entry as written.

        Returns
        -------
        dict
        """
        return {"options": copy_json(self.options), "seconds": self.seconds}


@dataclass(frozen=True)
class ExportVariant:
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

    precision: str
    path: str
    description: dict[str, Any]
    problems: tuple[str, ...]
    placed: bool
    tree_digest: str | None
    conversion: Conversion

    @classmethod
    def from_json(cls, doc: Any, path: str = "") -> "ExportVariant":
        """Parse one variant.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits (``variants[0]``).

        Returns
        -------
        ExportVariant

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(precision=req(d, "precision", path, _n.string),
                   path=req(d, "path", path, _n.string),
                   description=req(d, "description", path, _n.mapping),
                   problems=req(d, "problems", path, _n.strings),
                   placed=req(d, "placed", path, _n.boolean),
                   tree_digest=req(d, "tree_digest", path, _n.string_or_null),
                   conversion=req(d, "conversion", path, Conversion.from_json))

    def to_json(self) -> dict[str, Any]:
        """Return the variant as written.

        Returns
        -------
        dict
        """
        return {"precision": self.precision, "path": self.path,
                "description": copy_json(self.description), "problems": list(self.problems),
                "placed": self.placed, "tree_digest": self.tree_digest,
                "conversion": self.conversion.to_json()}


@dataclass(frozen=True)
class ConversionFacts:
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

    coremltools: str
    torch: str
    transformers: str
    numpy: str
    torch_max_tested_by_coremltools: str | None
    torch_above_tested: bool | None
    torch_version_warning: tuple[str, ...]
    trace_seconds: float

    @classmethod
    def from_json(cls, doc: Any, path: str = "build") -> "ConversionFacts":
        """Parse the entry.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits.

        Returns
        -------
        ConversionFacts

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(coremltools=req(d, "coremltools", path, _n.string),
                   torch=req(d, "torch", path, _n.string),
                   transformers=req(d, "transformers", path, _n.string),
                   numpy=req(d, "numpy", path, _n.string),
                   torch_max_tested_by_coremltools=req(d, "torch_max_tested_by_coremltools", path,
                                                       _n.string_or_null),
                   torch_above_tested=req(d, "torch_above_tested", path, _n.boolean_or_null),
                   torch_version_warning=req(d, "torch_version_warning", path, _n.strings),
                   trace_seconds=req(d, "trace_seconds", path, _n.number))

    def to_json(self) -> dict[str, Any]:
        """Return the entry as written.

        Returns
        -------
        dict
        """
        return {"coremltools": self.coremltools, "torch": self.torch,
                "transformers": self.transformers, "numpy": self.numpy,
                "torch_max_tested_by_coremltools": self.torch_max_tested_by_coremltools,
                "torch_above_tested": self.torch_above_tested,
                "torch_version_warning": list(self.torch_version_warning),
                "trace_seconds": self.trace_seconds}


@dataclass(frozen=True)
class ModelCopy:
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

    source: str
    how: str
    sha256: str

    @classmethod
    def from_json(cls, doc: Any, path: str = "") -> "ModelCopy":
        """Parse one copy.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits.

        Returns
        -------
        ModelCopy

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(source=req(d, "from", path, _n.string), how=req(d, "how", path, _n.string),
                   sha256=req(d, "sha256", path, _n.string))

    def to_json(self) -> dict[str, Any]:
        """Return the copy as written.

        Returns
        -------
        dict
            ``{"from", "how", "sha256"}``.
        """
        return {"from": self.source, "how": self.how, "sha256": self.sha256}


@dataclass(frozen=True)
class ContractEvidence:
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

    model: ModelRef
    config: dict[str, Any]
    contract: dict[str, Any]
    variants: tuple[ExportVariant, ...]
    build: ConversionFacts
    model_copies: dict[str, ModelCopy]

    @classmethod
    def from_json(cls, doc: Any) -> "ContractEvidence":
        """Parse the ``contract`` document.

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        ContractEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, "")
        copies = req(d, "model_copies", "", _n.mapping)
        return cls(model=req(d, "model", "", ModelRef.from_json),
                   config=req(d, "config", "", _n.mapping),
                   contract=req(d, "contract", "", _n.mapping),
                   variants=req(d, "variants", "", _n.array_of(ExportVariant.from_json)),
                   build=req(d, "build", "", ConversionFacts.from_json),
                   model_copies={k: ModelCopy.from_json(v, f"model_copies.{k}")
                                 for k, v in copies.items()})

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
        """
        return {"model": self.model.to_json(), "config": copy_json(self.config),
                "contract": copy_json(self.contract),
                "variants": [v.to_json() for v in self.variants],
                "build": self.build.to_json(),
                "model_copies": {k: c.to_json() for k, c in self.model_copies.items()}}


# ----------------------------------------------------------------------------- export.compile

@dataclass(frozen=True)
class CoremlcRecord:
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

    argv: tuple[str, ...]
    returncode: int | None
    signal: str | None
    timed_out: bool
    wall_s: float
    stderr_sha256: str | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "coremlc") -> "CoremlcRecord":
        """Parse the record.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits.

        Returns
        -------
        CoremlcRecord

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(argv=req(d, "argv", path, _n.strings),
                   returncode=req(d, "returncode", path, _n.integer_or_null),
                   signal=req(d, "signal", path, _n.string_or_null),
                   timed_out=req(d, "timed_out", path, _n.boolean),
                   wall_s=req(d, "wall_s", path, _n.number),
                   stderr_sha256=opt(d, "stderr_sha256", path, _n.string))

    def to_json(self) -> dict[str, Any]:
        """Return the record as written.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"argv": list(self.argv), "returncode": self.returncode,
                               "signal": self.signal, "timed_out": self.timed_out,
                               "wall_s": self.wall_s}
        if self.stderr_sha256 is not None:
            out["stderr_sha256"] = self.stderr_sha256
        return out


@dataclass(frozen=True)
class CompiledVariant:
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

    precision: str
    package: str
    package_tree_digest: str | None
    model_arg: str
    derived_path: str
    placed_path: str
    tree_digest: str | None
    coremlc: CoremlcRecord

    @classmethod
    def from_json(cls, doc: Any, path: str = "") -> "CompiledVariant":
        """Parse one entry.

        Parameters
        ----------
        doc : object
            The decoded JSON.
        path : str
            Where it sits (``variants[0]``).

        Returns
        -------
        CompiledVariant

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, path)
        return cls(precision=req(d, "precision", path, _n.string),
                   package=req(d, "package", path, _n.string),
                   package_tree_digest=req(d, "package_tree_digest", path, _n.string_or_null),
                   model_arg=req(d, "model_arg", path, _n.string),
                   derived_path=req(d, "derived_path", path, _n.string),
                   placed_path=req(d, "placed_path", path, _n.string),
                   tree_digest=req(d, "tree_digest", path, _n.string_or_null),
                   coremlc=req(d, "coremlc", path, CoremlcRecord.from_json))

    def to_json(self) -> dict[str, Any]:
        """Return the entry as written.

        Returns
        -------
        dict
        """
        return {"precision": self.precision, "package": self.package,
                "package_tree_digest": self.package_tree_digest,
                "model_arg": self.model_arg, "derived_path": self.derived_path,
                "placed_path": self.placed_path, "tree_digest": self.tree_digest,
                "coremlc": self.coremlc.to_json()}


@dataclass(frozen=True)
class CompileEvidence:
    """The ``compile`` document of ``export.compile``.

    Attributes
    ----------
    variants : tuple of CompiledVariant
        One entry per compiled package.
    coremlc : str or None
        The ``coremlc`` the host capability check found.
    """

    variants: tuple[CompiledVariant, ...]
    coremlc: str | None

    @classmethod
    def from_json(cls, doc: Any) -> "CompileEvidence":
        """Parse the ``compile`` document.

        Parameters
        ----------
        doc : object
            The decoded JSON.

        Returns
        -------
        CompileEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type.
        """
        d = _n.obj(doc, "")
        return cls(variants=req(d, "variants", "", _n.array_of(CompiledVariant.from_json)),
                   coremlc=req(d, "coremlc", "", _n.string_or_null))

    def to_json(self) -> dict[str, Any]:
        """Return the document as written.

        Returns
        -------
        dict
            ``{"variants": [...], "coremlc": ...}``.
        """
        return {"variants": [v.to_json() for v in self.variants], "coremlc": self.coremlc}
