"""Stage 04_parity: the Hugging Face encoder against each Core ML candidate.

The same real log-mel (the first fixture through the model's Whisper feature extractor,
padded to the contract width) goes to the reference and to every candidate; a seeded
random log-mel is reported beside it, never instead of it. The reference is the Hugging
Face encoder in float32, eval mode, eager attention, on CPU, under inference mode.

- ``parity.program`` (any OS): the saved ``fp32/ggml-model-encoder.mlpackage``'s ML program
  executed op by op by :mod:`verifylib.numerics.mil_exec`, gated on float32 execution with float64
  shown beside it, under policy fp32-v1. This measures what the *conversion* did. A given
  ``.mlmodelc`` is run by Core ML on macOS; elsewhere its program is read from its
  ``model.mil`` (:mod:`verifylib.numerics.mil_compiled`) and executed the same way, or the
  gate is NOT_RUN(platform) saying why it could not be read.
- ``parity.runtime`` (macOS): ``CompiledMLModel(fp32/….mlmodelc, ComputeUnit.ALL)`` — the
  published bytes at the compute units whisper.cpp requests — under fp32-v1. Against
  ``parity.program`` this separates runtime drift from conversion drift.
- ``parity.program_fp16`` / ``parity.runtime_fp16``: the same for the fp16 variant under
  fp16-v1 (informational; disabled with ``export.fp16: false``).

Each policy is recorded (id + digest of the resource) before anything is measured. Drift
by layer: the residual stream after each encoder block, reference vs program executor,
as SNR per layer (Core ML does not expose intermediate values of the compiled model).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from verifylib.canonical import sha256_bytes, tree_digest
from verifylib.errors import ParametersInvalid, PrerequisiteBroken
from verifylib.evidence import identities
from verifylib.evidence.gates import (
    EXPORT_CONTRACT,
    PARITY_PROGRAM,
    PARITY_PROGRAM_FP16,
    PARITY_RUNTIME,
    PARITY_RUNTIME_FP16,
)
from verifylib.evidence.parity.result import (
    ATTRIBUTION,
    CANDIDATE_ARRAYS,
    REFERENCE_ARRAYS,
    parity_result_from_evidence,
)
from verifylib.evidence.parity.schema import (
    Artifact,
    Measurement,
    MeasurementMetrics,
    ParityEvidence,
    PolicyChoiceRecord,
    PolicyRecord,
)
from verifylib.evidence.stage_report import StageReport
from verifylib.numerics.arrays import encode as encode_arrays
from verifylib.numerics.memory import trim_heap
from verifylib.numerics.parity import (
    POLICY_OF_VARIANT,
    PolicyChoice,
    choose_parity_policy,
    compare,
    error_histogram,
    frame_snr_db,
    policy_record,
)
from verifylib.numerics.reference import (
    RANDOM_SEED,
    ReferenceRun,
    fixture_logmel,
    random_logmel,
    reference_encode,
)
from verifylib.numerics.scoring import load_policy
from verifylib.params import Params
from verifylib.runtime import progress
from verifylib.runtime.audio import read_wav_16k
from verifylib.stages.artifacts import (
    GivenProgram,
    compiled_variant,
    exported_variant,
    fixture_intake,
    given_program,
    model_source,
    source_ftype,
)
from verifylib.stages.context import StageContext

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from verifylib.evidence.records import EvidenceRef
    from verifylib.numerics.attribution import Attribution
    from verifylib.numerics.mil_exec import Execution, Program
    from verifylib.numerics.scoring import Policy

STAGE = "04_parity"
CANDIDATES = ((PARITY_PROGRAM, "fp32", "program"), (PARITY_RUNTIME, "fp32", "runtime"),
              (PARITY_PROGRAM_FP16, "fp16", "program"),
              (PARITY_RUNTIME_FP16, "fp16", "runtime"))
"""(gate, variant, kind) in the order the stage measures them."""

PROGRAM_MODES = ("float32", "float64")
RUNTIME_EXECUTION = "coreml-all"




# ----------------------------------------------------------------------------- reference

def reference_run(ctx: StageContext) -> ReferenceRun:
    """Load the reference model and encode the fixture and the random log-mel.

    Parameters
    ----------
    ctx : StageContext
        Stage 04's context (the model source, the exported contract, the fixtures).

    Returns
    -------
    ReferenceRun
        Inputs, their records, the encoder's outputs, the fixture's per-block residual
        stream, timings, the speech frames and the encoder itself.

    Raises
    ------
    verifylib.errors.PrerequisiteBroken
        If the reference model's contract differs from the exported one.
    verifylib.errors.ParametersInvalid
        If the parameters name no fixture.
    """
    from importlib import metadata

    import torch

    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.hf import load_hf_encoder

    src = model_source(ctx)
    # The encoder alone: the decoder would only add memory (issue of large encoders).
    encoder, fe = load_hf_encoder(src["hf_dir"])
    contract = contract_of(encoder)
    exported = ctx.evidence_of(EXPORT_CONTRACT, "contract")
    if exported["contract"] != contract.as_dict():
        raise PrerequisiteBroken("the reference model's contract differs from the exported one: "
                           f"{contract.as_dict()} vs {exported['contract']}")
    fixtures = ctx.params.fixtures
    if not fixtures:
        raise ParametersInvalid("no fixtures in the parameters: parity needs a real log-mel")
    fx = fixtures[0]
    got = fixture_intake(ctx, fx)
    audio = read_wav_16k(got.pcm_path)
    mel = fixture_logmel(fe, audio, contract)
    rnd = random_logmel(contract)
    records = {
        "fixture": {"id": fx.id, "public": fx.public, "audio_sha256": got.source_sha256,
                    "intake": got.to_json(),
                    "samples": int(audio.shape[0]), "shape": list(mel.shape),
                    "logmel_sha256": sha256_bytes(mel.tobytes()),
                    "front_end": f"{type(fe).__name__} (n_mels {fe.feature_size}, hop "
                                 f"{fe.hop_length}), padded to {contract.mel_width} frames"},
        "random": {"seed": RANDOM_SEED, "distribution": "uniform(-1, 1)",
                   "generator": "numpy.random.default_rng", "shape": list(rnd.shape),
                   "logmel_sha256": sha256_bytes(rnd.tobytes())},
    }
    outputs, layers, seconds = {}, {}, {}
    for kind, x in (("fixture", mel), ("random", rnd)):
        outputs[kind], per_block, seconds[kind] = reference_encode(encoder, x)
        if kind == "fixture":  # per-layer drift is measured on the fixture only
            layers[kind] = per_block
        del per_block
    stride = contract.conv1_stride * contract.conv2_stride
    speech = min(contract.max_source_positions,
                 math.ceil(audio.shape[0] / fe.hop_length / stride))
    description = {"implementation": "transformers WhisperEncoder", "dtype": "float32",
                   "attention": encoder.config._attn_implementation, "device": "cpu",
                   "mode": "eval + torch.inference_mode", "torch": torch.__version__,
                   "transformers": metadata.version("transformers"),
                   "model_source_digest": src["source_digest"],
                   "seconds": {k: round(v, 4) for k, v in seconds.items()}}
    return ReferenceRun(contract, {"fixture": mel, "random": rnd}, records, outputs, layers,
                        seconds, speech, description, encoder=encoder)


# ----------------------------------------------------------------------------- candidates

def policy_choice(ctx: StageContext) -> PolicyChoice | None:
    """Return the recorded choice of ``parity.program``'s policy, or None for our own export.

    The suite's own fp32 export from a full-precision model is judged under fp32-v1 as its
    variant says. An encoder audited as given is judged at its declared precision, and any
    encoder measured against a quantized ggml source under that ftype's floor in pair-v1;
    both were decided by stage 02 before anything was measured, and are read back here.

    Parameters
    ----------
    ctx : StageContext
        Stage 04's context.

    Returns
    -------
    PolicyChoice or None
    """
    exported = ctx.evidence_of(EXPORT_CONTRACT, "contract")
    pre = exported.get("prebuilt")
    ftype = source_ftype(ctx)
    if pre is None and ftype is None:
        return None
    choice = choose_parity_policy(pre["precision"] if pre else "fp32", ftype)
    if pre is not None and pre["parity_policy"] != choice.policy_id:
        raise PrerequisiteBroken(f"export.contract chose {pre['parity_policy']}, the recorded "
                                 f"declaration chooses {choice.policy_id}")
    return choice


def measure_program(package: str | os.PathLike[str] | Program, ref: ReferenceRun, *,
                    variant: str | None = None
                    ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, NDArray[Any]],
                               Attribution | None]:
    """Execute a saved package's ML program on both inputs in both compute modes.

    Parameters
    ----------
    package : path-like or Program
        The saved ``.mlpackage``, or a program already read (a given ``.mlmodelc``'s, from
        its ``model.mil``).
    ref : ReferenceRun
        The reference side (:func:`reference_run`).
    variant : str, optional
        ``fp32`` or ``fp16``, recorded in the attribution.

    Returns
    -------
    measurements : list of dict
        ``[{input, execution, metrics, seconds}]`` (the gated one is fixture/float32).
    drift : dict
        SNR per layer, per frame and the error histogram of the fixture input, plus the
        op counts and executor timings.
    arrays : dict
        The float32 outputs (``fixture``, ``random``) and ``layer_frame_snr_db`` (SNR per
        frame at each residual-stream point, float32 execution).
    attribution : Attribution or None
        The op-level attribution on the fixture
        (:func:`verifylib.numerics.drift.attribute`, float32), None when the reference
        model is not at hand.
    """
    from verifylib.numerics.drift import ExecutionWatch, attribute
    from verifylib.numerics.mil_exec import MilExecError, Program, load_program
    from verifylib.numerics.program_map import residual_taps

    program = package if isinstance(package, Program) else load_program(package)

    taps: list[tuple[str, str]]
    tap_error: str | None
    try:
        taps = residual_taps(program)
        tap_error = None
    except MilExecError as exc:
        taps, tap_error = [], str(exc)
    measurements: list[dict[str, Any]] = []
    drift: dict[str, Any] = {"layers": {}, "frames": {}, "histogram": {},
                             "op_counts": program.op_counts, "executor_seconds": {}}
    arrays: dict[str, NDArray[Any]] = {}
    reader = _TapReader(taps, dict(ref.layers["fixture"]))
    fixture_taps = _fixture_taps(reader)
    # The attribution executes the fixture in float32 and in float64 (without the float16
    # rounding, which is the float64 mode itself for a program with no float16 value): those
    # executions are the fixture's measurements, watched as they run, not run again.
    watched: dict[str, tuple[_TapSink, Execution]] = {}
    attribution = None
    if ref.encoder is not None:
        sinks = {mode: _TapSink(reader, mode) for mode in PROGRAM_MODES}
        no_float16 = all(v.dtype != "fp16" for v in program.value_types().values())
        watch = ExecutionWatch(
            taps=frozenset(fixture_taps), on_candidate=sinks[PROGRAM_MODES[0]],
            on_reference=sinks[PROGRAM_MODES[1]] if no_float16 else None)
        attribution = attribute(program, ref.encoder, ref.inputs["fixture"],
                                compute=PROGRAM_MODES[0], variant=variant,
                                fixture=ref.input_records["fixture"]["id"], watch=watch)
        watched[PROGRAM_MODES[0]] = (sinks[PROGRAM_MODES[0]], watch.candidate)
        if no_float16:
            watched[PROGRAM_MODES[1]] = (sinks[PROGRAM_MODES[1]], watch.reference)
    for kind in ("fixture", "random"):
        for mode in PROGRAM_MODES:
            if kind == "fixture" and mode in watched:
                sink, execution = watched[mode]
                measurements.append(_measured(execution, ref, kind, mode, reader, sink,
                                              drift, arrays))
            else:
                measurements.append(_execute_once(program, ref, kind, mode, reader, drift,
                                                  arrays))
    if attribution is not None:
        drift["executor_seconds"]["attribution"] = round(attribution.seconds, 4)
    if tap_error:
        drift["layers_unavailable"] = tap_error
    if taps:
        drift["tap_layouts"] = dict(sorted(reader.layouts.items()))
        drift["unmapped_taps"] = [reader.unmapped[label] for label, _ in taps
                                  if label in reader.unmapped]
    drift["speech_frames"] = ref.speech_frames
    del program
    trim_heap()
    return measurements, drift, arrays, attribution


class _TapReader:
    """A program's residual taps (``(label, value name)``) read as the reference's layers.

    Each tap is read through the layout that maps it onto the reference (upstream's ANE
    program computes (B, C, 1, S)); a tap no known layout maps is recorded in
    ``unmapped``, not compared. ``layouts`` names the layout each mapped tap was read with.
    """

    def __init__(self, taps: list[tuple[str, str]], ref_layers: dict[str, NDArray[Any]]):
        self.taps = taps
        self.ref_layers = ref_layers
        self.label_of = {v: label for label, v in taps}
        self.layouts: dict[str, str] = {}
        self.unmapped: dict[str, dict[str, Any]] = {}

    def read(self, label: str, name: str, value: NDArray[Any]) -> NDArray[Any] | None:
        """Return the tap's value in the reference's layout, or None when none maps it."""
        from verifylib.numerics.layouts import relayout_for, unmapped_record
        reference_shape = tuple(self.ref_layers[label].shape)
        layout = relayout_for(tuple(value.shape), reference_shape)
        if layout is None:
            self.unmapped.setdefault(label, unmapped_record(label, name, tuple(value.shape),
                                                            reference_shape))
            return None
        self.layouts[label] = layout.name
        mapped: NDArray[Any] = layout.apply(value)
        return mapped

    def row(self, label: str, v: str, snr_db: float) -> dict[str, Any]:
        """Return the drift record's row of one tap."""
        row: dict[str, Any] = {"label": label, "value": v, "snr_db": snr_db}
        if label in self.unmapped:
            row["unmapped"] = True
        return row


