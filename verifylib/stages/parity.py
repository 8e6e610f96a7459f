"""Stage 04_parity: the Hugging Face encoder against each Core ML candidate.

The same real log-mel (the first fixture through the model's Whisper feature extractor,
padded to the contract width) goes to the reference and to every candidate; a seeded
random log-mel is reported beside it, never instead of it. The reference is the Hugging
Face encoder in float32, eval mode, eager attention, on CPU, under inference mode.

- ``parity.program`` (any OS): the saved ``fp32/ggml-model-encoder.mlpackage``'s ML program
  executed op by op by :mod:`verifylib.mil_exec`, gated on float32 execution with float64
  shown beside it, under policy fp32-v1. This measures what the *conversion* did.
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

import html
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..audio import audio_sha256, read_wav_16k
from ..canonical import sha256_bytes, tree_digest
from ..params import Params
from ..parity import (POLICY_OF_VARIANT, compare, error_histogram, frame_snr_db, policy_record, snr_series)
from ..scoring import load_policy
from ..stage import StageContext, StageReport

STAGE = "04_parity"
RANDOM_SEED = 20261130
"""Seed of the random log-mel reported beside the fixture's (uniform in [-1, 1])."""

CANDIDATES = (("parity.program", "fp32", "program"), ("parity.runtime", "fp32", "runtime"),
              ("parity.program_fp16", "fp16", "program"),
              ("parity.runtime_fp16", "fp16", "runtime"))
"""(gate, variant, kind) in the order the stage measures them."""

PROGRAM_MODES = ("float32", "float64")
RUNTIME_EXECUTION = "coreml-all"




# ----------------------------------------------------------------------------- reference

@dataclass
class ReferenceRun:
    """The reference side, computed once per stage and shared by every candidate.

    Attributes
    ----------
    contract : EncoderContract
        Derived from the reference model.
    inputs : dict
        ``"fixture"`` and ``"random"`` log-mels, float32 of the contract's input shape.
    input_records : dict
        What the evidence says about each input (digests, seed, shapes).
    outputs : dict
        Input kind -> reference encoder output (float32 numpy).
    layers : dict
        Input kind -> list of (label, activation) along the residual stream.
    seconds : dict
        Input kind -> HF encoder wall time.
    speech_frames : int
        Encoder output frames covered by the fixture's audio (the rest is padding).
    """

    contract: Any
    inputs: dict
    input_records: dict
    outputs: dict
    layers: dict
    seconds: dict
    speech_frames: int
    description: dict = field(default_factory=dict)


def fixture_logmel(bundle, audio: np.ndarray, contract) -> np.ndarray:
    """The model's Whisper log-mel of ``audio``, padded to the contract's mel width.

    Raises
    ------
    ValueError
        If the audio is longer than the contract's window (it would be cut silently) or the
        features do not have the contract's input shape.
    """
    fe = bundle.feature_extractor
    n = contract.mel_width * fe.hop_length
    if audio.shape[0] > n:
        raise ValueError(f"fixture audio has {audio.shape[0]} samples; the encoder window "
                         f"holds {n}")
    mel = fe(audio, sampling_rate=fe.sampling_rate, padding="max_length", max_length=n,
             truncation=True, return_tensors="np").input_features.astype(np.float32)
    if tuple(mel.shape) != contract.input_shape:
        raise ValueError(f"feature extractor gave {mel.shape}, the contract is "
                         f"{contract.input_shape}")
    return mel


