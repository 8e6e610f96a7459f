"""Schemas of the stage 05 sidecars ``wer`` (gate ``wer.ggml_vs_source``) and ``hybrid``.

:class:`WerEvidence` is the document :func:`verifylib.stages.wer.ggml_vs_source` writes:
the wer-v1 policy copy (:class:`WerPolicy`), the normalizer, the digests of the GGML model
and binary, and one :class:`WerClip` per fixture (edit :class:`Counts` against the
reference, empty flags, the GGML run's :class:`RunRecord`, and for a public clip its
texts). :class:`HybridEvidence` is the ``hybrid`` document of :func:`verifylib.stages.wer.hybrid`,
one :class:`HybridClip` per fixture.

``from_json`` is strict and fails closed: a field that is missing or of the wrong JSON type
raises :class:`SchemaError` (an :class:`verifylib.errors.EvidenceInvalid`) whose ``path``
names it, e.g. ``clips[1].ggml.substitutions``. Keys that only a public clip carries (its
texts) are optional; so are the document-level digests and the run records, which records
written by hand for the scoring rules' tests omit — the gate's rule
(:mod:`verifylib.evidence.rules.wer`) refuses a document that lacks what it checks.
``to_json`` gives back exactly the dict the stage writes.

Shapes and types only: the counts are recomputed from the texts, the streams re-classified
and the policy compared with the packaged one by the rules. This module imports nothing
from verifylib but :mod:`verifylib.errors` (through :mod:`.fields`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from verifylib.evidence.schemas.fields import (
    SchemaError,
    array_of,
    boolean,
    integer,
    integer_or_null,
    mapping,
    number,
    obj,
    opt,
    put,
    req,
    string,
    string_or_null,
    strings,
)

__all__ = ["SchemaError", "Counts", "GgmlVsSourceRules", "HybridRules", "WerPolicy", "Launch",
           "RunRecord", "WerClip", "WerEvidence", "HybridClip", "HybridEvidence"]

_COUNT_KEYS = ("hits", "substitutions", "deletions", "insertions")


def _unknown_keys(o: Mapping[str, Any], known: tuple[str, ...], path: str) -> None:
    extra = sorted(set(o) - set(known))
    if extra:
        raise SchemaError(f"{path}.{extra[0]}" if path else extra[0], "not a key of the policy")


@dataclass(frozen=True)
class Counts:
    """Word alignment counts of one hypothesis against one reference.

    Attributes
    ----------
    hits, substitutions, deletions, insertions : int
        As :meth:`verifylib.numerics.scoring.WordCounts.as_dict` writes them.
    """

    hits: int
    substitutions: int
    deletions: int
    insertions: int

    @classmethod
    def from_json(cls, doc: Any, path: str = "counts") -> "Counts":
        """Read a counts object.

        Parameters
        ----------
        doc : Any
            The stored counts.
        path : str
            Where they sit, e.g. ``clips[0].ggml``.

        Returns
        -------
        Counts

        Raises
        ------
        SchemaError
            If a count is missing or not an integer.
        """
        o = obj(doc, path)
        return cls(*(req(o, k, path, integer) for k in _COUNT_KEYS))

    def to_json(self) -> dict[str, int]:
        """Return the counts as stored (a mapping ``scoring.corpus_wer`` takes).

        Returns
        -------
        dict
        """
        return {k: getattr(self, k) for k in _COUNT_KEYS}


@dataclass(frozen=True)
class GgmlVsSourceRules:
    """The ``ggml_vs_source`` section of wer-v1.

    Attributes
    ----------
    max_corpus_wer_delta : float
    no_empty_where_source_nonempty : bool
    """

    max_corpus_wer_delta: float
    no_empty_where_source_nonempty: bool

    _KEYS = ("max_corpus_wer_delta", "no_empty_where_source_nonempty")

    @classmethod
    def from_json(cls, doc: Any, path: str = "policy.ggml_vs_source") -> "GgmlVsSourceRules":
        """Read the section (no key beyond those of wer-v1).

        Parameters
        ----------
        doc : Any
            The stored value.
        path : str
            Where it sits, for error messages.

        Returns
        -------
        GgmlVsSourceRules

        Raises
        ------
        SchemaError
        """
        o = obj(doc, path)
        _unknown_keys(o, cls._KEYS, path)
        return cls(req(o, "max_corpus_wer_delta", path, number),
                   req(o, "no_empty_where_source_nonempty", path, boolean))

    def to_json(self) -> dict[str, Any]:
        """Return the section as stored.

        Returns
        -------
        dict
        """
        return {k: getattr(self, k) for k in self._KEYS}


@dataclass(frozen=True)
class HybridRules:
    """The ``hybrid`` section of wer-v1.

    Attributes
    ----------
    max_corpus_wer_delta_vs_best : float
    all_nonempty : bool
    four_load_conditions_every_run : bool
    max_clip_wer_vs_ggml : float
    """

    max_corpus_wer_delta_vs_best: float
    all_nonempty: bool
    four_load_conditions_every_run: bool
    max_clip_wer_vs_ggml: float

    _KEYS = ("max_corpus_wer_delta_vs_best", "all_nonempty", "four_load_conditions_every_run",
             "max_clip_wer_vs_ggml")

    @classmethod
    def from_json(cls, doc: Any, path: str = "policy.hybrid") -> "HybridRules":
        """Read the section (no key beyond those of wer-v1).

        Parameters
        ----------
        doc : Any
            The stored value.
        path : str
            Where it sits, for error messages.

        Returns
        -------
        HybridRules

        Raises
        ------
        SchemaError
        """
        o = obj(doc, path)
        _unknown_keys(o, cls._KEYS, path)
        return cls(req(o, "max_corpus_wer_delta_vs_best", path, number),
                   req(o, "all_nonempty", path, boolean),
                   req(o, "four_load_conditions_every_run", path, boolean),
                   req(o, "max_clip_wer_vs_ggml", path, number))

    def to_json(self) -> dict[str, Any]:
        """Return the section as stored.

        Returns
        -------
        dict
        """
        return {k: getattr(self, k) for k in self._KEYS}


@dataclass(frozen=True)
class WerPolicy:
    """The copy of the wer-v1 resource a WER document stores (``policy``).

    A key the resource does not have is refused, so ``to_json`` is the stored object.

    Attributes
    ----------
    id : str
    ggml_vs_source : GgmlVsSourceRules
    hybrid : HybridRules
    description : str or None
    """

    id: str
    ggml_vs_source: GgmlVsSourceRules
    hybrid: HybridRules
    description: str | None = None

    _KEYS = ("id", "description", "ggml_vs_source", "hybrid")

    @classmethod
    def from_json(cls, doc: Any, path: str = "policy") -> "WerPolicy":
        """Read the policy copy.

        Parameters
        ----------
        doc : Any
            The stored value.
        path : str
            Where it sits, for error messages.

        Returns
        -------
        WerPolicy

        Raises
        ------
        SchemaError
        """
        o = obj(doc, path)
        _unknown_keys(o, cls._KEYS, path)
        return cls(req(o, "id", path, string),
                   req(o, "ggml_vs_source", path, GgmlVsSourceRules.from_json),
                   req(o, "hybrid", path, HybridRules.from_json),
                   opt(o, "description", path, string))

    def to_json(self) -> dict[str, Any]:
        """Return the policy as stored (equal to the packaged rules when untouched).

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"id": self.id}
        put(out, "description", self.description)
        out["ggml_vs_source"] = self.ggml_vs_source.to_json()
        out["hybrid"] = self.hybrid.to_json()
        return out


