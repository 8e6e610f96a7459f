"""Stage 02_export: model intake and the whisper.cpp model file.

Implemented: ``export.ggml_model`` — the model is taken in (a Hugging Face folder, a hub
id, or a CTranslate2 Whisper imported once), written as ``fp32/ggml-model.bin`` by our
writer, and loaded by ``build.ggml``'s own binary, whose loader must print exactly the
hyper-parameters we wrote. The Core ML conversion gates (``export.contract``,
``export.compile``) are not written yet and say so.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from .. import contracts
from ..canonical import is_sha256
from ..gates import Judgement, Status, rule
from ..ggml_writer import write_ggml_model
from ..model import obtain_model
from ..params import Params
from ..runner import run as run_child
from ..stage import StageContext, StageReport
from .build import cache_dir, ggml_binary, runtime_tree

STAGE = "02_export"
GGML_MODEL = ("fp32", "ggml-model.bin")
LOAD_PROBE_MS = "2000"


@rule("export.ggml_model")
def _rule_ggml_model(ev) -> Judgement:
    g = ev.json("ggml")
    stderr = ev.text("load_stderr")
    probe = g["probe"]
    if not is_sha256(g.get("sha256")) or not is_sha256(g.get("binary_sha256")):
        return Judgement(Status.FAIL, "malformed digest in the export evidence")
    if probe["timed_out"] or probe["signal"] or probe["returncode"] != 0:
        how = "timed out" if probe["timed_out"] else (probe["signal"] or f"exit {probe['returncode']}")
        return Judgement(Status.FAIL, f"whisper-cli did not load the model cleanly ({how})")
    if g["model_arg"] not in probe["argv"]:
        return Judgement(Status.FAIL, "the probe did not load the written model file")
    if contracts.MODEL_LOAD_FAILURE in stderr:
        return Judgement(Status.FAIL, "the loader logged a model load failure")
    loaded = contracts.parse_loaded_hparams(stderr)
    wrote = {k: g["hparams"][k] for k in contracts.MODEL_LOAD_HPARAMS}
    if loaded != wrote:
        diff = {k: (wrote.get(k), loaded.get(k)) for k in contracts.MODEL_LOAD_HPARAMS
                if wrote.get(k) != loaded.get(k)}
        return Judgement(Status.FAIL, f"loader's hyper-parameters differ from the written ones "
                                      f"(written, loaded): {diff}")
    return Judgement(Status.PASS, f"ggml-model.bin sha256 {g['sha256']} ({g['bytes']} bytes, "
                                  f"{g['n_tensors']} tensors) loaded by whisper-cli "
                                  f"{g['binary_sha256'][:12]}…; the loader printed the written "
                                  f"hyper-parameters {wrote}")


def model_language(params: Params) -> str:
    """The decoding language of the model (parameter ``model.language``, default en)."""
    return params["model"].get("language") or "en"


def run(params: Params, run_dir: str | os.PathLike) -> StageReport:
    """Run stage 02_export.

    Parameters
    ----------
    params : Params
        Validated parameters (``model`` section).
    run_dir : path-like
        The run directory; the model file goes to ``fp32/ggml-model.bin`` in it.

    Returns
    -------
    StageReport
    """
    ctx = StageContext(STAGE, params, run_dir)
    g = ctx.begin("export.ggml_model")
    if g:
        with g:
            info = obtain_model(params["model"], cache_dir(), log=print, base_dir=params.base_dir)
            model_ref = ctx.write_json("model", {
                "kind": info.kind, "source_digest": info.source_digest, "origin": info.origin,
                "hf_dir": str(info.hf_dir), "language": info.language, "cached": info.cached})
            out = ctx.artifact_path(*GGML_MODEL)
            written = write_ggml_model(info.hf_dir, out)
            binary, binary_sha = ggml_binary(ctx)
            audio = runtime_tree(ctx) / contracts.TEST_AUDIO_IN_TREE
            model_arg = str(out)
            argv = [str(binary), "-m", model_arg, "-f", str(audio), "-d", LOAD_PROBE_MS,
                    "-t", "2", *contracts.greedy_decoding_args(model_language(params))]
            contracts.check_cli_argv(argv)
            res = run_child(argv, timeout=300)
            refs = [model_ref,
                    ctx.write_bytes("load_stderr", res.stderr, "load.stderr.txt"),
                    ctx.write_bytes("load_stdout", res.stdout, "load.stdout.txt")]
            refs.append(ctx.write_json("ggml", {
                "path": "/".join(GGML_MODEL), "model_arg": model_arg,
                "sha256": written.sha256, "bytes": written.bytes,
                "hparams": written.hparams, "n_tensors": written.n_tensors,
                "lossless": written.lossless, "binary_sha256": binary_sha,
                "probe": {"argv": res.argv, "returncode": res.returncode, "signal": res.signal,
                          "timed_out": res.timed_out, "wall_s": round(res.wall_s, 3),
                          "stderr_sha256": res.stderr_sha256,
                          "stdout_sha256": res.stdout_sha256}}))
            g.judge(refs, {"model.source_digest": info.source_digest,
                           "model.ggml.sha256": written.sha256,
                           "binary.ggml.sha256": binary_sha})
            ctx.facts.update({"model kind": info.kind, "model source digest": info.source_digest,
                              "Hugging Face folder": str(info.hf_dir),
                              "ggml-model.bin": f"{written.sha256} ({written.bytes} bytes)",
                              "hyper-parameters": written.hparams,
                              "load probe": f"{res.describe()} in {res.wall_s:.2f} s"})
    return ctx.finish()


def show(report: StageReport):
    """Display the export facts of a :class:`StageReport` as an escaped HTML table."""
    from IPython.display import HTML
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td><code>{html.escape(str(v))}</code></td></tr>"
                   for k, v in report.facts.items())
    return HTML(f"<h4>Export facts</h4><table class='vl'>{rows}</table>" if rows else
                "<p>No export facts: the export gates did not run (see the table above).</p>")
