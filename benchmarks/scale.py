"""Benchmark: time and peak memory of stages 02 and 04 for every Whisper encoder size.

For one shape (``tiny``, ``base``, ``small``, ``medium``, ``large-v3``,
``large-v3-turbo``) it builds a seeded random ``WhisperForConditionalGeneration`` of the
published configuration, saves it as a Hugging Face folder (with the default model's
``tiny.en`` tokenizer, and its feature extractor, or a 128-mel one for the large-v3
shapes), and runs the real stage entry points on it:

- ``02_export``: :func:`verifylib.stages.export.run` (the ``export.contract`` gate traces
  the encoder, converts it to the fp32 and fp16 ML programs, saves, reads back, checks and
  places both packages). ``export.ggml_model`` needs stage 01's whisper.cpp build and ends
  NOT_RUN here, so by default the step first writes ``fp32/ggml-model.bin`` with the same
  writer (:func:`verifylib.models.ggml_writer.write_ggml_model`) in the same process, as the
  stage would (``--no-ggml`` skips it);
- ``export_pair``: what ``export.pair`` measures, the fp32 program against the reference
  encoder (:func:`verifylib.numerics.pair.measure_pair`, float32, per-block taps; the
  random log-mel). The intake of a ggml file of each shape is measured by
  ``benchmarks/ggml_intake.py``;
- ``04_parity``: :func:`verifylib.stages.parity.run`: the reference encodings of the first
  fixture's log-mel and the seeded random log-mel, then ``measure_program`` on both
  packages (both inputs, float32 and float64, per-layer taps, op-level attribution); the
  Core ML runtime gates are NOT_RUN off macOS.

Each step runs in its own fresh Python process, as each stage runs in its own notebook
kernel in an audit, so its peak resident set is its own: the parent reads it from
``os.wait4``'s resource usage (``ru_maxrss``). Per step it prints one JSON line:
``shape``, ``stage``, ``seconds`` (the stage call, measured inside the child),
``peak_rss_bytes``, ``parameters`` (encoder parameters), ``bytes_per_parameter``, plus
the process wall time and the gate statuses. ``build`` (making the random model) is
reported too but is not part of an audit.

``--trace-memory`` also prints, per step, where the resident set went: a sampler thread
reads ``VmRSS`` every 50 ms while the stage's main functions are wrapped, and each
function's call shows its RSS before and after and the peak during it.

Usage::

    .venv/bin/python benchmarks/scale.py SHAPE [--keep DIR] [--trace-memory] [--no-ggml]
    .venv/bin/python benchmarks/scale.py --all [--shapes S,S] [--keep DIR]
    .venv/bin/python benchmarks/scale.py --table OLD.jsonl ...

``--all`` runs every shape (or those of ``--shapes``), smallest first, then prints the
table and least-squares fits of how peak memory (``bytes = a * params + b``) and time
(``seconds = c * params ** k``) grow with the encoder's parameter count; ``--table``
prints the same from JSON lines saved earlier. ``--keep DIR`` keeps each shape's model,
run directory and logs in ``DIR/<shape>/`` (and reuses a model built there before with
the same shape, seed and checkpoint dtype); without it everything goes to a temporary
folder that is removed. ``--steps`` runs a subset (``04_parity`` alone re-measures the
packages a kept ``02_export`` placed). ``--checkpoint-dtype float16`` saves the random
model as float16, as most hub checkpoints are, so loading widens it. The host is shared:
a step whose resident set passes ``--max-rss-gib`` (default 80% of the memory available
when it starts) is killed and reported with the calls it was in.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEED = 20260513
"""Seed of the random model's initialization (``torch.manual_seed``)."""

MAX_SOURCE_POSITIONS = 1500
MAX_TARGET_POSITIONS = 448
GIB = 1024 ** 3