def random_logmel(contract, seed: int = RANDOM_SEED) -> np.ndarray:
    """A seeded random log-mel of the contract's input shape (uniform in [-1, 1])."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=contract.input_shape).astype(np.float32)


def reference_encode(encoder, mel: np.ndarray) -> tuple[np.ndarray, list, float]:
    """Run the HF encoder (inference mode) and collect the residual stream per block.

    Returns
    -------
    (output, layers, seconds)
        ``layers`` is ``[("embeddings", a), ("block 0", a), …, ("output", a)]``: the input
        of block 0, each block's output, and the final (layer-normed) output.
    """
    import torch
    seen: dict[str, np.ndarray] = {}
    hooks = []
    blocks = list(encoder.layers)

    def pre0(_mod, args, kwargs=None):
        x = args[0] if args else kwargs["hidden_states"]
        seen["embeddings"] = x.detach().numpy().copy()

    def post(i):
        def fn(_mod, _args, out):
            t = out[0] if isinstance(out, (tuple, list)) else out
            seen[f"block {i}"] = t.detach().numpy().copy()
        return fn

    hooks.append(blocks[0].register_forward_pre_hook(pre0, with_kwargs=True))
    for i, b in enumerate(blocks):
        hooks.append(b.register_forward_hook(post(i)))
    try:
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = encoder(torch.from_numpy(mel)).last_hidden_state
            secs = time.perf_counter() - t0
    finally:
        for h in hooks:
            h.remove()
    out = out.detach().numpy().copy()
    layers = [("embeddings", seen["embeddings"])]
    layers += [(f"block {i}", seen[f"block {i}"]) for i in range(len(blocks))]
    layers.append(("output", out))
    return out, layers, secs


def reference_run(ctx: StageContext) -> ReferenceRun:
    """Load the reference model and encode the fixture and the random log-mel."""
    from importlib import metadata

    import torch

    from ..coreml_export import contract_of
    from ..model import load_hf
    from .export import model_source
    from .wer import fixture_audio

    src = model_source(ctx)
    bundle = load_hf(src["hf_dir"])
    encoder = bundle.model.get_encoder()
    contract = contract_of(encoder)
    exported = ctx.evidence_of("export.contract", "contract")
    if exported["contract"] != contract.as_dict():
        raise RuntimeError("the reference model's contract differs from the exported one: "
                           f"{contract.as_dict()} vs {exported['contract']}")
    fixtures = ctx.params["fixtures"]
    if not fixtures:
        raise ValueError("no fixtures in the parameters: parity needs a real log-mel")
    fx = fixtures[0]
    path = fixture_audio(ctx, fx)
    audio = read_wav_16k(path)
    mel = fixture_logmel(bundle, audio, contract)
    rnd = random_logmel(contract)
    fe = bundle.feature_extractor
    records = {
        "fixture": {"id": fx["id"], "public": fx["public"], "audio_sha256": audio_sha256(path),
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
        outputs[kind], layers[kind], seconds[kind] = reference_encode(encoder, x)
    stride = contract.conv1_stride * contract.conv2_stride
    speech = min(contract.max_source_positions,
                 math.ceil(audio.shape[0] / fe.hop_length / stride))
    description = {"implementation": "transformers WhisperEncoder", "dtype": "float32",
                   "attention": bundle.model.config._attn_implementation, "device": "cpu",
                   "mode": "eval + torch.inference_mode", "torch": torch.__version__,
                   "transformers": metadata.version("transformers"),
                   "model_source_digest": src["source_digest"],
                   "seconds": {k: round(v, 4) for k, v in seconds.items()}}
    return ReferenceRun(contract, {"fixture": mel, "random": rnd}, records, outputs, layers,
                        seconds, speech, description)


# ----------------------------------------------------------------------------- candidates

def measure_program(package: str | os.PathLike, ref: ReferenceRun) -> tuple[dict, dict]:
    """Execute a saved package's ML program on both inputs in both compute modes.

    Returns
    -------
    (measurements, drift)
        ``measurements``: ``[{input, execution, metrics, seconds}]`` (the gated one is
        fixture/float32); ``drift``: SNR per layer, per frame and the error histogram of
        the fixture input, plus the op counts and executor timings.
    """
    from ..mil_exec import MilExecError, execute, load_program, residual_taps

    program = load_program(package)
    name_in, name_out = ref.contract.input_name, ref.contract.output_name
    try:
        taps = residual_taps(program)
        tap_error = None
    except MilExecError as exc:
        taps, tap_error = [], str(exc)
    measurements, drift = [], {"layers": {}, "frames": {}, "histogram": {},
                               "op_counts": program.op_counts, "executor_seconds": {}}
    for kind in ("fixture", "random"):
        for mode in PROGRAM_MODES:
            run = execute(program, {name_in: ref.inputs[kind]}, compute=mode,
                          taps=[v for _, v in taps[:-1]] if kind == "fixture" else ())
            out = run.outputs[name_out]
            m = compare(ref.outputs[kind], out)
            measurements.append({"input": kind, "execution": mode, "metrics": m.as_dict(),
                                 "seconds": round(run.seconds, 4)})
            drift["executor_seconds"][f"{kind}/{mode}"] = round(run.seconds, 4)
            if kind != "fixture":
                continue
            drift["frames"][mode] = frame_snr_db(ref.outputs[kind], out)
            drift["histogram"][mode] = error_histogram(ref.outputs[kind], out)
            if taps:
                ref_layers = dict(ref.layers[kind])
                drift["layers"][mode] = [
                    {"label": label, "value": v,
                     "snr_db": compare(ref_layers[label],
                                       out if label == "output" else run.taps[v]).snr_db}
                    for label, v in taps]
    if tap_error:
        drift["layers_unavailable"] = tap_error
    drift["speech_frames"] = ref.speech_frames
    return measurements, drift


def measure_runtime(mlmodelc: str | os.PathLike, ref: ReferenceRun, *,
                    loader=None) -> tuple[dict, dict]:
    """Predict with ``CompiledMLModel(mlmodelc, ComputeUnit.ALL)`` on both inputs (macOS)."""
    from ..coreml_export import load_compiled, predict_compiled

    t0 = time.perf_counter()
    model = load_compiled(mlmodelc, loader=loader)
    load_s = time.perf_counter() - t0
    measurements, drift = [], {"frames": {}, "histogram": {}, "load_seconds": round(load_s, 3),
                               "predict_seconds": {}}
    for kind in ("fixture", "random"):
        t0 = time.perf_counter()
        out = predict_compiled(model, ref.inputs[kind], ref.contract)
        secs = time.perf_counter() - t0
        m = compare(ref.outputs[kind], out)
        measurements.append({"input": kind, "execution": RUNTIME_EXECUTION,
                             "metrics": m.as_dict(), "seconds": round(secs, 4)})
        drift["predict_seconds"][kind] = round(secs, 4)
        if kind == "fixture":
            drift["frames"][RUNTIME_EXECUTION] = frame_snr_db(ref.outputs[kind], out)
            drift["histogram"][RUNTIME_EXECUTION] = error_histogram(ref.outputs[kind], out)
    drift["speech_frames"] = ref.speech_frames
    drift["layers_unavailable"] = ("the compiled model exposes only its output feature; "
                                   "per-layer drift is measured on the program executor")
    return measurements, drift


def _exported_variant(ctx: StageContext, variant: str) -> dict:
    exported = ctx.evidence_of("export.contract", "contract")
    for v in exported["variants"]:
        if v["precision"] == variant:
            if not v["placed"]:
                raise RuntimeError(f"the {variant} package was not placed by export.contract")
            return v
    raise RuntimeError(f"export.contract exported no {variant} variant (parameter "
                       f"export.fp16 differs between the stages?)")


def _compiled_variant(ctx: StageContext, variant: str) -> dict:
    compiled = ctx.evidence_of("export.compile", "compile")
    for v in compiled["variants"]:
        if v["precision"] == variant:
            return v
    raise RuntimeError(f"export.compile compiled no {variant} variant")


def run(params: Params, run_dir: str | os.PathLike, *, runtime_loader=None) -> StageReport:
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
        ``facts["candidates"]`` holds, per gate that ran, the measurements and drift that
        :func:`show` tables and plots.
    """
    ctx = StageContext(STAGE, params, run_dir)
    ref: ReferenceRun | None = None
    ctx.facts["candidates"] = {}
    for gate_id, variant, kind in CANDIDATES:
        disabled = ("export.fp16" if variant == "fp16"
                    and not params["export"].get("fp16", True) else None)
        g = ctx.begin(gate_id, disabled_by=disabled)
        if not g:
            continue
        with g:
            policy = load_policy(POLICY_OF_VARIANT[variant])
            # The policy is bound to the run before anything is measured.
            short = gate_id.split(".", 1)[1]
            refs = [ctx.write_json(f"policy_{short}", policy_record(policy))]
            exported = _exported_variant(ctx, variant)
            if ref is None:
                ref = reference_run(ctx)
            if kind == "program":
                path = ctx.run_dir / exported["path"]
                measured = tree_digest(path)
                bound = exported["tree_digest"]
                measurements, drift = measure_program(path, ref)
                ident_key = f"artifact.{variant}.mlpackage.tree_digest"
                candidate = {"executor": "verifylib.mil_exec (op by op, torch CPU kernels)",
                             "modes": list(PROGRAM_MODES), "op_counts": drift["op_counts"]}
            else:
                comp = _compiled_variant(ctx, variant)
                path = (ctx.run_dir / exported["path"]).with_suffix(".mlmodelc")
                measured = tree_digest(path)
                bound = comp["tree_digest"]
                measurements, drift = measure_runtime(path, ref, loader=runtime_loader)
                ident_key = f"artifact.{variant}.mlmodelc.tree_digest"
                candidate = {"runtime": "coremltools.models.CompiledMLModel",
                             "compute_units": "ALL", "mlmodelc": comp["placed_path"]}
            rel = path.relative_to(ctx.run_dir).as_posix() if path.is_relative_to(ctx.run_dir) \
                else str(path)
            record = {"policy": policy_record(policy), "variant": variant, "kind": kind,
                      "candidate": candidate, "reference": ref.description,
                      "artifact": {"path": rel, "tree_digest": measured,
                                   "exported_tree_digest": bound},
                      "inputs": ref.input_records, "measurements": measurements}
            refs.append(ctx.write_json("parity", record, f"{short}.json"))
            refs.append(ctx.write_json("drift", drift, f"{short}-drift.json"))
            pol = POLICY_OF_VARIANT[variant].split("-")[0]
            ids = {f"policy.{pol}.id": policy.id, f"policy.{pol}.sha256": policy.sha256,
                   f"fixture.{ref.input_records['fixture']['id']}.sha256":
                       ref.input_records["fixture"]["audio_sha256"],
                   "model.source_digest": ref.description["model_source_digest"]}
            if measured == bound:
                ids[ident_key] = measured
            rec = g.judge(refs, ids)
            ctx.facts["candidates"][gate_id] = {
                "variant": variant, "kind": kind, "status": rec.status.value,
                "detail": rec.reason.detail, "measurements": measurements, "drift": drift,
                "policy": policy.rules, "reference_seconds": dict(ref.seconds)}
    if ref is not None:
        ctx.facts["reference"] = ref.description
        ctx.facts["inputs"] = ref.input_records
    return ctx.finish()