@dataclass(frozen=True)
class Launch:
    """The launch-ledger citation of a run (:func:`verifylib.runtime.ledger.citation`).

    Attributes
    ----------
    seq : int
    binary_sha256 : str
    """

    seq: int
    binary_sha256: str

    @classmethod
    def from_json(cls, doc: Any, path: str = "launch") -> "Launch":
        """Read a citation.

        Parameters
        ----------
        doc : Any
            The stored value.
        path : str
            Where it sits, for error messages.

        Returns
        -------
        Launch

        Raises
        ------
        SchemaError
        """
        o = obj(doc, path)
        return cls(req(o, "seq", path, integer), req(o, "binary_sha256", path, string))

    def to_json(self) -> dict[str, Any]:
        """Return the citation as stored.

        Returns
        -------
        dict
        """
        return {"seq": self.seq, "binary_sha256": self.binary_sha256}


@dataclass(frozen=True)
class RunRecord:
    """One whisper-cli run as :func:`verifylib.runtime.runner.run_record` records it.

    Attributes
    ----------
    argv : tuple of str
    returncode : int or None
        None on timeout.
    signal : str or None
    timed_out : bool
    wall_s : float
    stdout_sha256, stderr_sha256 : str
    stdout_bytes, stderr_bytes : int
    launch : Launch or None
        The ledger citation, when the run was recorded in a launch ledger.
    """

    argv: tuple[str, ...]
    returncode: int | None
    signal: str | None
    timed_out: bool
    wall_s: float
    stdout_sha256: str
    stderr_sha256: str
    stdout_bytes: int
    stderr_bytes: int
    launch: Launch | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "run") -> "RunRecord":
        """Read a run record.

        Parameters
        ----------
        doc : Any
            The stored value.
        path : str
            Where it sits, for error messages.
            Where it sits, e.g. ``clips[0].ggml_run``.

        Returns
        -------
        RunRecord

        Raises
        ------
        SchemaError
        """
        o = obj(doc, path)
        return cls(argv=req(o, "argv", path, strings),
                   returncode=req(o, "returncode", path, integer_or_null),
                   signal=req(o, "signal", path, string_or_null),
                   timed_out=req(o, "timed_out", path, boolean),
                   wall_s=req(o, "wall_s", path, number),
                   stdout_sha256=req(o, "stdout_sha256", path, string),
                   stderr_sha256=req(o, "stderr_sha256", path, string),
                   stdout_bytes=req(o, "stdout_bytes", path, integer),
                   stderr_bytes=req(o, "stderr_bytes", path, integer),
                   launch=opt(o, "launch", path, Launch.from_json))

    def to_json(self) -> dict[str, Any]:
        """Return the record as :func:`verifylib.runtime.runner.run_record` writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {
            "argv": list(self.argv), "returncode": self.returncode, "signal": self.signal,
            "timed_out": self.timed_out, "wall_s": self.wall_s,
            "stdout_sha256": self.stdout_sha256, "stderr_sha256": self.stderr_sha256,
            "stdout_bytes": self.stdout_bytes, "stderr_bytes": self.stderr_bytes}
        if self.launch is not None:
            out["launch"] = self.launch.to_json()
        return out


_WER_TEXTS = ("reference", "source_text", "ggml_text", "raw_reference", "raw_source",
              "raw_ggml")


@dataclass(frozen=True)
class WerClip:
    """One fixture of the ``wer`` document.

    Attributes
    ----------
    id : str
    public : bool
    source, ggml : Counts
        HF source and GGML transcripts against the reference.
    source_empty, ggml_empty : bool
    pairwise : Counts or None
        GGML against the source (reported, not gated).
    audio_sha256, reference_from : str or None
        The fixture's digest; ``"text"`` or ``"source"``.
    ggml_run : RunRecord or None
        The GGML whisper-cli run.
    reference, source_text, ggml_text : str or None
        Normalized texts (public clips only).
    raw_reference, raw_source, raw_ggml : str or None
        The texts as given and as transcribed (public clips only; ``raw_reference`` is
        missing from runs written before it was stored).
    """

    id: str
    public: bool
    source: Counts
    ggml: Counts
    source_empty: bool
    ggml_empty: bool
    pairwise: Counts | None = None
    audio_sha256: str | None = None
    reference_from: str | None = None
    ggml_run: RunRecord | None = None
    reference: str | None = None
    source_text: str | None = None
    ggml_text: str | None = None
    raw_reference: str | None = None
    raw_source: str | None = None
    raw_ggml: str | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "clip") -> "WerClip":
        """Read one clip.

        Parameters
        ----------
        doc : Any
            The stored value.
        path : str
            Where it sits, for error messages.
            Where it sits, e.g. ``clips[2]``.

        Returns
        -------
        WerClip

        Raises
        ------
        SchemaError
        """
        o = obj(doc, path)
        texts = {k: opt(o, k, path, string) for k in _WER_TEXTS}
        return cls(id=req(o, "id", path, string), public=req(o, "public", path, boolean),
                   source=req(o, "source", path, Counts.from_json),
                   ggml=req(o, "ggml", path, Counts.from_json),
                   source_empty=req(o, "source_empty", path, boolean),
                   ggml_empty=req(o, "ggml_empty", path, boolean),
                   pairwise=opt(o, "pairwise", path, Counts.from_json),
                   audio_sha256=opt(o, "audio_sha256", path, string),
                   reference_from=opt(o, "reference_from", path, string),
                   ggml_run=opt(o, "ggml_run", path, RunRecord.from_json), **texts)

    def to_json(self) -> dict[str, Any]:
        """Return the clip as the stage writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"id": self.id, "public": self.public}
        put(out, "audio_sha256", self.audio_sha256)
        put(out, "reference_from", self.reference_from)
        out["source"] = self.source.to_json()
        out["ggml"] = self.ggml.to_json()
        if self.pairwise is not None:
            out["pairwise"] = self.pairwise.to_json()
        out["source_empty"] = self.source_empty
        out["ggml_empty"] = self.ggml_empty
        if self.ggml_run is not None:
            out["ggml_run"] = self.ggml_run.to_json()
        for k in _WER_TEXTS:
            put(out, k, getattr(self, k))
        return out