@dataclass(frozen=True)
class Shape:
    """The size fields of a published Whisper configuration.

    Attributes
    ----------
    d_model : int
        Width of both stacks.
    encoder_layers, decoder_layers : int
        Blocks per stack.
    attention_heads : int
        Heads in every attention (encoder and decoder alike in every published model).
    num_mel_bins : int
        Log-mel channels of the input (80, or 128 from large-v3 on).
    vocab_size : int
        Token embeddings of the decoder.
    """

    d_model: int
    encoder_layers: int
    decoder_layers: int
    attention_heads: int
    num_mel_bins: int
    vocab_size: int

    @property
    def ffn_dim(self) -> int:
        """Feed-forward width: 4 x d_model in every Whisper model (whisper.cpp relies on it)."""
        return 4 * self.d_model

    def config_fields(self) -> dict:
        """The ``WhisperConfig`` keys this shape sets."""
        return {"d_model": self.d_model, "encoder_layers": self.encoder_layers,
                "decoder_layers": self.decoder_layers,
                "encoder_attention_heads": self.attention_heads,
                "decoder_attention_heads": self.attention_heads,
                "encoder_ffn_dim": self.ffn_dim, "decoder_ffn_dim": self.ffn_dim,
                "num_mel_bins": self.num_mel_bins, "vocab_size": self.vocab_size,
                "max_source_positions": MAX_SOURCE_POSITIONS,
                "max_target_positions": MAX_TARGET_POSITIONS}


SHAPES: dict[str, Shape] = {
    "tiny": Shape(384, 4, 4, 6, 80, 51865),
    "base": Shape(512, 6, 6, 8, 80, 51865),
    "small": Shape(768, 12, 12, 12, 80, 51865),
    "medium": Shape(1024, 24, 24, 16, 80, 51865),
    "large-v3": Shape(1280, 32, 32, 20, 128, 51866),
    # Same encoder as large-v3; only the decoder was cut to 4 blocks.
    "large-v3-turbo": Shape(1280, 32, 4, 20, 128, 51866),
}
"""The published ``openai/whisper-*`` sizes (multilingual vocabularies)."""

STEPS = ("build", "02_export", "export_pair", "04_parity")


def encoder_parameters(shape: Shape) -> int:
    """Parameters of the Hugging Face ``WhisperEncoder`` of ``shape``, in closed form.

    Two convolutions (kernel 3), the positional table (``max_source_positions x d``), per
    block 12 d^2 + 12 d (q, k, v, out projections with no key bias, two layer norms, the
    4 d feed-forward) and the final layer norm. Lets the parent report bytes per parameter
    without loading torch, and the test check the builder against it.
    """
    d, m = shape.d_model, shape.num_mel_bins
    conv = (m * d * 3 + d) + (d * d * 3 + d)
    block = 12 * d * d + 12 * d
    return conv + MAX_SOURCE_POSITIONS * d + shape.encoder_layers * block + 2 * d


# ----------------------------------------------------------------------------- model

def default_model_dir() -> Path:
    """The default model's (``tiny.en``) Hugging Face folder, from the verifylib cache."""
    import yaml

    from verifylib import resources
    from verifylib.resources import cache_dir
    from verifylib.models.intake import obtain_model

    spec = yaml.safe_load(resources.default_parameters().read_text())["model"]
    return obtain_model(spec, cache_dir(), log=lambda s: None).hf_dir


def whisper_config(shape: Shape, template: Path):
    """A ``WhisperConfig`` of ``shape`` on top of ``tiny.en``'s (token ids, activation …).

    The template keeps the special token ids consistent with the ``tiny.en`` tokenizer
    saved beside the model.
    """
    from transformers import WhisperConfig

    data = json.loads((template / "config.json").read_text(encoding="utf-8"))
    for k in ("architectures", "transformers_version", "dtype", "torch_dtype"):
        data.pop(k, None)
    data.update(shape.config_fields())
    return WhisperConfig.from_dict(data)


RECIPE = 2
"""Version of :func:`build_model`'s recipe; a kept model of another recipe is rebuilt."""