class _TapSink:
    """Per-layer figures of one execution of the fixture.

    Taken as each residual-stream value is computed, so none of those values is kept
    (issue of large encoders).
    """

    def __init__(self, reader: _TapReader, mode: str):
        self.reader, self.mode = reader, mode
        self.layer_snr: dict[str, float] = {}
        self.layer_frames: dict[str, list[float]] = {}

    def __call__(self, name: str, value: NDArray[Any]) -> None:
        """Take one tap's figures (``value`` is valid during the call only)."""
        reader = self.reader
        label = reader.label_of[name]
        mapped = reader.read(label, name, value)
        if mapped is None:
            return
        self.layer_snr[name] = compare(reader.ref_layers[label], mapped).snr_db
        if self.mode == PROGRAM_MODES[0]:
            self.layer_frames[name] = frame_snr_db(reader.ref_layers[label], mapped)


def _fixture_taps(reader: _TapReader) -> list[str]:
    """Return the values tapped while the fixture executes (the output comes from outputs)."""
    return [v for _, v in reader.taps[:-1]]


def _execute_once(program: Program, ref: ReferenceRun, kind: str, mode: str,
                  reader: _TapReader, drift: dict[str, Any],
                  arrays: dict[str, NDArray[Any]]) -> dict[str, Any]:
    """Execute the program on one input in one compute mode; its measurement record."""
    from verifylib.numerics.mil_exec import execute

    sink = _TapSink(reader, mode)
    run = execute(program, {ref.contract.input_name: ref.inputs[kind]}, compute=mode,
                  taps=_fixture_taps(reader) if kind == "fixture" else (),
                  on_tap=sink)
    return _measured(run, ref, kind, mode, reader, sink, drift, arrays)


