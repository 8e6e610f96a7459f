"""Benchmark: the numbers behind ``pair-v1``, the policy of gate ``export.pair``.

The gate asks whether an audited Core ML encoder computes the encoder of the audited
whisper.cpp ggml model file. It executes the encoder's ML program in float32
(:mod:`verifylib.numerics.mil_exec`) and compares it with a Hugging Face encoder rebuilt
from the file's own (dequantized) tensors, on two log-mels: the fixture (the pinned
tree's ``samples/jfk.wav`` through the rebuilt model's own feature extractor) and a
seeded random one (:func:`verifylib.numerics.reference.random_logmel`). This script
measures, with the project's own functions, what the floors must separate:

- same model: the default model (tiny.en) as ggml files of every supported ftype (f32,
  f16, q8_0, q5_1, q5_0, q4_1, q4_0; the quantized ones made by the pinned tree's
  ``whisper-quantize``) against our fp32 and fp16 exports and upstream's own encoders
  (``convert-whisper-to-coreml.py`` plain and ``--optimize-ane``, and
  ``convert-h5-to-coreml.py`` when its cache entry can be made);
- different model, same shapes: a seeded random-weight model; tiny.en with encoder blocks
  (0,1), (1,2), (2,3) swapped; and the q4_0 of the (1,2)-swapped file (a lossy file of a
  near model: the hardest separation);

then proposes a floor per ftype and encoder precision between the lowest same-model SNR
and the highest different-model SNR, with the margin on each side. It also measures whisper-cli's corpus WER per ftype (greedy, the default parameters' public
fixtures) against the Hugging Face source model, and the time and peak RSS of
``import_ggml_cached`` and ``measure_pair`` (each in a fresh child process).

Usage: ``.venv/bin/python benchmarks/pair_table.py`` (writes ``/tmp/pair_table.md`` and
``/tmp/pair_table.jsonl``; work files in ``$PAIR_TABLE_WORK``, default
``/tmp/pair_table_work``). The cache is ``$VERIFYLIB_CACHE`` (default ``.test-cache``).
A benchmark, not a test: it prints numbers and judges nothing.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VERIFYLIB_CACHE", str(ROOT / ".test-cache"))
CACHE = Path(os.environ["VERIFYLIB_CACHE"]).resolve()
WORK = Path(os.environ.get("PAIR_TABLE_WORK", "/tmp/pair_table_work"))
OUT_MD = Path("/tmp/pair_table.md")
OUT_JSONL = Path("/tmp/pair_table.jsonl")

FTYPES = ("f32", "f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0")
QUANT = ("q8_0", "q5_1", "q5_0", "q4_1", "q4_0")
SWAPS = ((0, 1), (1, 2), (2, 3))
RANDOM_MODEL_SEED = 1234
PACKAGE = "ggml-model-encoder.mlpackage"


def _quiet(_msg: str) -> None:
    return None


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def peak_mib() -> dict:
    """This process's peak RSS: ``VmHWM`` (this image only) and ``ru_maxrss``."""
    hwm = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    except OSError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss = kb / 1024 if sys.platform != "darwin" else kb / (1 << 20)
    return {"vmhwm_mib": hwm, "ru_maxrss_mib": rss}


# ----------------------------------------------------------------------------- files

def write_f32_file(f16_path: Path, out: Path) -> Path:
    """An ftype-0 (all f32) ggml file holding the f16 file's values.

    Header bytes (magic, hparams, filters, vocab) are the f16 file's with ``ftype`` set to
    0; the tensor records are written through tests/helpers/ggml_files.Record in
    :func:`verifylib.models.ggml_file.expected_layout` order, each from the reader's
    dequantized float32 values (so exactly the f16 values, widened).
    """
    import struct

    from tests.helpers.ggml_files import Record
    from verifylib.models.ggml_file import expected_layout, open_ggml

    with open_ggml(f16_path) as gf:
        first = min(info.header_offset for info in gf.tensors.values())
        with open(f16_path, "rb") as f:
            head = bytearray(f.read(first))
        struct.pack_into("<i", head, 4 + 10 * 4, 0)   # the 11th hparam: ftype
        tmp = out.with_suffix(".part")
        with open(tmp, "wb") as f:
            f.write(head)
            for name, (dims, gtype) in expected_layout(gf.hparams, 0).items():
                arr = gf.tensor(name)
                data = arr.astype("<f4" if gtype == 0 else "<f2").tobytes()
                f.write(Record(name, tuple(dims), gtype, data).to_bytes())
        os.replace(tmp, out)
    return out


