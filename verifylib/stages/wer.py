"""Stage 05_wer: transcripts under identical greedy decoding, scored by policy wer-v1.

Implemented: ``wer.ggml_vs_source`` — for every fixture, the Hugging Face source model's
transcript and the patched GGML ``whisper-cli`` transcript of the written
``ggml-model.bin``, both normalized by OpenAI's English normalizer and scored against
the fixture's reference text with jiwer. The pairwise GGML-vs-source WER is reported,
not gated. ``wer.hybrid`` (Core ML build, macOS) is not written yet.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from .. import contracts
from ..audio import audio_sha256, read_wav_16k
from ..gates import Judgement, Status, rule
from ..params import Params, fixture_text
from ..runner import run as run_child
from ..scoring import (count_words, corpus_wer, english_normalizer, judge_ggml_vs_source,
                       load_policy)
from ..stage import StageContext, StageReport
from .build import ggml_binary, runtime_tree
from .export import GGML_MODEL, model_language

STAGE = "05_wer"
POLICY_ID = "wer-v1"


@rule("wer.ggml_vs_source")
def _rule_ggml_vs_source(ev) -> Judgement:
    ok, detail = judge_ggml_vs_source(ev.json("wer"))
    return Judgement(Status.PASS if ok else Status.FAIL, detail)


def fixture_audio(ctx: StageContext, fixture: dict) -> Path:
    """Resolve a fixture's audio file (inside the verified runtime tree, or a local path)."""
    if "runtime_file" in fixture:
        path = runtime_tree(ctx) / fixture["runtime_file"]
    else:
        path = ctx.params.resolve(fixture["path"])
    if not path.is_file():
        raise FileNotFoundError(f"fixture {fixture['id']}: audio file {path} not found")
    return path


def ggml_transcribe(binary: Path, model: Path, audio: Path, language: str):
    """Transcribe one clip with whisper-cli's GGML encoder under the pinned greedy decoding.

    Returns
    -------
    (str, RunResult)
        The transcript (stdout, whitespace-joined) and the complete run.
    """
    argv = [str(binary), "-m", str(model), "-f", str(audio), "-t", "2",
            *contracts.greedy_decoding_args(language)]
    contracts.check_cli_argv(argv)
    res = run_child(argv, timeout=600)
    return " ".join(res.stdout_text.split()), res