def _measured(run: Execution, ref: ReferenceRun, kind: str, mode: str, reader: _TapReader,
              sink: _TapSink, drift: dict[str, Any],
              arrays: dict[str, NDArray[Any]]) -> dict[str, Any]:
    """Return the measurement record of one execution on one input in one compute mode.

    The executor's seconds go into ``drift``, and for the fixture its per-frame SNR,
    histogram and per-layer figures (the taps ``sink`` took); the float32 output goes
    into ``arrays``.
    """
    import numpy as np

    name_out = ref.contract.output_name
    taps, ref_layers = reader.taps, reader.ref_layers
    layer_snr, layer_frames = sink.layer_snr, sink.layer_frames
    out = run.outputs[name_out]
    m = compare(ref.outputs[kind], out)
    out_mapped = reader.read("output", name_out, out) if taps and kind == "fixture" else None
    measurement = Measurement(kind, mode, MeasurementMetrics(**m.as_dict()),
                              round(run.seconds, 4)).to_json()
    drift["executor_seconds"][f"{kind}/{mode}"] = round(run.seconds, 4)
    # A large encoder's freed float64 activations would otherwise stay resident
    # (glibc keeps them in its heap) and add to the next execution's peak.
    trim_heap()
    if mode == PROGRAM_MODES[0]:
        arrays[kind] = np.asarray(out, dtype=np.float32)
    if kind != "fixture":
        return measurement
    drift["frames"][mode] = frame_snr_db(ref.outputs[kind], out)
    drift["histogram"][mode] = error_histogram(ref.outputs[kind], out)
    if taps:
        n_frames = ref_layers["output"].shape[-2]
        drift["layers"][mode] = [
            reader.row(label, v,
                       (compare(ref_layers[label], out_mapped).snr_db
                        if out_mapped is not None else math.nan) if label == "output"
                       else layer_snr.get(v, math.nan))
            for label, v in taps]
        if mode == PROGRAM_MODES[0]:
            arrays["layer_frame_snr_db"] = np.array(
                [(frame_snr_db(ref_layers[label], out_mapped)
                  if out_mapped is not None else [math.nan] * n_frames)
                 if label == "output" else layer_frames.get(v, [math.nan] * n_frames)
                 for label, v in taps], dtype=np.float64)
    return measurement