def random_model_folder(hf_dir: Path, dest: Path, seed: int) -> Path:
    """A seeded random-weight Whisper of ``hf_dir``'s config, as a Hugging Face folder
    (tokenizer, preprocessor and generation config copied from ``hf_dir``).
    """
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    shutil.rmtree(dest, ignore_errors=True)
    config = WhisperConfig.from_pretrained(hf_dir, local_files_only=True)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    model.save_pretrained(dest, safe_serialization=True)
    del model
    for p in Path(hf_dir).iterdir():
        if p.is_file() and p.name not in ("model.safetensors", "config.json",
                                          "verifylib-import.json"):
            shutil.copy2(p, dest / p.name)
    return dest


def quantize(binary: Path, src: Path, out: Path, qtype: str) -> Path:
    from verifylib.runtime.runner import run
    run([binary, src, out, qtype], check=True, timeout=600, what=f"whisper-quantize {qtype}")
    return out


def precision_of(program) -> str:
    """``fp16`` when the program holds float16 constants (weights), else ``fp32``."""
    return "fp16" if any("16" in str(d) and "fp" in str(d).lower()
                         for d in program.const_dtypes.values()) else "fp32"


# ----------------------------------------------------------------------------- children

def child_import(ggml_path: str) -> None:
    """Time ``import_ggml_cached`` into an empty cache; print a JSON record."""
    from verifylib.models.ggml_import import import_ggml_cached

    tmp = Path(tempfile.mkdtemp(prefix="pair-import-", dir="/tmp"))
    try:
        base = peak_mib()
        t0 = time.perf_counter()
        imp = import_ggml_cached(ggml_path, tmp)
        seconds = time.perf_counter() - t0
        print(json.dumps({"phase": "import_ggml_cached", "file": ggml_path,
                          "ftype": imp.ftype_name, "cached": imp.cached,
                          "seconds": seconds, "start": base, "peak": peak_mib()}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def child_measure(pkg: str, hf_dir: str, wav: str) -> None:
    """Time loading and ``measure_pair`` (float32) of one pair; print a JSON record."""
    base = peak_mib()
    t0 = time.perf_counter()
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.hf import load_hf_encoder
    from verifylib.numerics.mil_exec import load_program
    from verifylib.numerics.pair import measure_pair
    from verifylib.numerics.reference import fixture_logmel, random_logmel
    from verifylib.runtime.audio import read_wav_16k
    t_imp = time.perf_counter() - t0
    t1 = time.perf_counter()
    encoder, fe = load_hf_encoder(hf_dir)
    contract = contract_of(encoder)
    mels = {"fixture": fixture_logmel(fe, read_wav_16k(wav), contract),
            "random": random_logmel(contract)}
    t_ref = time.perf_counter() - t1
    t2 = time.perf_counter()
    program = load_program(pkg)
    t_prog = time.perf_counter() - t2
    before = peak_mib()
    t3 = time.perf_counter()
    m = measure_pair(program, encoder, mels, compute="float32", threshold_db=None)
    t_meas = time.perf_counter() - t3
    print(json.dumps({"phase": "measure_pair", "package": pkg, "hf_dir": hf_dir,
                      "seconds": {"imports": t_imp, "load_encoder_and_mels": t_ref,
                                  "load_program": t_prog, "measure_pair": t_meas,
                                  "measure_pair_reported": m.seconds,
                                  "per_input": {p.input: {"reference": p.reference_seconds,
                                                          "program": p.program_seconds}
                                                for p in m.inputs}},
                      "start": base, "before_measure": before, "peak": peak_mib()}))


def run_child(*args: str) -> dict:
    res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", *args],
                         capture_output=True, text=True, env=dict(os.environ), timeout=1200)
    if res.returncode != 0:
        return {"error": res.stderr[-2000:], "args": list(args)}
    return json.loads(res.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- main

def fmt(x: float | None, nd: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.{nd}f}"


def main() -> int:
    t_main = time.perf_counter()
    import yaml

    from verifylib.models.ggml_import import import_ggml_cached
    from verifylib.models.ggml_writer import write_ggml_model
    from verifylib.models.intake import obtain_model
    from verifylib.whispercpp import source

    WORK.mkdir(parents=True, exist_ok=True)
    gdir = WORK / "ggml"     # nothing but .bin files: no .mlmodelc can sit beside a model
    gdir.mkdir(exist_ok=True)
    params_doc = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    info = obtain_model(params_doc["model"], CACHE, log=_quiet)
    tree = source.obtain_source(source.PYWHISPERCPP_V185, CACHE, log=_quiet)
    jfk = Path(tree.path) / "samples" / "jfk.wav"
    log(f"model {info.hf_dir}; tree {tree.path}")

    # ---- ggml files of the default model
    files: dict[str, Path] = {}
    t0 = time.perf_counter()
    wr = write_ggml_model(info.hf_dir, gdir / "tiny-en-f16.bin")
    files["f16"] = Path(wr.path)
    log(f"f16 written ({time.perf_counter() - t0:.1f} s, lossless={wr.lossless})")
    from tests.helpers.quantize import build_quantize
    qb = build_quantize(Path(tree.path), tree.tree_id, CACHE, log=log)
    for q in QUANT:
        files[q] = quantize(qb.binary, files["f16"], gdir / f"tiny-en-{q}.bin", q)
    files["f32"] = write_f32_file(files["f16"], gdir / "tiny-en-f32.bin")
    log("quantized and f32 files written")

    # ---- mismatch files
    mism: dict[str, tuple[Path, str]] = {}
    rdir = random_model_folder(Path(info.hf_dir), WORK / "hf-random", RANDOM_MODEL_SEED)
    mism["random weights (seed 1234)"] = (Path(write_ggml_model(
        rdir, gdir / "random-f16.bin").path), "f16")
    from tests.helpers.ggml import swapped_layers_folder
    for i, j in SWAPS:
        d = WORK / f"hf-swap-{i}{j}"
        shutil.rmtree(d, ignore_errors=True)
        swapped_layers_folder(Path(info.hf_dir), d, i, j)
        mism[f"blocks {i}<->{j} swapped"] = (Path(write_ggml_model(
            d, gdir / f"swap-{i}{j}-f16.bin").path), "f16")
    mism["blocks 1<->2 swapped, q4_0"] = (quantize(
        qb.binary, gdir / "swap-12-f16.bin", gdir / "swap-12-q4_0.bin", "q4_0"), "q4_0")
    log("mismatch files written")

    # ---- encoders
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import convert_traced, trace_encoder
    from verifylib.models.coreml_package import place_mlpackage
    from verifylib.models.hf import load_hf, load_hf_encoder
    bundle = load_hf(info.hf_dir)
    encoders: dict[str, Path] = {}
    export_seconds = {}
    edir = WORK / "export"
    shutil.rmtree(edir, ignore_errors=True)
    src_encoder = bundle.model.get_encoder()
    contract = contract_of(src_encoder)
    traced, _, export_seconds["trace"] = trace_encoder(src_encoder, contract)
    for prec in ("fp32", "fp16"):
        conv = convert_traced(traced, contract, prec)
        export_seconds[prec] = conv.seconds
        encoders[f"ours-{prec}"] = Path(place_mlpackage(conv.model, edir / prec / PACKAGE,
                                                        contract, prec).final)
        del conv
    del traced
    log(f"our exports: {export_seconds}")
    upstream_note = None
    try:
        from tests.helpers.upstream import upstream_encoders
        up = upstream_encoders(CACHE, tree, info, log=log)
        for k, p in up.paths.items():
            encoders[f"upstream-{k}"] = Path(p)
        if up.notes:
            upstream_note = up.notes
    except Exception as exc:   # report, keep measuring ours
        upstream_note = f"upstream encoders unavailable: {type(exc).__name__}: {exc}"
        log(upstream_note)

    from verifylib.numerics.mil_exec import load_program
    from verifylib.numerics.pair import first_divergent_block, measure_pair
    from verifylib.numerics.reference import fixture_logmel, random_logmel
    from verifylib.runtime.audio import read_wav_16k
    programs = {k: load_program(p) for k, p in encoders.items()}
    precisions = {k: precision_of(p) for k, p in programs.items()}
    log(f"encoders: {precisions}")
    audio = read_wav_16k(jfk)

    # ---- measurements
    rows: list[dict] = []
    imports: dict[str, dict] = {}

    def measure_file(kind: str, label: str, ftype: str, path: Path) -> None:
        t = time.perf_counter()
        imp = import_ggml_cached(path, CACHE)
        imports[label] = {"seconds": time.perf_counter() - t, "cached": imp.cached,
                          "ftype": imp.ftype_name}
        enc, fe = load_hf_encoder(imp.hf_dir)
        c = contract_of(enc)
        mels = {"fixture": fixture_logmel(fe, audio, c), "random": random_logmel(c)}
        for ek, prog in programs.items():
            m = measure_pair(prog, enc, mels, compute="float32", threshold_db=None)
            fx, rd = m.input("fixture"), m.input("random")
            row = {"kind": kind, "label": label, "ftype": ftype, "file": str(path),
                   "file_sha256": imp.source_sha256, "encoder": ek,
                   "precision": precisions[ek],
                   "fixture_snr_db": fx.snr_db, "random_snr_db": rd.snr_db,
                   "min_snr_db": min(fx.snr_db, rd.snr_db),
                   "max_snr_db": max(fx.snr_db, rd.snr_db),
                   "fixture_cosine": fx.cosine, "random_cosine": rd.cosine,
                   "cosine_min": min(fx.cosine, rd.cosine),
                   "fixture_max_abs": fx.max_abs_error, "random_max_abs": rd.max_abs_error,
                   "fixture_block_snr_db": list(fx.block_snr_db),
                   "random_block_snr_db": list(rd.block_snr_db),
                   "blocks_tapped": m.blocks_tapped, "taps_unavailable": m.taps_unavailable,
                   "seconds": m.seconds}
            rows.append(row)
            log(f"{kind:8s} {label:32s} {ek:14s} fixture {fmt(fx.snr_db)} random "
                f"{fmt(rd.snr_db)} cos {fx.cosine:.5f}/{rd.cosine:.5f} "
                f"blocks {[round(s, 1) for s in fx.block_snr_db]} ({m.seconds:.1f} s)")
        del enc

    saved = WORK / "rows.json"
    if "--reuse-rows" in sys.argv and saved.is_file():   # re-render without re-measuring
        doc = json.loads(saved.read_text())
        rows[:], imports = doc["rows"], doc["imports"]
        log(f"reusing {len(rows)} rows from {saved}")
    else:
        for ft in FTYPES:
            measure_file("same", f"tiny.en {ft}", ft, files[ft])
        for label, (path, ft) in mism.items():
            measure_file("mismatch", label, ft, path)

    saved.write_text(json.dumps({"rows": rows, "imports": imports,
                                                "precisions": precisions,
                                                "export_seconds": export_seconds,
                                                "upstream_note": upstream_note}))
    # ---- floors
    precs = sorted(set(precisions.values()))
    same = [r for r in rows if r["kind"] == "same"]
    diff = [r for r in rows if r["kind"] == "mismatch"]
    floors: dict = {}
    for ft in FTYPES:
        for pr in precs:
            s = [r for r in same if r["ftype"] == ft and r["precision"] == pr]
            d = [r for r in diff if r["precision"] == pr]
            if not s or not d:
                continue
            lo = min(s, key=lambda r: r["min_snr_db"])
            hi_min = max(d, key=lambda r: r["min_snr_db"])
            hi_any = max(d, key=lambda r: r["max_snr_db"])
            cos_lo = min(r["cosine_min"] for r in s)
            cos_hi = max(max(r["fixture_cosine"], r["random_cosine"]) for r in d)
            L, H = lo["min_snr_db"], hi_any["max_snr_db"]
            # An fp32 program can reproduce the reference bit for bit (+inf): then the
            # floor is placed as for the other precision's finite lowest same-model SNR
            # of this ftype (a floor a correct fp16 encoder of the file passes too).
            L_place, placed_by = L, None
            if math.isinf(L):
                finite = [r["min_snr_db"] for r in same if r["ftype"] == ft
                          and math.isfinite(r["min_snr_db"])]
                if finite:
                    L_place, placed_by = min(finite), "lowest finite same-model SNR of " \
                        "this ftype at any precision (this precision's is +inf)"
            mid = (L_place + H) / 2
            floor = (math.floor(mid * 2) / 2 if L_place > H and math.isfinite(mid)
                     else None)   # half-dB grid
            floors[(ft, pr)] = {
                "lowest_same": L, "lowest_same_row": f"{lo['label']} / {lo['encoder']}",
                "highest_diff_min": hi_min["min_snr_db"],
                "highest_diff_any": H,
                "highest_diff_row": f"{hi_any['label']} / {hi_any['encoder']}",
                "floor": floor, "placed_by": placed_by,
                "margin_pass": None if floor is None else L - floor,
                "margin_fail": None if floor is None else floor - H,
                "cos_lowest_same": cos_lo, "cos_highest_diff": cos_hi,
                "cos_floor": None if cos_lo <= cos_hi else
                math.floor(((cos_lo + cos_hi) / 2) * 1e4) / 1e4}
    # The first divergent block of every row at its candidate floor (fixture log-mel).
    for r in rows:
        f = floors.get((r["ftype"], r["precision"]), {}).get("floor")
        r["candidate_floor_db"] = f
        r["first_divergent_block"] = (first_divergent_block(r["fixture_block_snr_db"], f)
                                      if r["fixture_block_snr_db"] else None)
        r["first_divergent_block_random"] = (
            first_divergent_block(r["random_block_snr_db"], f)
            if r["random_block_snr_db"] else None)
        r["gate_would"] = (None if f is None else
                           ("pass" if r["min_snr_db"] >= f else "fail"))

    # ---- WER per ftype
    wer = wer_table(info, bundle, tree, files, params_doc)
    del bundle

    # ---- timings and peaks in fresh children
    timing = {"import_f16": run_child("import", str(files["f16"])),
              "import_q4_0": run_child("import", str(files["q4_0"]))}
    f16_hf = str(import_ggml_cached(files["f16"], CACHE).hf_dir)
    q40_hf = str(import_ggml_cached(files["q4_0"], CACHE).hf_dir)
    for ek in ("ours-fp32", "ours-fp16", "upstream-ane"):
        if ek in encoders:
            timing[f"measure_{ek}_f16"] = run_child("measure", str(encoders[ek]), f16_hf,
                                                   str(jfk))
    if "ours-fp16" in encoders:
        timing["measure_ours-fp16_q4_0"] = run_child("measure", str(encoders["ours-fp16"]),
                                                    q40_hf, str(jfk))

    # ---- output
    md = render(rows, floors, wer, timing, imports, precisions, export_seconds,
                upstream_note, time.perf_counter() - t_main)
    OUT_MD.write_text(md)
    with open(OUT_JSONL, "w") as f:
        for r in rows:
            f.write(json.dumps({"record": "pair", **r}) + "\n")
        for (ft, pr), v in floors.items():
            f.write(json.dumps({"record": "floor", "ftype": ft, "precision": pr, **v}) + "\n")
        f.write(json.dumps({"record": "wer", **wer}) + "\n")
        f.write(json.dumps({"record": "timing", **timing,
                            "in_process_imports": imports}) + "\n")
    print(md)
    return 0


# ----------------------------------------------------------------------------- WER

def wer_table(info, bundle, tree, files: dict, params_doc: dict) -> dict:
    """whisper-cli (patched, greedy) corpus WER per ftype, and the HF source model's."""
    from verifylib.models.hf import transcribe_hf
    from verifylib.numerics.scoring import corpus_wer, count_words, english_normalizer
    from verifylib.runtime.audio import read_wav_16k
    from verifylib.stages.wer import cli_transcribe
    from verifylib.whispercpp import build, source

    pin = source.load_pins()[params_doc["runtime"]["pin"]]
    patched = source.prepare_patched_tree(Path(tree.path), pin, CACHE / "work", log=_quiet)
    t0 = time.perf_counter()
    cli = build.build_whisper_cli(
        Path(patched.path), tree_id=pin.tree, patch_sha256=pin.patch_sha256, variant="ggml",
        options={"GGML_NATIVE": "ON" if params_doc["runtime"].get("ggml_native", True)
                 else "OFF"}, cache_dir=CACHE, log=log)
    log(f"whisper-cli {cli.binary if hasattr(cli, 'binary') else cli} "
        f"({time.perf_counter() - t0:.1f} s)")
    binary = Path(getattr(cli, "binary", None) or getattr(cli, "path"))
    norm = english_normalizer()
    lang = params_doc["model"].get("language", "en")
    fixtures = []
    for fx in params_doc["fixtures"]:
        if not fx.get("public", True) or "text" not in fx:
            continue   # the private fixture stays out of a benchmark's output
        path = (Path(tree.path) / fx["runtime_file"] if "runtime_file" in fx
                else ROOT / "parameters" / fx["path"])
        fixtures.append((fx["id"], path, norm(fx["text"])))
    out: dict = {"fixtures": [f[0] for f in fixtures], "binary": str(binary), "per_ftype": {}}
    src_counts, src_texts = [], {}
    for fid, path, ref in fixtures:
        hyp = norm(transcribe_hf(bundle, read_wav_16k(path), lang))
        src_texts[fid] = hyp
        src_counts.append(count_words(ref, hyp))
    out["source_wer"] = corpus_wer(src_counts)
    log(f"HF source corpus WER {out['source_wer']:.4f}")
    for ft in FTYPES:
        counts, pair, errors, secs = [], [], [], 0.0
        for fid, path, ref in fixtures:
            t = time.perf_counter()
            text, res = cli_transcribe(binary, str(files[ft]), path, lang)
            secs += time.perf_counter() - t
            if not res.ok:
                errors.append(f"{fid}: {res.describe()}")
                continue
            hyp = norm(text)
            counts.append(count_words(ref, hyp))
            pair.append(count_words(src_texts[fid], hyp))
        rec = {"clips": len(counts), "errors": errors, "seconds": secs}
        if counts and not errors:
            rec["wer"] = corpus_wer(counts)
            rec["delta_vs_source"] = rec["wer"] - out["source_wer"]
            rec["pairwise_vs_source"] = corpus_wer(pair)
        out["per_ftype"][ft] = rec
        log(f"WER {ft}: {rec}")
    return out


# ----------------------------------------------------------------------------- render

def render(rows, floors, wer, timing, imports, precisions, export_seconds, upstream_note,
           total_s) -> str:
    L = ["# export.pair: same model vs different model (pair-v1 calibration)", "",
         "Program executed in float32 by verifylib.numerics.mil_exec; reference = HF encoder "
         "rebuilt from the ggml file (import_ggml_cached). SNR in dB (float64, no epsilon). "
         "`min` = min(fixture, random), the number a gate on both inputs sees.", "",
         "Encoders: " + ", ".join(f"`{k}` ({v})" for k, v in precisions.items()) + ".", ""]
    if upstream_note:
        L += [f"Upstream note: {upstream_note}", ""]
    L += ["| kind | model file | ftype | encoder | prec | fixture SNR | random SNR | min SNR "
          "| cosine min | block SNR (fixture) | first block < floor | gate at floor |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        blocks = " / ".join(fmt(s, 1) for s in r["fixture_block_snr_db"]) or "untapped"
        L.append(f"| {r['kind']} | {r['label']} | {r['ftype']} | {r['encoder']} | "
                 f"{r['precision']} | {fmt(r['fixture_snr_db'])} | {fmt(r['random_snr_db'])} "
                 f"| {fmt(r['min_snr_db'])} | {r['cosine_min']:.6f} | {blocks} | "
                 f"{'–' if r['first_divergent_block'] is None else r['first_divergent_block']}"
                 f" | {r['gate_would'] or '–'} |")
    L += ["", "## Proposed floors (SNR on both inputs; cosine min)", "",
          "Lowest same-model = min over encoders of that precision of min(fixture, random); "
          "highest different-model = max over every mismatch row of that precision of "
          "max(fixture, random) (so *either* input alone rejects it). Floor = midpoint, "
          "rounded down to 0.5 dB.", "",
          "| ftype | prec | lowest same (row) | highest diff, any input (row) | highest diff, "
          "min of two | floor dB | margin pass | margin fail | cos lowest same | cos highest "
          "diff | cos floor |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    tight, notes = None, []
    for (ft, pr), v in floors.items():
        L.append(f"| {ft} | {pr} | {fmt(v['lowest_same'])} ({v['lowest_same_row']}) | "
                 f"{fmt(v['highest_diff_any'])} ({v['highest_diff_row']}) | "
                 f"{fmt(v['highest_diff_min'])} | {fmt(v['floor'], 1)} | "
                 f"{fmt(v['margin_pass'])} | {fmt(v['margin_fail'])} | "
                 f"{v['cos_lowest_same']:.6f} | {v['cos_highest_diff']:.6f} | "
                 f"{fmt(v['cos_floor'], 4)} |")
        if v.get("placed_by"):
            notes.append(f"{ft}/{pr}: floor placed by the {v['placed_by']}.")
        if v["margin_pass"] is not None:
            m = min(v["margin_pass"], v["margin_fail"])
            if tight is None or m < tight[0]:
                tight = (m, ft, pr, v)
    if notes:
        L += [""] + notes
    if tight:
        m, ft, pr, v = tight
        L += ["", f"Tightest separation: {ft} / {pr}: lowest same-model {fmt(v['lowest_same'])}"
              f" dB ({v['lowest_same_row']}) vs highest different-model "
              f"{fmt(v['highest_diff_any'])} dB ({v['highest_diff_row']}): gap "
              f"{fmt(v['lowest_same'] - v['highest_diff_any'])} dB, {fmt(m)} dB each side "
              "of the floor."]
    L += ["", "## WER per ftype (whisper-cli patched v1.8.5, greedy; corpus over "
          f"{len(wer['fixtures'])} public fixtures: {', '.join(wer['fixtures'])})", "",
          f"HF source model: {100 * wer['source_wer']:.2f}%", "",
          "| ftype | WER % | delta vs source (pp) | pairwise vs source % | cli s | errors |",
          "|---|---|---|---|---|---|"]
    for ft, rec in wer["per_ftype"].items():
        w = rec.get("wer")
        L.append(f"| {ft} | {fmt(None if w is None else 100 * w)} | "
                 f"{fmt(None if w is None else 100 * rec['delta_vs_source'])} | "
                 f"{fmt(None if w is None else 100 * rec['pairwise_vs_source'])} | "
                 f"{rec['seconds']:.1f} | {'; '.join(rec['errors'])[:300] or '–'} |")
    L += ["", "## Time and peak RSS (fresh child process each; tiny shape)", "",
          "| what | seconds | peak VmHWM MiB | ru_maxrss MiB | detail |", "|---|---|---|---|---|"]
    for k, t in timing.items():
        if "error" in t:
            L.append(f"| {k} | – | – | – | error: {t['error'][-200:]!r} |")
            continue
        s = t["seconds"]
        if isinstance(s, dict):
            detail = (f"load encoder+mels {s['load_encoder_and_mels']:.2f} s, load program "
                      f"{s['load_program']:.2f} s, per input "
                      + ", ".join(f"{n}: ref {v['reference']:.2f} / prog {v['program']:.2f} s"
                                  for n, v in s["per_input"].items())
                      + f"; RSS before measure {fmt(t['before_measure']['vmhwm_mib'], 0)} MiB")
            sec = s["measure_pair"]
        else:
            detail, sec = f"ftype {t.get('ftype')}, empty cache", s
        L.append(f"| {k} | {sec:.2f} | {fmt(t['peak']['vmhwm_mib'], 0)} | "
                 f"{fmt(t['peak']['ru_maxrss_mib'], 0)} | {detail} |")
    L += ["", "In-process import_ggml_cached (shared cache): " + ", ".join(
        f"{k} {v['seconds']:.2f} s{' (cached)' if v['cached'] else ''}"
        for k, v in imports.items()) + ".",
          f"Our exports: trace {export_seconds.get('trace', 0):.1f} s, convert fp32 "
          f"{export_seconds.get('fp32', 0):.1f} s, fp16 {export_seconds.get('fp16', 0):.1f} s. "
          f"Whole script {total_s:.0f} s.", ""]
    return "\n".join(L)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "import":
            child_import(sys.argv[3])
        elif sys.argv[2] == "measure":
            child_measure(sys.argv[3], sys.argv[4], sys.argv[5])
        sys.exit(0)
    sys.exit(main())
