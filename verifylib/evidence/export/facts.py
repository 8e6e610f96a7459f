"""Typed facts of stage 02 (export): its notebook's table, with named fields."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from verifylib.evidence.export.schema import GgmlModelEvidence, ModelIntake
from verifylib.evidence.gates import (
    EXPORT_COMPILE,
    EXPORT_CONTRACT,
    EXPORT_GGML_MODEL,
    EXPORT_PAIR,
)
from verifylib.evidence.reading import describe_run, has_rows, judged_evidence

if TYPE_CHECKING:
    from verifylib.evidence.records import GateRecord


@dataclass(frozen=True)
class ModelFacts:
    """The model and ``ggml-model.bin`` of ``export.ggml_model``.

    Attributes
    ----------
    kind : str
        How the model was taken in.
    source_digest : str
        Digest of the Hugging Face folder.
    hf_dir : str
        The folder.
    ggml_sha256 : str
        Digest of ``ggml-model.bin``.
    ggml_bytes : int
        Its length.
    hparams : dict
        The hyper-parameters written.
    load_probe : str
        How the load run ended (:func:`describe_run`).
    load_wall_s : float
        Its wall time.
    ggml_path : str
        Run-relative path of the model file.
    ftype : str
        Its tensor type.
    given : str or None
        The file the parameters named (model kind ``ggml``), None when written here.
    """

    kind: str
    source_digest: str
    hf_dir: str
    ggml_sha256: str
    ggml_bytes: int
    hparams: dict[str, Any]
    load_probe: str
    load_wall_s: float
    ggml_path: str = "fp32/ggml-model.bin"
    ftype: str = "f16"
    given: str | None = None

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows, in display order.

        Returns
        -------
        list of (str, object)
        """
        return [("model kind", self.kind), ("model source digest", self.source_digest),
                ("Hugging Face folder", self.hf_dir),
                (self.ggml_path.rsplit("/", 1)[-1],
                 f"{self.ggml_sha256} ({self.ggml_bytes} bytes)" if self.given is None else
                 f"{self.ggml_sha256} ({self.ggml_bytes} bytes), {self.ftype}, the given "
                 f"{self.given} unchanged"),
                ("hyper-parameters", self.hparams),
                ("load probe", f"{self.load_probe} in {self.load_wall_s:.2f} s")]


@dataclass(frozen=True)
class PackageFacts:
    """One exported ``.mlpackage`` variant of ``export.contract``.

    Attributes
    ----------
    precision : str
        ``fp32`` or ``fp16``.
    path : str
        Run-relative path.
    conversion_seconds : float or None
        Conversion time (None for an encoder audited as given).
    compute_dtypes : tuple of str
        What the program computes in.
    placed : bool
        Whether it was placed.
    tree_digest : str or None
        The placed package's tree digest.
    problems : tuple of str
        How it broke the contract.
    """

    precision: str
    path: str
    conversion_seconds: float | None
    compute_dtypes: tuple[str, ...]
    placed: bool
    tree_digest: str | None
    problems: tuple[str, ...]

    def row(self) -> tuple[str, str]:
        """Return the (label, value) row of this package.

        Returns
        -------
        (str, str)
        """
        state = (f"placed, tree digest {self.tree_digest}" if self.placed
                 else f"NOT placed: {'; '.join(self.problems) or 'another variant failed'}")
        made = ("audited as given" if self.conversion_seconds is None
                else f"converted in {self.conversion_seconds:.2f} s")
        return (f"{self.precision} package",
                f"{self.path}: {made}, computes {'/'.join(self.compute_dtypes) or 'unknown'}; "
                f"{state}")