def measure_runtime(mlmodelc: str | os.PathLike[str], ref: ReferenceRun, *,
                    loader: Callable[..., Any] | None = None
                    ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, NDArray[Any]]]:
    """Predict with ``CompiledMLModel(mlmodelc, ComputeUnit.ALL)`` on both inputs (macOS).

    Parameters
    ----------
    mlmodelc : path-like
        The compiled model.
    ref : ReferenceRun
        The reference side (:func:`reference_run`).
    loader : callable, optional
        Passed to :func:`verifylib.models.coreml_package.load_compiled` (tests pass a fake).

    Returns
    -------
    measurements : list of dict
        As :func:`measure_program`, one per input (execution ``coreml-all``).
    drift : dict
        Per-frame SNR and the error histogram of the fixture, load and predict timings;
        no per-layer figures.
    arrays : dict
        The float32 outputs (``fixture``, ``random``).
    """
    import numpy as np

    from verifylib.models.coreml_package import load_compiled, predict_compiled

    t0 = time.perf_counter()
    model = load_compiled(mlmodelc, loader=loader)
    load_s = time.perf_counter() - t0
    measurements: list[dict[str, Any]] = []
    drift: dict[str, Any] = {"frames": {}, "histogram": {}, "load_seconds": round(load_s, 3),
                             "predict_seconds": {}}
    arrays: dict[str, NDArray[Any]] = {}
    for kind in ("fixture", "random"):
        t0 = time.perf_counter()
        out = predict_compiled(model, ref.inputs[kind], ref.contract)
        secs = time.perf_counter() - t0
        m = compare(ref.outputs[kind], out)
        measurements.append(Measurement(kind, RUNTIME_EXECUTION,
                                        MeasurementMetrics(**m.as_dict()),
                                        round(secs, 4)).to_json())
        drift["predict_seconds"][kind] = round(secs, 4)
        arrays[kind] = np.asarray(out, dtype=np.float32)
        if kind == "fixture":
            drift["frames"][RUNTIME_EXECUTION] = frame_snr_db(ref.outputs[kind], out)
            drift["histogram"][RUNTIME_EXECUTION] = error_histogram(ref.outputs[kind], out)
    drift["speech_frames"] = ref.speech_frames
    drift["layers_unavailable"] = ("the compiled model exposes only its output feature; "
                                   "per-layer drift is measured on the program executor")
    return measurements, drift, arrays