# ----------------------------------------------------------------------------- display

def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isinf(v) or math.isnan(v):
            return str(v)
        return f"{v:.6g}"
    return str(v)


def show(report: StageReport):
    """Show the policies, every measurement (escaped tables) and the drift plots:
    error histogram, SNR along time frames, SNR per layer."""
    from IPython.display import HTML, display
    cands = report.facts.get("candidates") or {}
    if not cands:
        return HTML("<p>No parity measurement: the parity gates did not run (see the table "
                    "above).</p>")
    e = html.escape
    parts = []
    pols = {}
    for c in cands.values():
        pols[c["policy"]["id"]] = c["policy"]
    for pid, p in sorted(pols.items()):
        parts.append(f"<p><b>Policy {e(pid)}</b> ({e(p['variant'])}): SNR &ge; "
                     f"{e(_fmt(p['pass']['snr_db_min']))} dB AND cosine &ge; "
                     f"{e(_fmt(p['pass']['cosine_min']))}; reference = signal, float64, no "
                     f"epsilon floor; gated input {e(p['gated']['input'])}.</p>")
    ref = report.facts.get("reference", {})
    inputs = report.facts.get("inputs", {})
    if ref:
        parts.append(f"<p>Reference: {e(ref['implementation'])}, {e(ref['dtype'])}, "
                     f"{e(str(ref['attention']))} attention, {e(ref['device'])}, "
                     f"{e(ref['mode'])} (torch {e(ref['torch'])}, transformers "
                     f"{e(ref['transformers'])}). Inputs: fixture "
                     f"<code>{e(str(inputs.get('fixture', {}).get('id')))}</code> "
                     f"({e(str(inputs.get('fixture', {}).get('front_end')))}); random "
                     f"log-mel seed {e(str(inputs.get('random', {}).get('seed')))}.</p>")
    rows = []
    for gid, c in cands.items():
        for m in c["measurements"]:
            met = m["metrics"]
            rows.append(
                f"<tr><td><code>{e(gid)}</code></td><td>{e(c['variant'])}</td>"
                f"<td>{e(m['input'])}</td><td>{e(m['execution'])}</td>"
                f"<td>{e(_fmt(met['snr_db']))}</td><td>{e(_fmt(met['cosine']))}</td>"
                f"<td>{e(_fmt(met['max_abs_error']))}</td>"
                f"<td>{e(_fmt(met['mean_abs_error']))}</td><td>{e(_fmt(m['seconds']))}</td></tr>")
    hf = next(iter(cands.values()))["reference_seconds"]
    parts.append(
        "<h4>Measurements (SNR in dB, reference as signal, float64)</h4><table class='vl'>"
        "<tr><th>gate</th><th>variant</th><th>input</th><th>execution</th><th>SNR dB</th>"
        "<th>cosine</th><th>max |err|</th><th>mean |err|</th><th>candidate s</th></tr>"
        + "".join(rows) + "</table>"
        f"<p>HF reference encoder: {e(_fmt(hf.get('fixture')))} s (fixture), "
        f"{e(_fmt(hf.get('random')))} s (random). Gated rows: fixture / float32 (program) and "
        f"fixture / coreml-all (runtime); the others are shown beside them.</p>")
    for gid, c in cands.items():
        parts.append(f"<p><code>{e(gid)}</code> <b>{e(c['status'])}</b>: "
                     f"{e(c['detail'])}</p>")
    display(HTML("".join(parts)))
    _plots(cands)
    return None