@dataclass(frozen=True)
class WerEvidence:
    """The ``wer`` document of ``wer.ggml_vs_source``.

    Attributes
    ----------
    policy : WerPolicy
    clips : tuple of WerClip
    policy_sha256 : str or None
        Digest of the packaged wer-v1 resource.
    normalizer : dict or None
        The normalizer's identity (as stored).
    model_ggml_sha256, binary_sha256 : str or None
        The GGML model and the GGML whisper-cli.
    mlmodelc_beside : bool or None
        Whether a ``.mlmodelc`` sat beside the model the GGML runs read.
    decoding : tuple of str or None
        The greedy decoding arguments.
    """

    policy: WerPolicy
    clips: tuple[WerClip, ...]
    policy_sha256: str | None = None
    normalizer: dict[str, Any] | None = None
    model_ggml_sha256: str | None = None
    binary_sha256: str | None = None
    mlmodelc_beside: bool | None = None
    decoding: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, doc: Any) -> "WerEvidence":
        """Read a ``wer`` document, strictly.

        Parameters
        ----------
        doc : Any
            The decoded JSON document.

        Returns
        -------
        WerEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type; ``path`` names it.
        """
        o = obj(doc, "")
        return cls(policy=req(o, "policy", "", WerPolicy.from_json),
                   clips=req(o, "clips", "", array_of(WerClip.from_json)),
                   policy_sha256=opt(o, "policy_sha256", "", string),
                   normalizer=opt(o, "normalizer", "", mapping),
                   model_ggml_sha256=opt(o, "model_ggml_sha256", "", string),
                   binary_sha256=opt(o, "binary_sha256", "", string),
                   mlmodelc_beside=opt(o, "mlmodelc_beside", "", boolean),
                   decoding=opt(o, "decoding", "", strings))

    def to_json(self) -> dict[str, Any]:
        """Return the document as the stage writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"policy": self.policy.to_json()}
        put(out, "policy_sha256", self.policy_sha256)
        put(out, "normalizer", self.normalizer)
        put(out, "model_ggml_sha256", self.model_ggml_sha256)
        put(out, "binary_sha256", self.binary_sha256)
        put(out, "mlmodelc_beside", self.mlmodelc_beside)
        if self.decoding is not None:
            out["decoding"] = list(self.decoding)
        out["clips"] = [c.to_json() for c in self.clips]
        return out


_HYBRID_TEXTS = ("reference", "ggml_text", "hybrid_text")


@dataclass(frozen=True)
class HybridClip:
    """One fixture of the ``hybrid`` document.

    Attributes
    ----------
    id : str
    public : bool
    source, ggml, hybrid : Counts
        Against the reference.
    hybrid_vs_ggml : Counts
        The hybrid transcript against the GGML one.
    hybrid_empty : bool
    run : RunRecord or None
        The Core ML whisper-cli run.
    reference, ggml_text, hybrid_text : str or None
        Normalized texts (public clips only).
    """

    id: str
    public: bool
    source: Counts
    ggml: Counts
    hybrid: Counts
    hybrid_vs_ggml: Counts
    hybrid_empty: bool
    run: RunRecord | None = None
    reference: str | None = None
    ggml_text: str | None = None
    hybrid_text: str | None = None

    @classmethod
    def from_json(cls, doc: Any, path: str = "clip") -> "HybridClip":
        """Read one clip.

        Parameters
        ----------
        doc : Any
            The stored value.
        path : str
            Where it sits, for error messages.
            Where it sits, e.g. ``clips[0]``.

        Returns
        -------
        HybridClip

        Raises
        ------
        SchemaError
        """
        o = obj(doc, path)
        texts = {k: opt(o, k, path, string) for k in _HYBRID_TEXTS}
        return cls(id=req(o, "id", path, string), public=req(o, "public", path, boolean),
                   source=req(o, "source", path, Counts.from_json),
                   ggml=req(o, "ggml", path, Counts.from_json),
                   hybrid=req(o, "hybrid", path, Counts.from_json),
                   hybrid_vs_ggml=req(o, "hybrid_vs_ggml", path, Counts.from_json),
                   hybrid_empty=req(o, "hybrid_empty", path, boolean),
                   run=opt(o, "run", path, RunRecord.from_json), **texts)

    def to_json(self) -> dict[str, Any]:
        """Return the clip as the stage writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"id": self.id, "public": self.public}
        if self.run is not None:
            out["run"] = self.run.to_json()
        for k in ("source", "ggml", "hybrid", "hybrid_vs_ggml"):
            out[k] = getattr(self, k).to_json()
        out["hybrid_empty"] = self.hybrid_empty
        for k in _HYBRID_TEXTS:
            put(out, k, getattr(self, k))
        return out