def run(params: Params, run_dir: str | os.PathLike) -> StageReport:
    """Run stage 05_wer.

    Parameters
    ----------
    params : Params
        Validated parameters (``fixtures`` and ``model.language``).
    run_dir : path-like
        The run directory.

    Returns
    -------
    StageReport
        With ``facts["clips"]`` holding the per-clip table shown by :func:`show`.
    """
    from ..model import load_hf, transcribe_hf

    ctx = StageContext(STAGE, params, run_dir)
    g = ctx.begin("wer.ggml_vs_source")
    if g:
        with g:
            policy = load_policy(POLICY_ID)
            norm = english_normalizer()
            # The policy is bound to the run before anything is measured.
            refs = [ctx.write_json("policy", {"id": policy.id, "sha256": policy.sha256,
                                              "rules": policy.rules})]
            fixtures = params["fixtures"]
            if not fixtures:
                raise ValueError("no fixtures in the parameters: nothing to transcribe")
            model_ev = ctx.evidence_of("export.ggml_model", "model")
            ggml_ev = ctx.evidence_of("export.ggml_model", "ggml")
            model_file = ctx.run_dir.joinpath(*GGML_MODEL)
            binary, binary_sha = ggml_binary(ctx)
            bundle = load_hf(model_ev["hf_dir"])
            lang = model_language(params)
            clips, table = [], []
            for fx in fixtures:
                audio_path = fixture_audio(ctx, fx)
                audio = read_wav_16k(audio_path)
                raw_src = transcribe_hf(bundle, audio, lang)
                raw_ggml, res = ggml_transcribe(binary, model_file, audio_path, lang)
                if not res.ok:
                    raise RuntimeError(f"whisper-cli failed on fixture {fx['id']}: "
                                       f"{res.describe()}\n{res.stderr_text[-2000:]}")
                reference_raw = fixture_text(params, fx) or raw_src
                ref, src, ggml = norm(reference_raw), norm(raw_src), norm(raw_ggml)
                c_src, c_ggml = count_words(ref, src), count_words(ref, ggml)
                pair = count_words(src, ggml)
                clip = {"id": fx["id"], "public": fx["public"],
                        "audio_sha256": audio_sha256(audio_path),
                        "reference_from": "text" if fixture_text(params, fx) else "source",
                        "source": c_src.as_dict(), "ggml": c_ggml.as_dict(),
                        "pairwise": pair.as_dict(),
                        "source_empty": not src.strip(), "ggml_empty": not ggml.strip(),
                        "ggml_run": {"returncode": res.returncode, "signal": res.signal,
                                     "wall_s": round(res.wall_s, 3),
                                     "stderr_sha256": res.stderr_sha256}}
                if fx["public"]:
                    clip.update({"reference": ref, "source_text": src, "ggml_text": ggml,
                                 "raw_source": raw_src, "raw_ggml": raw_ggml})
                    refs.append(ctx.write_bytes(f"ggml_stderr_{fx['id']}", res.stderr,
                                                f"ggml-{fx['id']}.stderr.txt"))
                clips.append(clip)
                table.append({"id": fx["id"], "public": fx["public"],
                              "reference": reference_raw if fx["public"] else "(not public)",
                              "source": raw_src if fx["public"] else "(not public)",
                              "ggml": raw_ggml if fx["public"] else "(not public)",
                              "wer_source": c_src.wer, "wer_ggml": c_ggml.wer,
                              "wer_pairwise": pair.wer})
                print(f"{fx['id']}: WER source {c_src.wer:.3f}, GGML {c_ggml.wer:.3f}, "
                      f"pairwise {pair.wer:.3f}")
            refs.append(ctx.write_json("wer", {
                "policy": policy.rules, "policy_sha256": policy.sha256,
                "normalizer": norm.identity, "model_ggml_sha256": ggml_ev["sha256"],
                "binary_sha256": binary_sha, "decoding": contracts.greedy_decoding_args(lang),
                "clips": clips}))
            ids = {"policy.wer.id": policy.id, "policy.wer.sha256": policy.sha256,
                   "normalizer.mapping_sha256": norm.identity["mapping_sha256"],
                   "model.ggml.sha256": ggml_ev["sha256"], "binary.ggml.sha256": binary_sha}
            ids.update({f"fixture.{c['id']}.sha256": c["audio_sha256"] for c in clips})
            g.judge(refs, ids)
            ctx.facts["clips"] = table
            ctx.facts["corpus"] = {
                "source": corpus_wer([c["source"] for c in clips]),
                "ggml": corpus_wer([c["ggml"] for c in clips]),
                "pairwise": corpus_wer([c["pairwise"] for c in clips])}
    return ctx.finish()


def show(report: StageReport):
    """Show the transcripts side by side (escaped) and a per-clip WER chart."""
    from IPython.display import HTML, display
    clips = report.facts.get("clips")
    if not clips:
        return HTML("<p>No transcripts: the WER gates did not run (see the table above).</p>")
    e = html.escape
    corpus = report.facts["corpus"]
    rows = "".join(
        f"<tr><td>{e(c['id'])}</td><td>{e(c['reference'])}</td><td>{e(c['source'])}</td>"
        f"<td>{e(c['ggml'])}</td><td>{c['wer_source']:.3f}</td><td>{c['wer_ggml']:.3f}</td>"
        f"<td>{c['wer_pairwise']:.3f}</td></tr>" for c in clips)
    display(HTML(
        "<h4>Transcripts (raw, before normalization)</h4><table class='vl'><tr><th>clip</th>"
        "<th>reference</th><th>HF source</th><th>GGML whisper-cli</th><th>WER source</th>"
        f"<th>WER GGML</th><th>GGML vs source</th></tr>{rows}</table>"
        f"<p>Corpus WER against the references: HF source {corpus['source']:.4f}, GGML "
        f"{corpus['ggml']:.4f}; pairwise GGML vs source {corpus['pairwise']:.4f} (reported, "
        f"not gated).</p>"))
    import matplotlib.pyplot as plt
    import numpy as np
    ids = [c["id"] for c in clips]
    x = np.arange(len(ids))
    fig, ax = plt.subplots(figsize=(max(4, 0.9 * len(ids) + 2), 3))
    ax.bar(x - 0.2, [c["wer_source"] for c in clips], 0.4, label="HF source")
    ax.bar(x + 0.2, [c["wer_ggml"] for c in clips], 0.4, label="GGML whisper-cli")
    ax.set_xticks(x, ids, rotation=30, ha="right")
    ax.set_ylabel("WER vs reference")
    ax.set_title("Per-clip WER (normalized)")
    ax.legend()
    fig.tight_layout()
    plt.show()
    return None