@dataclass
class _Measured:
    """One candidate measured: where it is, its digests, its figures and how it ran.

    ``measured`` is its tree digest now, ``bound`` the one stage 02 bound (under the
    identity key ``ident_key``); ``candidate`` says how it was executed.
    """

    path: Path
    measured: str
    bound: str
    ident_key: str
    candidate: dict[str, Any]
    measurements: list[dict[str, Any]]
    drift: dict[str, Any]
    arrays: dict[str, NDArray[Any]]
    attribution: Attribution | None = None


def _measure_candidate(ctx: StageContext, ref: ReferenceRun, variant: str, kind: str,
                       exported: dict[str, Any],
                       runtime_loader: Callable[..., Any] | None,
                       given: GivenProgram | None = None) -> _Measured:
    """Measure one candidate: the exported program op by op, or a compiled model.

    A given ``.mlmodelc`` whose program was read from its ``model.mil`` (``given``, off
    macOS) is executed op by op as a package's program is; on macOS Core ML runs it.
    """
    if kind == "program" and given is not None and given.program is not None:
        path = ctx.run_dir / exported["path"]
        source = given.source.as_dict() if given.source else None
        with progress.ticking(f"04_parity executing the {variant} compiled program op by op"):
            measurements, drift, arrays, attribution = measure_program(
                given.program, ref, variant=variant)
        return _Measured(path, tree_digest(path), exported["tree_digest"],
                         f"artifact.{variant}.mlmodelc.tree_digest",
                         {"executor": "verifylib.mil_exec (op by op, torch CPU kernels)",
                          "modes": list(PROGRAM_MODES), "op_counts": drift["op_counts"],
                          "program_source": source},
                         measurements, drift, arrays, attribution)
    if kind == "program" and exported["path"].endswith(".mlmodelc"):
        # A .mlmodelc audited as given, on macOS: Core ML itself executes it.
        path = ctx.run_dir / exported["path"]
        measured = tree_digest(path)
        bound = exported["tree_digest"]
        measurements, drift, arrays = measure_runtime(path, ref, loader=runtime_loader)
        return _Measured(path, measured, bound, f"artifact.{variant}.mlmodelc.tree_digest",
                         {"runtime": "coremltools.models.CompiledMLModel",
                          "compute_units": "ALL", "mlmodelc": str(path),
                          "why": "a compiled model audited as given has no readable program"},
                         measurements, drift, arrays)
    if kind == "program":
        path = ctx.run_dir / exported["path"]
        measured = tree_digest(path)
        bound = exported["tree_digest"]
        with progress.ticking(f"04_parity executing the {variant} program op by op"):
            measurements, drift, arrays, attribution = measure_program(
                path, ref, variant=variant)
        return _Measured(path, measured, bound, f"artifact.{variant}.mlpackage.tree_digest",
                         {"executor": "verifylib.mil_exec (op by op, torch CPU kernels)",
                          "modes": list(PROGRAM_MODES), "op_counts": drift["op_counts"]},
                         measurements, drift, arrays, attribution)
    comp = compiled_variant(ctx, variant)
    path = (ctx.run_dir / exported["path"]).with_suffix(".mlmodelc")
    measured = tree_digest(path)
    bound = comp["tree_digest"]
    measurements, drift, arrays = measure_runtime(path, ref, loader=runtime_loader)
    return _Measured(path, measured, bound, f"artifact.{variant}.mlmodelc.tree_digest",
                     {"runtime": "coremltools.models.CompiledMLModel",
                      "compute_units": "ALL", "mlmodelc": comp["placed_path"]},
                     measurements, drift, arrays)