def build_model(shape: Shape, template: Path, seed: int = SEED):
    """A seeded random ``WhisperForConditionalGeneration`` of ``shape`` (float32, eval).

    The same seed gives the same weights: the initialization draws from torch's global
    generator only. Every layer norm's gamma and beta and every bias is then moved off
    its initial value (gamma 1 + N(0, 0.02), the others N(0, 0.02)), as training leaves
    them: freshly initialized, they are identical across layers, coremltools merges
    identical constants into one, and the program would then not be shaped like a real
    model's (each op reading its own weights; attribution mapping each to its module).
    """
    import torch
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(whisper_config(shape, template)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                param.add_(torch.randn_like(param), alpha=0.02)
            elif name.endswith(".bias"):
                param.normal_(0.0, 0.02)
    return model


def save_model_folder(model, shape: Shape, template: Path, dest: Path, dtype: str) -> None:
    """Save ``model`` as a Hugging Face folder verifylib takes in (kind ``hf-dir``).

    The tokenizer files are ``tiny.en``'s; the feature extractor too when the mel count
    matches, else a ``WhisperFeatureExtractor`` with that many mels (its other settings
    are Whisper's defaults, the ones ``tiny.en`` uses).
    """
    import torch
    from transformers import WhisperFeatureExtractor

    if dtype == "float16":
        model = model.to(torch.float16)
    model.save_pretrained(dest)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                 "special_tokens_map.json", "added_tokens.json", "normalizer.json"):
        if (template / name).is_file():
            shutil.copyfile(template / name, dest / name)
    fe = WhisperFeatureExtractor.from_pretrained(template, local_files_only=True)
    if fe.feature_size != shape.num_mel_bins:
        fe = WhisperFeatureExtractor(feature_size=shape.num_mel_bins)
    fe.save_pretrained(dest)


def bench_params(shape_name: str, hf_dir: Path):
    """Validated parameters auditing ``hf_dir``: the default file with the model replaced.

    The first fixture is the shipped ``numbers.wav`` (a local file: ``jfk.wav`` would need
    stage 01's source tree), so stage 04's reference log-mel is a real recording.
    """
    import yaml

    from verifylib import resources
    from verifylib.params import validate

    path = resources.default_parameters()
    data = yaml.safe_load(path.read_text())
    data["name"] = f"scale-{shape_name}"
    data["model"] = {"kind": "hf-dir", "path": str(hf_dir), "language": "en"}
    data["fixtures"] = [fx for fx in data["fixtures"] if fx["id"] == "numbers"]
    data["export"] = {"fp16": True}
    return validate(data, f"benchmarks/scale.py ({shape_name})", path.resolve().parent)


# ----------------------------------------------------------------------------- memory trace

PROC = Path("/proc")
"""Linux's process file system. macOS has none: psutil (an ipykernel dependency, so
installed with verifylib) or the kernel's resource usage stand in there."""


def maxrss_bytes(ru_maxrss: int, system: str | None = None) -> int:
    """``ru_maxrss`` in bytes: Linux reports kibibytes, macOS (``Darwin``) bytes already."""
    return ru_maxrss if (system or platform.system()) == "Darwin" else ru_maxrss * 1024


