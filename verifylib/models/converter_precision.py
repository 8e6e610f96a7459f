"""Upstream's Core ML converter, pin by pin, and what its precision means for the Neural Engine.

whisper.cpp's ``models/generate-coreml-model.sh`` runs ``models/convert-whisper-to-coreml.py
--model NAME --encoder-only True --optimize-ane True``; it never passes ``--quantize``. What
compute precision that gives an encoder changed between the pins of the manifest (facts
read from upstream's git, docs/facts.md):

- up to v1.8.6 the converter calls ``ct.convert(..., convert_to="mlprogram")`` without a
  ``compute_precision``, so coremltools' default for an ML program applies: FLOAT16;
- from commit ``ba573929c`` (2026-06-09, first in tag v1.8.7) it passes
  ``compute_precision=FLOAT16 if --quantize else FLOAT32``, so the script makes an FP32
  encoder.

Core ML plans an FP32 ML program on the GPU and CPU only: the Neural Engine computes in
float16. So an audit whose planned encoders are all FP32 cannot support a Neural Engine
claim, whatever the hardware. Nothing in the parameters or the policies states that a
Neural Engine claim is expected; ``placement.plan`` is part of every audit, so the warning
here is raised whenever every encoder the plan would cover is FP32 (:func:`neural_engine_warning`).
Everything here is a pure function of its arguments: ``verifylib doctor`` calls it on a
parameter file before a run, the report on a receipt's identities after one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from verifylib.evidence import identities

FP32_SINCE_COMMIT = "ba573929cd31ddea3c77c5dc9caae78da8117123"
"""Upstream's commit "coreml : fix --quantize crash for mlprogram format" (2026-06-09): from
it on the converter gives FLOAT32 unless ``--quantize``."""

FP32_SINCE_TAG = "v1.8.7"
"""The first release tag holding :data:`FP32_SINCE_COMMIT` (v1.8.6 does not)."""

CONVERTER = "models/convert-whisper-to-coreml.py"
SCRIPT = "models/generate-coreml-model.sh"

NEURAL_ENGINE_PRECISIONS = ("fp16", "mixed")
"""Declared compute precisions (:data:`verifylib.models.encoder_card.PRECISIONS`) whose
program has float16 arithmetic Core ML can plan on the Neural Engine."""


@dataclass(frozen=True)
class ConverterPrecision:
    """The compute precision upstream's converter gives an encoder at one pin.

    Attributes
    ----------
    pin : str
        The manifest's pin name.
    default : {"fp16", "fp32"}
        What :data:`SCRIPT` makes (no ``--quantize``).
    with_quantize : str or None
        What ``--quantize True`` makes; None where that path does not give an ML program.
    rule : str
        How the converter chooses, in words, with its source.
    """

    pin: str
    default: str
    with_quantize: str | None
    rule: str


_FP16_DEFAULT = (f"{CONVERTER} passes no compute_precision to ct.convert(convert_to="
                 "\"mlprogram\"), so coremltools' default for an ML program applies: FLOAT16 "
                 "(its --quantize applies neural-network weight quantization to the ML "
                 f"program, the crash {FP32_SINCE_COMMIT[:9]} fixed)")
_FP32_UNLESS_QUANTIZE = (f"{CONVERTER} passes compute_precision=FLOAT16 if --quantize else "
                         f"FLOAT32 (since {FP32_SINCE_COMMIT[:9]}, first in {FP32_SINCE_TAG}), "
                         f"and {SCRIPT} passes no --quantize")

CONVERTER_PRECISION: dict[str, ConverterPrecision] = {
    "v1.8.5": ConverterPrecision("v1.8.5", "fp16", None, _FP16_DEFAULT),
    "97c56f1": ConverterPrecision("97c56f1", "fp32", "fp16", _FP32_UNLESS_QUANTIZE),
    "v1.9.3": ConverterPrecision("v1.9.3", "fp32", "fp16", _FP32_UNLESS_QUANTIZE),
}
"""Manifest pin -> upstream's converter precision there. Every pin of
``patches/manifest.yaml`` has a row (a unit test holds the two together), so adding a pin
means reading its converter."""


def converter_precision(pin: str | None) -> ConverterPrecision | None:
    """Return upstream's converter precision at a pin.

    Parameters
    ----------
    pin : str or None
        A manifest pin name.

    Returns
    -------
    ConverterPrecision or None
        None for a pin the table does not hold.
    """
    return CONVERTER_PRECISION.get(pin) if pin is not None else None


@dataclass(frozen=True)
class PlannedEncoder:
    """One encoder ``placement.plan`` would plan in an audit.

    Attributes
    ----------
    slot : str
        Its variant folder, ``fp32`` or ``fp16`` (an encoder audited as given occupies
        ``fp32`` whatever it computes in).
    precision : str
        Its declared compute precision: ``fp32``, ``fp16``, ``mixed`` or ``unknown``.
    given : bool
        True for an encoder audited as given (``encoder.path``), False for one the suite
        exports.
    """

    slot: str
    precision: str
    given: bool


def planned_encoders(given_precision: str | None,
                     fp16_variant: bool) -> tuple[PlannedEncoder, ...]:
    """Return the encoders an audit plans.

    Parameters
    ----------
    given_precision : str or None
        The declared precision of the encoder audited as given; None when the suite
        exports the encoder (its gated variant converts at FLOAT32).
    fp16_variant : bool
        Whether the suite's fp16 variant is exported beside it (never with a given one).

    Returns
    -------
    tuple of PlannedEncoder
    """
    if given_precision is not None:
        return (PlannedEncoder("fp32", given_precision, True),)
    out = [PlannedEncoder("fp32", "fp32", False)]
    if fp16_variant:
        out.append(PlannedEncoder("fp16", "fp16", False))
    return tuple(out)


def planned_from_identities(ids: Mapping[str, Any]) -> tuple[PlannedEncoder, ...]:
    """Return the encoders a run planned (or would plan on a Mac), from its identity table.

    An encoder audited as given records its declared precision with the policy chosen
    from it (``encoder.precision``, ``encoder.parity_policy``); an exported variant
    records its package's or compiled model's tree digest.

    Parameters
    ----------
    ids : mapping
        A receipt's identities.

    Returns
    -------
    tuple of PlannedEncoder
        Empty when the run records no encoder (its export did not get that far).
    """
    def has(variant: str) -> bool:
        return any(identities.artifact_tree_digest(variant, fmt) in ids
                   for fmt in ("mlpackage", "mlmodelc"))

    precision = ids.get(identities.ENCODER_PRECISION)
    if identities.ENCODER_PARITY_POLICY in ids and isinstance(precision, str):
        return planned_encoders(precision, False)
    if not has("fp32"):
        return ()
    return planned_encoders(None, has("fp16"))


def neural_engine_warning(planned: Sequence[PlannedEncoder], pin: str | None) -> str | None:
    """Warn when every encoder the audit plans computes in float32.

    Parameters
    ----------
    planned : sequence of PlannedEncoder
        The audit's planned encoders (:func:`planned_encoders`,
        :func:`planned_from_identities`).
    pin : str or None
        The audit's pin, for what upstream's converter makes there.

    Returns
    -------
    str or None
        The warning; None when some planned program has float16 arithmetic, when a
        precision is unknown (``export.contract`` already says so), or when nothing is
        planned.
    """
    if not planned or any(p.precision != "fp32" for p in planned):
        return None
    given = any(p.given for p in planned)
    what = "The audited encoder computes in float32" if given else \
        "The only encoder this audit exports computes in float32"
    text = (f"{what} and no float16 program is planned beside it: Core ML never plans a "
            "float32 ML program on the Neural Engine (it computes in float16 only), so "
            "placement.plan can show no Neural Engine share and this audit cannot support a "
            "Neural Engine claim.")
    if not given:
        return text + " Set export.fp16: true to export and plan the float16 variant too."
    row = converter_precision(pin)
    if row is None:
        return text
    if row.default == "fp32":
        return (text + f" That is what upstream's {SCRIPT} makes at pin {pin}: {row.rule}. "
                "For an encoder the Neural Engine can run, convert with --quantize True "
                "(FLOAT16) and audit that one.")
    return (text + f" Upstream's converter at pin {pin} makes float16 programs ({row.rule}), "
            f"so this encoder was not made by that pin's {SCRIPT}; from "
            f"{FP32_SINCE_TAG} on that script makes float32 ones.")


def fp32_plan_explanation(precision: str | None) -> str | None:
    """Say why a float32 plan has no Neural Engine share.

    Parameters
    ----------
    precision : str or None
        The planned program's declared compute precision, as its plan records it (None in
        plans recorded before it was).

    Returns
    -------
    str or None
        The explanation for ``fp32``; None otherwise.
    """
    if precision != "fp32":
        return None
    return ("This program declares float32 arithmetic. The Neural Engine computes in float16 "
            "only, so Core ML plans a float32 ML program on the GPU and CPU and never on the "
            "Neural Engine: its Neural Engine share is 0 by construction, not a fault of the "
            "encoder or of the host. A Neural Engine claim needs a float16 program: the "
            "suite's fp16 variant, or upstream's converter run with --quantize True (from "
            f"{FP32_SINCE_TAG}, commit {FP32_SINCE_COMMIT[:9]}, it makes float32 without it; "
            "before, coremltools' float16 default applied).")