def _identities(policy: Policy, ref: ReferenceRun, choice: PolicyChoice | None,
                got: _Measured) -> dict[str, Any]:
    """Return the identities a parity gate binds (the artifact's only when it is unchanged)."""
    pol = policy.id.split("-")[0]
    ids = {identities.policy_id(pol): policy.id,
           identities.policy_sha256(pol): policy.sha256,
           f"fixture.{ref.input_records['fixture']['id']}.sha256":
               ref.input_records["fixture"]["audio_sha256"],
           identities.MODEL_SOURCE_DIGEST: ref.description["model_source_digest"]}
    if got.measured == got.bound:
        ids[got.ident_key] = got.measured
    if choice is not None:
        ids[identities.ENCODER_PRECISION] = choice.precision
        ids[identities.ENCODER_PARITY_POLICY] = choice.policy_id
        if choice.source_ftype is not None:
            ids[identities.MODEL_GGML_FTYPE] = choice.source_ftype
    return ids


def run(params: Params, run_dir: str | os.PathLike[str], *,
        runtime_loader: Callable[..., Any] | None = None) -> StageReport:
    """Run stage 04_parity for ``params`` inside ``run_dir``.

    Parameters
    ----------
    params : Params
        Validated parameters (``fixtures``, ``export.fp16``).
    run_dir : path-like
        The run directory shared by all stages.
    runtime_loader : callable, optional
        Loader of compiled models for the runtime gates (``CompiledMLModel`` by default).

    Returns
    -------
    StageReport
        ``result`` (:class:`verifylib.evidence.parity.result.ParityResult`) holds, per gate that
        ran, the measurements and drift that :func:`verifylib.views.parity.show` tables
        and plots.
    """
    ctx = StageContext(STAGE, params, run_dir)
    # The reference and its arrays' evidence: computed and written once, cited by every
    # candidate.
    shared: tuple[ReferenceRun, EvidenceRef] | None = None
    for gate_id, variant, kind in CANDIDATES:
        disabled = ("export.fp16" if variant == "fp16"
                    and not params.export.fp16 else None)
        # A given .mlmodelc off macOS: its program is executed from its model.mil, or
        # the gate stays NOT_RUN(platform), saying why it could not be read.
        given = given_program(ctx) if gate_id == PARITY_PROGRAM else None
        g = ctx.begin(gate_id, disabled_by=disabled,
                      program_from_text=given is not None and given.program is not None,
                      platform_note=given.why_not if given is not None else None)
        if not g:
            continue
        with g:
            choice = policy_choice(ctx) if variant == "fp32" else None
            policy = load_policy(choice.policy_id if choice else POLICY_OF_VARIANT[variant])
            # The policy is bound to the run before anything is measured.
            short = gate_id.split(".", 1)[1]
            refs = [ctx.write_json(f"policy_{short}", policy_record(policy))]
            exported = exported_variant(ctx, variant)
            if shared is None:
                ref = reference_run(ctx)
                shared = ref, ctx.write_bytes(
                    REFERENCE_ARRAYS, encode_arrays({k: ref.outputs[k]
                                                     for k in ("fixture", "random")}),
                    "reference-outputs.npz")
            ref, ref_outputs = shared
            got = _measure_candidate(ctx, ref, variant, kind, exported, runtime_loader, given)
            path, measured, bound = got.path, got.measured, got.bound
            rel = path.relative_to(ctx.run_dir).as_posix() if path.is_relative_to(ctx.run_dir) \
                else str(path)
            record = ParityEvidence(
                policy=PolicyRecord(**policy_record(policy)), variant=variant, kind=kind,
                artifact=Artifact(tree_digest=measured, exported_tree_digest=bound, path=rel),
                measurements=tuple(Measurement.from_json(m, f"measurements[{i}]")
                                   for i, m in enumerate(got.measurements)),
                candidate=got.candidate, reference=ref.description,
                inputs=ref.input_records,
                choice=PolicyChoiceRecord(choice.precision, choice.source_ftype,
                                          choice.policy_id, choice.why) if choice else None,
            ).to_json()
            refs.append(ctx.write_json("parity", record, f"{short}.json"))
            refs.append(ctx.write_json("drift", got.drift, f"{short}-drift.json"))
            refs.append(ref_outputs)
            refs.append(ctx.write_bytes(CANDIDATE_ARRAYS, encode_arrays(got.arrays),
                                        f"{short}-outputs.npz"))
            if got.attribution is not None:
                refs.append(ctx.write_json(ATTRIBUTION, got.attribution.as_dict(),
                                           f"{short}-attribution.json"))
            ids = _identities(policy, ref, choice, got)
            g.judge(refs, ids)
    # The result is read back from the evidence just written, through the same function
    # open_run uses, so what the notebook shows is what a published run will show.
    ctx.result = parity_result_from_evidence(ctx.run_dir, ctx.records)
    return ctx.finish()