SNR_CAP_DB = 160.0
"""Where an exact (infinite-SNR) point is drawn; labelled as such in the legend."""


def _capped(values) -> tuple[np.ndarray, bool]:
    snr = np.asarray(snr_series(values), dtype=float)
    exact = bool(np.isposinf(snr).any())
    return np.where(np.isposinf(snr), SNR_CAP_DB, snr), exact


def _plots(cands: dict) -> None:
    import matplotlib.pyplot as plt

    series = []  # (label, drift, mode)
    for c in cands.values():
        for mode in c["drift"].get("frames", {}):
            series.append((f"{c['variant']} {c['kind']} {mode}", c["drift"], mode))
    if not series:
        return
    colors = {label: f"C{i}" for i, (label, _, _) in enumerate(series)}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))

    ax = axes[0]
    for label, d, mode in series:
        h = d["histogram"][mode]
        edges = np.asarray(h["edges"])
        counts = np.asarray(h["counts"], dtype=float)
        n = counts.sum() + h["zeros"]
        tag = f"{label} ({100 * h['zeros'] / n:.0f}% exactly 0)" if n else label
        if counts.sum():
            ax.stairs(counts, edges, color=colors[label], label=tag)
        else:
            ax.plot([], [], color=colors[label], label=tag)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("|candidate - reference| (fixture input)")
    ax.set_ylabel("elements")
    ax.set_title("Error histogram")
    ax.legend(fontsize=7, loc="upper left")

    ax = axes[1]
    speech = None
    for label, d, mode in series:
        snr, exact = _capped(d["frames"][mode])
        ax.plot(np.arange(len(snr)), snr, lw=0.8, color=colors[label],
                label=label + (f" (inf drawn at {SNR_CAP_DB:g})" if exact else ""))
        speech = d.get("speech_frames", speech)
    if speech:
        ax.axvline(speech, color="gray", ls="--", lw=0.8)
        ax.annotate("end of audio", (speech, 0.02), xycoords=("data", "axes fraction"),
                    fontsize=7)
    ax.set_xlabel("encoder output frame")
    ax.set_ylabel("SNR dB")
    ax.set_title("SNR along time frames (fixture)")
    ax.legend(fontsize=7, loc="center right")

    ax = axes[2]
    plotted = False
    for c in cands.values():
        for mode, rows in c["drift"].get("layers", {}).items():
            label = f"{c['variant']} {c['kind']} {mode}"
            names = [r["label"] for r in rows]
            snr, exact = _capped([r["snr_db"] for r in rows])
            ax.plot(range(len(rows)), snr, marker="o", color=colors.get(label),
                    label=label + (f" (inf drawn at {SNR_CAP_DB:g})" if exact else ""))
            ax.set_xticks(range(len(rows)), names, rotation=30, ha="right", fontsize=7)
            plotted = True
    if plotted:
        ax.set_ylabel("SNR dB")
        ax.set_title("SNR per layer (program executor vs HF)")
        ax.legend(fontsize=7, loc="best")
    else:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no per-layer drift available", ha="center")
    fig.tight_layout()
    plt.show()