@dataclass(frozen=True)
class HybridEvidence:
    """The ``hybrid`` document of ``wer.hybrid``.

    Attributes
    ----------
    policy : WerPolicy
    clips : tuple of HybridClip
    policy_sha256 : str or None
    binary_sha256 : str or None
        The Core ML whisper-cli the runs launched.
    model_arg : str or None
        The ``-m`` string of the runs.
    """

    policy: WerPolicy
    clips: tuple[HybridClip, ...]
    policy_sha256: str | None = None
    binary_sha256: str | None = None
    model_arg: str | None = None

    @classmethod
    def from_json(cls, doc: Any) -> "HybridEvidence":
        """Read a ``hybrid`` document, strictly.

        Parameters
        ----------
        doc : Any
            The decoded JSON document.

        Returns
        -------
        HybridEvidence

        Raises
        ------
        SchemaError
            If a field is missing or of the wrong type; ``path`` names it.
        """
        o = obj(doc, "")
        return cls(policy=req(o, "policy", "", WerPolicy.from_json),
                   clips=req(o, "clips", "", array_of(HybridClip.from_json)),
                   policy_sha256=opt(o, "policy_sha256", "", string),
                   binary_sha256=opt(o, "binary_sha256", "", string),
                   model_arg=opt(o, "model_arg", "", string))

    def to_json(self) -> dict[str, Any]:
        """Return the document as the stage writes it.

        Returns
        -------
        dict
        """
        out: dict[str, Any] = {"policy": self.policy.to_json()}
        put(out, "policy_sha256", self.policy_sha256)
        put(out, "binary_sha256", self.binary_sha256)
        put(out, "model_arg", self.model_arg)
        out["clips"] = [c.to_json() for c in self.clips]
        return out