@dataclass(frozen=True)
class ContractFacts:
    """The encoder contract and build facts of ``export.contract``.

    Attributes
    ----------
    input_name, output_name : str
        The encoder's input and output names.
    input_shape, output_shape : list of int
        Their shapes.
    config : dict
        The model values the contract is derived from.
    coremltools, torch : str
        Versions.
    torch_version_warning : tuple of str
        coremltools' torch-above-tested warning lines.
    trace_seconds : float
        Time to trace the encoder.
    packages : tuple of PackageFacts
        The exported variants, in export order.
    model_copies : tuple of (str, str)
        Run-relative path -> how ``ggml-model.bin`` was copied there (shown text).
    prebuilt : tuple of (str, str)
        For an encoder audited as given: where it came from, what it declares, the policy.
    """

    input_name: str
    input_shape: list[int]
    output_name: str
    output_shape: list[int]
    config: dict[str, Any]
    coremltools: str
    torch: str
    torch_version_warning: tuple[str, ...]
    trace_seconds: float
    packages: tuple[PackageFacts, ...]
    model_copies: tuple[tuple[str, str], ...]
    prebuilt: tuple[tuple[str, str], ...] = ()

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows, in display order.

        Returns
        -------
        list of (str, object)
        """
        return [("encoder contract",
                 f"{self.input_name} float32 {self.input_shape} -> {self.output_name} float32 "
                 f"{self.output_shape} (from {self.config})"),
                ("coremltools / torch", f"{self.coremltools} / {self.torch}"),
                ("torch-above-tested warning", " ".join(self.torch_version_warning) or "none"),
                *self.prebuilt,
                *(() if self.prebuilt else (("trace", f"{self.trace_seconds:.2f} s"),)),
                *(p.row() for p in self.packages), *self.model_copies]


@dataclass(frozen=True)
class CompiledFacts:
    """One compiled ``.mlmodelc`` of ``export.compile``.

    Attributes
    ----------
    precision : str
        ``fp32`` or ``fp16``.
    placed_path : str
        Where it was placed.
    tree_digest : str
        Its tree digest.
    wall_s : float or None
        ``coremlc`` wall time (None: a ``.mlmodelc`` audited as given, compiled elsewhere).
    """

    precision: str
    placed_path: str
    tree_digest: str
    wall_s: float | None

    def row(self) -> tuple[str, str]:
        """Return the (label, value) row of this compiled model.

        Returns
        -------
        (str, str)
        """
        how = ("given compiled" if self.wall_s is None
               else f"in {self.wall_s:.1f} s")
        return (f"{self.precision} .mlmodelc",
                f"{self.placed_path} (tree {self.tree_digest}) {how}")


@dataclass(frozen=True)
class ExportFacts:
    """Stage 02's facts, from the evidence its gates cite; :meth:`rows` is the table.

    Attributes
    ----------
    model : ModelFacts or None
        ``export.ggml_model``'s model and file (None when it did not judge).
    contract : ContractFacts or None
        ``export.contract``'s contract, versions and packages.
    compiled : tuple of CompiledFacts
        ``export.compile``'s compiled models (empty when it did not judge).
    pair : PairFacts or None
        ``export.pair``'s measurement (None when it did not judge).
    """

    model: ModelFacts | None = None
    contract: ContractFacts | None = None
    compiled: tuple[CompiledFacts, ...] = ()
    pair: "PairFacts | None" = None

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of the facts table, in display order.

        Returns
        -------
        list of (str, object)
            The model and ``ggml-model.bin``, the encoder contract and build facts, each
            variant's package, and each compiled encoder.
        """
        out: list[tuple[str, Any]] = []
        if self.model is not None:
            out += self.model.rows()
        if self.contract is not None:
            out += self.contract.rows()
        out += [c.row() for c in self.compiled]
        if self.pair is not None:
            out += self.pair.rows()
        return out

    __bool__ = has_rows


def export_facts_from_evidence(run_dir: str | os.PathLike[str],
                               records: Mapping[str, GateRecord]) -> ExportFacts:
    """Stage 02's facts, read from the evidence its gates cite (digest-checked).

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least the export gates).

    Returns
    -------
    ExportFacts
        The model and ``ggml-model.bin``, the encoder contract and build facts, each
        variant's package, and each compiled encoder; :meth:`ExportFacts.rows` is the table.
    """
    model = contract = None
    compiled: tuple[CompiledFacts, ...] = ()
    v = judged_evidence(run_dir, records, EXPORT_GGML_MODEL, "ggml")
    if v is not None:
        m = ModelIntake.from_json(v.json("model"))
        g = GgmlModelEvidence.from_json(v.json("ggml"))
        model = ModelFacts(m.kind, m.source_digest, m.hf_dir, g.sha256, g.bytes, g.hparams,
                           describe_run(g.probe.to_json()), g.probe.wall_s, g.path, g.ftype,
                           g.given)
    v = judged_evidence(run_dir, records, EXPORT_CONTRACT, "contract")
    if v is not None:
        doc = v.json("contract")
        c, b = doc["contract"], doc["build"]
        packages = tuple(PackageFacts(r["precision"], r["path"],
                                      (r.get("conversion") or {}).get("seconds"),
                                      tuple(r["description"]["compute_dtypes"]), r["placed"],
                                      r["tree_digest"], tuple(r["problems"]))
                         for r in doc["variants"])
        copies = tuple((k, f"{cp['how']} of {cp['from']} (sha256 {cp['sha256']})")
                       for k, cp in doc["model_copies"].items())
        contract = ContractFacts(c["input"]["name"], c["input"]["shape"], c["output"]["name"],
                                 c["output"]["shape"], doc["config"], b["coremltools"],
                                 b["torch"], tuple(b["torch_version_warning"]),
                                 b["trace_seconds"], packages, copies,
                                 _prebuilt_rows(doc.get("prebuilt")))
    v = judged_evidence(run_dir, records, EXPORT_COMPILE, "compile")
    if v is not None:
        compiled = tuple(CompiledFacts(e["precision"], e["placed_path"], e["tree_digest"],
                                       (e.get("coremlc") or {}).get("wall_s"))
                         for e in v.json("compile")["variants"])
    pair = None
    v = judged_evidence(run_dir, records, EXPORT_PAIR, "pair")
    if v is not None:
        pair = PairFacts.from_doc(v.json("pair"))
    return ExportFacts(model, contract, compiled, pair)