def _rss_bytes(field: str = "VmRSS", pid: int | str = "self") -> int | None:
    """A process's memory in bytes (0 once the process is gone; None: not known here).

    ``field`` of ``/proc/<pid>/status`` where there is a /proc. Elsewhere only the
    resident set (``VmRSS``) is known: from psutil, else, for this process alone, its
    peak (``ru_maxrss``), an upper bound.
    """
    if PROC.is_dir():
        try:
            with open(PROC / str(pid) / "status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0
    if field != "VmRSS":
        return None  # RssAnon and the other fields are Linux's own
    try:
        import psutil
    except ImportError:
        if pid != "self":
            return None
        import resource
        return maxrss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    try:
        return psutil.Process(None if pid == "self" else int(pid)).memory_info().rss
    except psutil.Error:
        return 0


def _available_bytes() -> int:
    """Memory available to a new process: ``MemAvailable``, psutil's, else all of RAM."""
    if (PROC / "meminfo").is_file():
        with open(PROC / "meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except ImportError:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class MemoryTrace:
    """RSS before, after and at peak during each call of the wrapped functions.

    A daemon thread samples ``VmRSS`` every ``interval`` seconds and raises the peak of
    every call in progress (calls nest: a step's peak covers its inner calls). The wrappers
    keep no reference to arguments or results, so they do not change what is freed when.
    """

    def __init__(self, interval: float = 0.05, progress: Path | None = None):
        self.interval = interval
        self.progress = progress
        self.open: list[dict] = []
        self.done: list[dict] = []
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._seq = 0
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        last = 0.0
        while True:
            rss = _rss_bytes() or 0
            with self._lock:
                for rec in self.open:
                    rec["peak"] = max(rec["peak"], rss)
                snapshot = [dict(r) for r in self.done + self.open]
            if self.progress is not None and time.perf_counter() - last > 1.0:
                # Written as it goes, so a step stopped for its memory still shows where
                # the memory went (the calls in progress have no "seconds" yet).
                tmp = self.progress.with_suffix(".tmp")
                tmp.write_text(json.dumps(sorted(snapshot, key=lambda r: r["seq"])))
                os.replace(tmp, self.progress)
                last = time.perf_counter()
            time.sleep(self.interval)

    def wrap(self, module, name: str, label: str | None = None) -> None:
        """Replace ``module.name`` by a recording wrapper (once)."""
        fn = getattr(module, name)
        if getattr(fn, "_scale_traced", False):
            return
        label = label or f"{module.__name__.rsplit('.', 1)[-1]}.{name}"
        trace = self

        def wrapper(*args, **kwargs):
            rss = _rss_bytes() or 0
            trace._seq += 1
            rec = {"call": label, "depth": len(trace.open), "seq": trace._seq,
                   "start_s": round(time.perf_counter() - trace._t0, 2),
                   "rss_before": rss, "peak": rss}
            with trace._lock:
                trace.open.append(rec)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                rss, anon = _rss_bytes() or 0, _rss_bytes("RssAnon")
                with trace._lock:
                    trace.open.remove(rec)
                    rec.update(peak=max(rec["peak"], rss), rss_after=rss, anon_after=anon,
                               seconds=round(time.perf_counter() - t0, 2))
                    trace.done.append(rec)

        wrapper._scale_traced = True
        setattr(module, name, wrapper)

    def records(self) -> list[dict]:
        """Finished calls in start order."""
        return sorted(self.done, key=lambda r: r["seq"])


def _trace_export(trace: MemoryTrace) -> None:
    import verifylib.models.coreml_export as ce
    import verifylib.models.coreml_package as cp
    import verifylib.models.ggml_writer as gw
    import verifylib.models.intake as vm
    import verifylib.stages.export as st

    trace.wrap(gw, "write_ggml_model")
    for name in ("obtain_model", "load_hf", "load_hf_encoder"):
        if hasattr(vm, name):
            trace.wrap(vm, name)
    for name in ("build_facts", "trace_encoder", "convert_traced", "release_conversion"):
        if hasattr(ce, name):
            trace.wrap(ce, name)
    # describe_mlpackage as stage_mlpackage looks it up (imported into coreml_package).
    for name in ("stage_mlpackage", "describe_mlpackage", "publish_staged"):
        if hasattr(cp, name):
            trace.wrap(cp, name)
    trace.wrap(st, "_export_contract")


def _trace_parity(trace: MemoryTrace) -> None:
    import verifylib.numerics.drift as dr
    import verifylib.numerics.mil_exec as mx
    import verifylib.numerics.program_map as pm
    import verifylib.models.intake as vm
    import verifylib.stages.parity as sp

    for name in ("obtain_model", "load_hf", "load_hf_encoder"):
        if hasattr(vm, name):
            trace.wrap(vm, name)
    for name in ("reference_run", "reference_encode", "fixture_logmel", "measure_program",
                 "encode_arrays", "tree_digest", "parity_result_from_evidence"):
        trace.wrap(sp, name)
    for name in ("load_program", "execute"):
        trace.wrap(mx, name)
    trace.wrap(pm, "residual_taps")
    for name in ("attribute", "hf_points", "map_program"):
        if hasattr(dr, name):
            trace.wrap(dr, name)


# ----------------------------------------------------------------------------- children

def _child(step: str, shape_name: str, work: Path, opts: dict) -> dict:
    """Run one step in this (fresh) process and return what it measured."""
    shape = SHAPES[shape_name]
    hf_dir, run_dir = work / "hf", work / "run"
    trace = MemoryTrace(progress=work / f"{step}.trace.json") if opts.get("trace") else None
    out: dict = {}
    if step == "build":
        import torch
        template = default_model_dir()
        t0 = time.perf_counter()
        model = build_model(shape, template, opts["seed"])
        n_enc = sum(p.numel() for p in model.model.encoder.parameters())
        n_all = sum(p.numel() for p in model.parameters())
        if n_enc != encoder_parameters(shape):
            raise SystemExit(f"built encoder has {n_enc} parameters, the closed form says "
                             f"{encoder_parameters(shape)}")
        shutil.rmtree(hf_dir, ignore_errors=True)
        save_model_folder(model, shape, template, hf_dir, opts["dtype"])
        out["seconds"] = time.perf_counter() - t0
        meta = {"shape": shape_name, "config": asdict(shape), "seed": opts["seed"],
                "recipe": RECIPE, "checkpoint_dtype": opts["dtype"], "encoder_parameters": n_enc,
                "model_parameters": n_all, "torch": torch.__version__}
        (work / "model.json").write_text(json.dumps(meta, indent=1))
        out["model_parameters"] = n_all
        return out
    params = bench_params(shape_name, hf_dir)
    if step == "02_export":
        import verifylib.stages.export as stage
        if trace:
            _trace_export(trace)
        shutil.rmtree(run_dir, ignore_errors=True)
        t0 = time.perf_counter()
        if opts.get("ggml"):
            # Stage 02's first gate needs stage 01's binary for its load probe; without
            # it the gate is NOT_RUN, so the file is written here, in the same process and
            # before the Core ML export, as the gate writes it.
            import verifylib.models.ggml_writer as gw
            written = gw.write_ggml_model(hf_dir, run_dir / "fp32" / "ggml-model.bin")
            out["ggml_seconds"] = round(time.perf_counter() - t0, 2)
            out["ggml_bytes"] = written.bytes
        report = stage.run(params, run_dir)
    elif step == "export_pair":
        # The measurement of export.pair (the gate itself needs stage 01's binary for
        # export.ggml_model): the fp32 program against the encoder rebuilt from the file.
        from verifylib.models.coreml_contract import contract_of
        from verifylib.models.hf import load_hf_encoder
        from verifylib.numerics.mil_exec import load_program
        from verifylib.numerics.pair import measure_pair
        from verifylib.numerics.reference import random_logmel
        t0 = time.perf_counter()
        # The random model's encoder stands for the one rebuilt from the file: an f16
        # file of it dequantizes to the same values, and the shape's random vocabulary
        # pairs a multilingual size with an English tokenizer, which the ggml importer
        # rightly refuses (benchmarks/ggml_intake.py measures the intake on its own).
        encoder, _fe = load_hf_encoder(hf_dir)
        contract = contract_of(encoder)
        program = load_program(run_dir / "fp32" / "ggml-model-encoder.mlpackage")
        m = measure_pair(program, encoder, {"random": random_logmel(contract)},
                         compute="float32", threshold_db=30.0)
        out["seconds"] = time.perf_counter() - t0
        out["pair"] = {p.input: {"snr_db": p.snr_db, "blocks": len(p.block_snr_db)}
                       for p in m.inputs}
        return out
    elif step == "04_parity":
        import verifylib.stages.parity as stage
        from verifylib.evidence.layout import EVIDENCE_DIR, GATES_DIR
        if trace:
            _trace_parity(trace)
        # A stage never runs twice into one run directory: an earlier parity step's
        # results in this scratch run go, so parity can be measured again after one export.
        shutil.rmtree(run_dir / EVIDENCE_DIR / stage.STAGE, ignore_errors=True)
        (run_dir / GATES_DIR / f"{stage.STAGE}.json").unlink(missing_ok=True)
        t0 = time.perf_counter()
        report = stage.run(params, run_dir)
    else:
        raise SystemExit(f"unknown step {step!r}")
    out["seconds"] = time.perf_counter() - t0
    out["gates"] = {r.id: r.status.value + ("" if r.reason.kind == "rule"
                                            else f"({r.reason.kind})")
                    for r in report.records}
    if trace:
        out["trace"] = trace.records()
    return out


def _run_child(step: str, shape_name: str, work: Path, opts: dict) -> dict:
    """Run a step in a fresh interpreter; add its peak RSS from the kernel's accounting."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result = work / f"{step}.result.json"
    result.unlink(missing_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", step, shape_name,
            "--work", str(work), "--seed", str(opts["seed"]), "--checkpoint-dtype",
            opts["dtype"]] + (["--no-ggml"] if not opts.get("ggml") else []) \
        + (["--trace-memory"] if opts.get("trace") else [])
    limit = opts.get("max_rss") or int(0.8 * _available_bytes())
    killed = threading.Event()
    t0 = time.perf_counter()
    with open(logs / f"{step}.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(work))

        def watch():
            # The host is shared: a step that outgrows the limit is stopped before the
            # kernel's OOM killer picks a victim, possibly someone else's process.
            while proc.returncode is None and not killed.is_set():
                if (_rss_bytes("VmRSS", proc.pid) or 0) > limit:
                    killed.set()
                    proc.kill()
                    return
                time.sleep(0.1)

        threading.Thread(target=watch, daemon=True).start()
        # wait4 gives this child's own resource usage (RUSAGE_CHILDREN would accumulate
        # the maximum over every child waited for so far).
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if killed.is_set():
        progress = work / f"{step}.trace.json"
        if progress.is_file():
            _print_trace(shape_name, f"{step} (stopped)", json.loads(progress.read_text()))
        raise SystemExit(f"{shape_name} {step} stopped: its resident set passed "
                         f"{limit / GIB:.1f} GiB (--max-rss-gib) after {wall:.0f} s; peak "
                         f"{maxrss_bytes(usage.ru_maxrss) / GIB:.2f} GiB")
    if proc.returncode != 0 or not result.is_file():
        tail = (logs / f"{step}.log").read_text(errors="replace").splitlines()[-25:]
        raise SystemExit(f"{shape_name} {step} failed (exit {proc.returncode}); log "
                         f"{logs / (step + '.log')}:\n" + "\n".join(tail))
    out = json.loads(result.read_text())
    out["peak_rss_bytes"] = maxrss_bytes(usage.ru_maxrss)
    out["process_seconds"] = round(wall, 2)
    return out


def _model_reusable(work: Path, shape_name: str, opts: dict) -> bool:
    meta = work / "model.json"
    if not meta.is_file() or not (work / "hf" / "config.json").is_file():
        return False
    m = json.loads(meta.read_text())
    return (m.get("shape"), m.get("seed"), m.get("recipe"), m.get("checkpoint_dtype"),
            m.get("config")) == (shape_name, opts["seed"], RECIPE, opts["dtype"],
                                 asdict(SHAPES[shape_name]))


def run_shape(shape_name: str, work: Path, opts: dict, *, emit=print) -> list[dict]:
    """Build (or reuse) the model, then run stage 02 and stage 04, one process each."""
    lines = []
    n_enc = encoder_parameters(SHAPES[shape_name])
    steps = [s for s in STEPS if s in opts["steps"]]
    if "build" in steps and opts.get("reuse") and _model_reusable(work, shape_name, opts):
        print(f"[{shape_name}] reusing the model in {work / 'hf'}", file=sys.stderr)
        steps.remove("build")
    for step in steps:
        print(f"[{shape_name}] {step} …", file=sys.stderr, flush=True)
        r = _run_child(step, shape_name, work, opts)
        line = {"shape": shape_name, "stage": step, "seconds": round(r["seconds"], 2),
                "peak_rss_bytes": r["peak_rss_bytes"], "parameters": n_enc,
                "bytes_per_parameter": round(r["peak_rss_bytes"] / n_enc, 2),
                "process_seconds": r["process_seconds"]}
        for k in ("ggml_seconds", "ggml_bytes", "model_parameters", "gates"):
            if k in r:
                line[k] = r[k]
        contract = [t for t in r.get("trace", ()) if t["call"] == "export._export_contract"]
        if contract:
            # The Core ML half alone (the goal), without the ggml writer before it.
            line["coreml_peak_rss_bytes"] = contract[0]["peak"]
        emit(json.dumps(line))
        sys.stdout.flush()
        if "trace" in r:
            _print_trace(shape_name, step, r["trace"])
        lines.append(line)
    return lines


def _print_trace(shape_name: str, step: str, records: list[dict]) -> None:
    print(f"\n[{shape_name}] {step}: resident set per call (GiB; peak = highest sample "
          f"during the call)", file=sys.stderr)
    print(f"{'t s':>8} {'call':<44}{'seconds':>9}{'before':>8}{'peak':>8}{'after':>8}"
          f"{'(anon)':>8}", file=sys.stderr)
    for r in records:
        name = "  " * r["depth"] + r["call"]
        if "seconds" not in r:  # still running when the step was stopped
            print(f"{r['start_s']:>8.1f} {name:<44}{'running':>9}{r['rss_before'] / GIB:>8.2f}"
                  f"{r['peak'] / GIB:>8.2f}", file=sys.stderr)
            continue
        print(f"{r['start_s']:>8.1f} {name:<44}{r['seconds']:>9.1f}"
              f"{r['rss_before'] / GIB:>8.2f}{r['peak'] / GIB:>8.2f}"
              f"{r['rss_after'] / GIB:>8.2f}"
              f"{'-' if r['anon_after'] is None else format(r['anon_after'] / GIB, '.2f'):>8}",
              file=sys.stderr)
    sys.stderr.flush()


# ----------------------------------------------------------------------------- fits

def fit_linear(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares ``y = a * x + b``; returns ``(a, b)``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return a, my - a * mx


def fit_power(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares on logs, ``y = c * x ** k``; returns ``(c, k)``."""
    k, log_c = fit_linear([math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys])
    return math.exp(log_c), k


def print_table(lines: list[dict]) -> None:
    """The shape table and, per stage, the growth fits."""
    print(f"\n{'shape':<16}{'enc params':>12}{'stage':>11}{'seconds':>10}{'peak GiB':>10}"
          f"{'B/param':>9}{'Core ML GiB':>13}")
    for ln in lines:
        coreml = ln.get("coreml_peak_rss_bytes")
        print(f"{ln['shape']:<16}{ln['parameters'] / 1e6:>11.1f}M{ln['stage']:>11}"
              f"{ln['seconds']:>10.1f}{ln['peak_rss_bytes'] / GIB:>10.2f}"
              f"{ln['bytes_per_parameter']:>9.2f}"
              f"{f'{coreml / GIB:.2f}' if coreml else '':>13}")
    print("(Core ML GiB: the peak sampled during export.contract alone, with "
          "--trace-memory; the export step's peak also covers the ggml writer)")
    print()
    for step in STEPS:
        rows = [ln for ln in lines if ln["stage"] == step]
        if len({r["parameters"] for r in rows}) < 2:
            continue
        xs = [float(r["parameters"]) for r in rows]
        a, b = fit_linear(xs, [float(r["peak_rss_bytes"]) for r in rows])
        c, k = fit_power(xs, [float(r["seconds"]) for r in rows])
        print(f"{step:<10} peak bytes ~ {a:.2f} * params + {b / GIB:.2f} GiB;   "
              f"seconds ~ {c:.3g} * params^{k:.2f}")
    peaks: dict = {}
    for ln in lines:
        if ln["stage"] != "build":
            peaks.setdefault(ln["shape"], {})[ln["stage"]] = ln["peak_rss_bytes"]
    if peaks:
        print("\nexport + parity peak (the larger of the two processes; a stage not run is "
              "named): " + ", ".join(
                  f"{s} {max(p.values()) / GIB:.2f} GiB"
                  f"{'' if max(p.values()) <= 8 * GIB else ' (> 8 GiB)'}"
                  f"{''.join(f' (no {x})' for x in STEPS[1:] if x not in p)}"
                  for s, p in peaks.items()))


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", nargs="?", choices=sorted(SHAPES))
    ap.add_argument("--all", action="store_true", help="every shape, then the table and fits")
    ap.add_argument("--shapes", metavar="S,S", help="with --all: only these shapes")
    ap.add_argument("--table", metavar="FILE", nargs="+",
                    help="print the table and fits from JSON lines printed before, run nothing")
    ap.add_argument("--steps", metavar="S,S", default=",".join(STEPS),
                    help=f"steps to run (default {','.join(STEPS)}); 04_parity needs the "
                         f"02_export of the same --keep folder")
    ap.add_argument("--keep", metavar="DIR", help="keep models, run directories and logs "
                    "in DIR/<shape>/ (and reuse a model built there)")
    ap.add_argument("--trace-memory", action="store_true",
                    help="print the resident set per call of each stage's main functions")
    ap.add_argument("--no-ggml", action="store_true",
                    help="do not write ggml-model.bin in the export step")
    ap.add_argument("--max-rss-gib", type=float,
                    help="stop a step whose resident set passes this (default: 80%% of the "
                         "memory available when it starts)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--checkpoint-dtype", choices=("float32", "float16"), default="float32",
                    help="dtype of the saved random checkpoint (loaded as float32 either way)")
    ap.add_argument("--child", metavar="STEP", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    opts = {"seed": a.seed, "dtype": a.checkpoint_dtype, "ggml": not a.no_ggml,
            "trace": a.trace_memory, "reuse": bool(a.keep),
            "max_rss": int(a.max_rss_gib * GIB) if a.max_rss_gib else None,
            "steps": [s for s in a.steps.split(",") if s]}
    if set(opts["steps"]) - set(STEPS):
        ap.error(f"--steps: unknown {sorted(set(opts['steps']) - set(STEPS))}")
    if a.child:
        work = Path(a.work)
        res = _child(a.child, a.shape, work, opts)
        (work / f"{a.child}.result.json").write_text(json.dumps(res))
        return
    if a.table:
        rows = []
        for f in a.table:
            for text in Path(f).read_text().splitlines():
                if text.startswith("{"):
                    rows.append(json.loads(text))
        order = {s: i for i, s in enumerate(SHAPES)}
        print_table(sorted(rows, key=lambda r: (order[r["shape"]], STEPS.index(r["stage"]))))
        return
    if bool(a.all) == bool(a.shape):
        ap.error("give one SHAPE or --all")
    shapes = sorted(SHAPES, key=lambda s: (encoder_parameters(SHAPES[s]),
                                           SHAPES[s].decoder_layers)) if a.all else [a.shape]
    if a.shapes:
        unknown = set(a.shapes.split(",")) - set(SHAPES)
        if unknown or not a.all:
            ap.error(f"--shapes needs --all and known shapes (unknown: {sorted(unknown)})")
        shapes = [s for s in shapes if s in a.shapes.split(",")]
    lines = []
    for s in shapes:
        if a.keep:
            work = Path(a.keep).resolve() / s
            work.mkdir(parents=True, exist_ok=True)
            lines += run_shape(s, work, opts)
        else:
            with tempfile.TemporaryDirectory(prefix=f"verifylib-scale-{s}-") as tmp:
                lines += run_shape(s, Path(tmp), opts)
    if a.all:
        print_table(lines)


if __name__ == "__main__":
    main()