def _prebuilt_rows(pre: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    if not pre:
        return ()
    card = pre.get("card") or {}
    made = (f"written by coremltools {card.get('converter_version') or '(version not recorded)'}"
            f" from {card.get('source') or 'an unrecorded source'}")
    archive = pre.get("archive")
    unzipped = () if not archive else (
        ("unpacked from the zip", f"sha256 {archive['sha256']}, {archive['bytes']} bytes: "
                                  f"{len(archive['files'])} files of {archive['top']}, "
                                  "each held to its declared size and CRC-32"
                                  + (f"; {archive['skipped']} __MACOSX entries not unpacked"
                                     if archive["skipped"] else "")),)
    return (("encoder audited as given", f"{pre['given']} ({pre['format']}, tree "
                                         f"{pre['source_tree_digest']})"),
            *unzipped,
            ("what the encoder declares",
             f"{pre['precision']} compute ({card.get('precision_reason', '')}); weights "
             f"{card.get('weight_compression') or 'unknown'}; layout "
             f"{card.get('layout') or 'unknown'}; {made}"),
            ("parity policy (chosen before measuring)", pre["parity_policy"]))


@dataclass(frozen=True)
class PairFacts:
    """What ``export.pair`` measured: the encoder against the model file's own encoder.

    Attributes
    ----------
    model_file : str
        The audited model file.
    ftype : str
        Its tensor type.
    precision : str
        The encoder's declared precision.
    snr_db_min, cosine_min : float
        The applicable ``pair-v1`` floor.
    inputs : tuple of (str, float or str, float, int or None)
        Per input: name, SNR (dB; ``"inf"`` as the canonical JSON stores it), cosine, first
        divergent block.
    execution : str
        How the candidate ran.
    """

    model_file: str
    ftype: str
    precision: str
    snr_db_min: float
    cosine_min: float
    inputs: tuple[tuple[str, float | str, float, int | None], ...]
    execution: str

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "PairFacts":
        """Read the facts from a ``pair`` document.

        Parameters
        ----------
        doc : mapping
            The ``pair`` evidence.

        Returns
        -------
        PairFacts
        """
        fl = doc["floor"]
        return cls(doc["model_file"], fl["ftype"], fl["precision"], float(fl["snr_db_min"]),
                   float(fl["cosine_min"]),
                   tuple((i["input"], i["snr_db"], i["cosine"], i["first_divergent_block"])
                         for i in doc["inputs"]), doc["execution"])

    @property
    def quantized(self) -> bool:
        """True when the model file is quantized (a lossy reference)."""
        return self.ftype.startswith("q")

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows, in display order.

        Returns
        -------
        list of (str, object)
        """
        def db(x: float | str) -> str:
            return "+inf" if x in ("inf", float("inf")) else f"{float(x):.1f}"
        parts = [f"{name} SNR {db(snr)} dB, cosine {float(cos):.6f}"
                 + (f", first divergent block {blk}" if blk is not None else "")
                 for name, snr, cos, blk in self.inputs]
        out = [("encoder vs the model file's own encoder",
                f"{'; '.join(parts)} ({self.execution}; pair-v1 floor for {self.ftype} / "
                f"{self.precision}: SNR >= {self.snr_db_min:g} dB, cosine >= "
                f"{self.cosine_min:g})")]
        if self.quantized:
            out.append(("quantized reference",
                        f"{self.model_file} is {self.ftype}: the reference carries its "
                        "quantization error, which is not the encoder's; only a "
                        "full-precision source bounds the conversion error tightly"))
        return out
