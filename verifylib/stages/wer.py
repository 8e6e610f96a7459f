"""Stage 05_wer: transcripts under the policy's decoding pin, scored by policy wer-v3.

``wer.ggml_vs_source`` (any OS): for every fixture, in its language (its own
``language``, else the model's), the Hugging Face source model's transcript and the
patched GGML ``whisper-cli`` transcript of the written ``ggml-model.bin``, both read from
the one 16 kHz file the fixture intake made (:mod:`verifylib.runtime.audio_intake`),
normalized and counted as wer-v3 says for that language (English: OpenAI's English
normalizer, words; languages written without spaces: the basic normalizer, characters;
every other: the basic normalizer, words), scored against the fixture's reference text
with jiwer. The pairwise GGML-vs-source rate is reported, not gated.

``wer.hybrid`` (macOS): the Core ML build with the ``.mlmodelc`` beside the model, one run
per fixture in its language, each run held to the four load conditions of
docs/runtime-contract.md §2.3, and the transcripts held to the policy's hybrid rule (which
alone catches a silent nil prediction).

Non-public fixtures persist only digests and edit counts: their texts and transcripts
stay in memory and never reach evidence, notebooks or the report.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from verifylib.errors import ParametersInvalid, PrerequisiteBroken, RunFailure
from verifylib.evidence import identities
from verifylib.evidence.canary.seam_schema import SeamEncoderRef
from verifylib.evidence.gates import EXPORT_GGML_MODEL, WER_GGML_VS_SOURCE, WER_HYBRID, WER_SEAM
from verifylib.evidence.run_record import RunRecord, SeamExecutorRecord
from verifylib.evidence.stage_report import StageReport
from verifylib.evidence.wer.result import wer_result_from_evidence
from verifylib.evidence.wer.schema import (
    Counts,
    Detected,
    Heard,
    HybridClip,
    HybridEvidence,
    WerClip,
    WerEvidence,
    WerPolicy,
    audio_evidence,
)
from verifylib.evidence.wer.seam_schema import SeamWerClip, SeamWerEvidence, SeamWerVariant
from verifylib.numerics.scoring import (
    english_normalizer,
    load_policy,
    normalizer_identities,
    scoring_for,
)
from verifylib.params import Fixture, Params, fixture_text
from verifylib.runtime import contracts
from verifylib.runtime.audio import read_wav_16k
from verifylib.runtime.runner import run_record, run_whisper_cli
from verifylib.stages.artifacts import (
    coreml_binary,
    fixture_intake,
    fixture_language,
    ggml_binary,
    model_language,
    published_model,
)
from verifylib.stages.context import StageContext
from verifylib.stages.seam import (
    SeamEncoder,
    executor_record,
    seam_build,
    seam_encoder,
    seam_launch,
    seam_variants,
)

if TYPE_CHECKING:

    from verifylib.evidence.records import EvidenceRef
    from verifylib.numerics.scoring import WordCounts
    from verifylib.runtime.runner import RunResult

STAGE = "05_wer"
POLICY_ID = "wer-v3"


@dataclass(frozen=True)
class ClipText:
    """One fixture's texts in memory (normalized), whatever its ``public`` flag."""

    id: str
    public: bool
    audio: Path
    reference: str
    source: str
    ggml: str
    raw_reference: str
    raw_source: str
    raw_ggml: str
    language: str | None = None  # None: the model's


def cli_transcribe(binary: Path, model_arg: str, audio: Path, language: str,
                   timeout: float = 600.0, pin: Mapping[str, Any] = contracts.GREEDY_PIN
                   ) -> tuple[str, RunResult]:
    """Transcribe one clip with whisper-cli under a decoding pin (greedy by default).

    Parameters
    ----------
    binary : Path
        The whisper-cli.
    model_arg : str
        The ``-m`` string, passed verbatim.
    audio : Path
        The clip.
    language : str
        The decoding language.
    timeout : float
        Seconds before the run is killed.
    pin : mapping
        The WER policy's ``decoding`` (:func:`verifylib.runtime.contracts.decoding_args`).

    Returns
    -------
    (str, RunResult)
        The transcript (stdout, whitespace-joined) and the complete run.
    """
    argv = [str(binary), "-m", model_arg, "-f", str(audio), "-t", "2",
            *contracts.decoding_args(language, **pin)]
    res = run_whisper_cli(argv, timeout=timeout)
    return " ".join(res.stdout_text.split()), res


def cli_detect_language(binary: Path, model_arg: str, audio: Path, timeout: float = 600.0
                        ) -> tuple[tuple[str, float] | None, RunResult]:
    """Detect one clip's language with whisper-cli (``-dl``), without transcribing it.

    Parameters
    ----------
    binary : Path
        The whisper-cli.
    model_arg : str
        The ``-m`` string, passed verbatim (a multilingual model).
    audio : Path
        The clip.
    timeout : float
        Seconds before the run is killed.

    Returns
    -------
    (tuple of (str, float) or None, RunResult)
        The language and its probability as the launch logged them, and the complete run.
    """
    argv = [str(binary), "-m", model_arg, "-f", str(audio), "-t", "2",
            *contracts.detect_language_args()]
    res = run_whisper_cli(argv, timeout=timeout)
    return contracts.parse_detected_language(res.stderr_text), res


def ggml_vs_source(ctx: StageContext, params: Params
                   ) -> tuple[list[EvidenceRef], dict[str, Any], list[ClipText]]:
    """Transcribe every fixture with HF and GGML and write ``wer.ggml_vs_source`` evidence.

    Parameters
    ----------
    ctx : StageContext
        Stage 05's context.
    params : Params
        The run's parameters (fixtures, language).

    Returns
    -------
    refs : list of EvidenceRef
        The policy, every clip's stderr evidence (and stdout for public fixtures) and
        the ``wer`` record.
    identities : dict
        Policy, normalizer, model and binary digests, and each fixture's audio digest.
    texts : list of ClipText
        The normalized and raw texts of every clip, for the hybrid gate and the display.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If the parameters name no fixture.
    """
    from verifylib.models.ggml_import import import_ggml_cached
    from verifylib.resources import cache_dir

    policy = load_policy(POLICY_ID)
    # The policy is bound to the run before anything is measured.
    refs = [ctx.write_json("policy", {"id": policy.id, "sha256": policy.sha256,
                                      "rules": policy.rules})]
    fixtures = params.fixtures
    if not fixtures:
        raise ParametersInvalid("no fixtures in the parameters: nothing to transcribe")
    model_ev = ctx.evidence_of(EXPORT_GGML_MODEL, "model")
    ggml_ev = ctx.evidence_of(EXPORT_GGML_MODEL, "ggml")
    model_file, _ = published_model(ctx)
    binary, binary_sha = ggml_binary(ctx)
    # The third leg: the reference implementation on the weights the ggml file holds. Source
    # against it isolates the conversion (and quantization); it against whisper-cli isolates
    # the implementation (docs/runtime-contract.md §7.4).
    imported = import_ggml_cached(model_file, cache_dir(), log=print)
    same = Path(imported.hf_dir) == Path(model_ev["hf_dir"])
    intakes = {fx.id: fixture_intake(ctx, fx) for fx in fixtures}
    hf = _hf_legs(params, fixtures, intakes, _pin(policy.rules), model_ev["hf_dir"],
                  None if same else imported.hf_dir)
    lang = model_language(params)
    clips: list[WerClip] = []
    texts: list[ClipText] = []
    # The GGML runs read the model from a scratch folder with nothing beside it, so no
    # .mlmodelc can be near the model whatever the run directory holds.
    scratch = Path(tempfile.mkdtemp(prefix="verifylib-ggml-"))
    try:
        ggml_arg = str(scratch / model_file.name)
        try:
            os.link(model_file, ggml_arg)
        except OSError:
            shutil.copyfile(model_file, ggml_arg)
        mlmodelc_beside = os.path.exists(contracts.coreml_encoder_path(ggml_arg))
        for fx in fixtures:
            clips.append(_ggml_clip(ctx, params, fx, intakes[fx.id], hf, binary, ggml_arg,
                                    policy.rules, refs, texts))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    refs.append(ctx.write_json("wer", WerEvidence(
        policy=WerPolicy.from_json(policy.rules), clips=tuple(clips),
        policy_sha256=policy.sha256, normalizer=normalizer_identities(policy.rules),
        model_ggml_sha256=ggml_ev["sha256"], binary_sha256=binary_sha,
        mlmodelc_beside=mlmodelc_beside,
        decoding=tuple(contracts.decoding_args(lang, **_pin(policy.rules))),
        from_ggml={"hf_dir_source_sha256": imported.source_sha256,
                   "lossy": bool(imported.lossy),
                   "same_as_source": same}).to_json()))
    ids = {identities.POLICY_WER_ID: policy.id, identities.POLICY_WER_SHA256: policy.sha256,
           "normalizer.mapping_sha256": english_normalizer().identity["mapping_sha256"],
           identities.MODEL_GGML: ggml_ev["sha256"], identities.BINARY_GGML: binary_sha}
    ids.update({f"fixture.{c.id}.sha256": str(c.audio_sha256) for c in clips})
    return refs, ids, texts


@dataclass(frozen=True)
class _HfHeard:
    """What the Hugging Face legs heard on every clip: ``source`` and ``from_ggml``, by fixture.

    Each value is ``(raw transcript, detected (language, p) or None)``; ``multilingual``
    says whether the languages were detected (the source model is multilingual).
    """

    source: dict[str, tuple[str, tuple[str, float] | None]]
    from_ggml: dict[str, tuple[str, tuple[str, float] | None]]
    multilingual: bool


def _hf_legs(params: Params, fixtures: Sequence[Fixture], intakes: Mapping[str, Any],
             pin: Mapping[str, Any], source_dir: str | os.PathLike[str],
             from_ggml_dir: str | os.PathLike[str] | None) -> _HfHeard:
    """Run each Hugging Face leg over every clip, with one model in memory at a time.

    The source model transcribes (and, multilingual, detects the language of) every clip,
    and is released before the model imported from the ggml file is loaded, so the stage's
    peak holds one Hugging Face model, not two (large-v3: about 6 GiB each in float32).
    ``from_ggml_dir`` None means the ggml file holds the source's own weights: one leg.
    """
    import gc

    from verifylib.models.hf import detect_language_hf, load_hf, transcribe_hf

    hf_pin = {"num_beams": pin["beam_size"], "return_timestamps": pin["timestamps"]}
    heard: list[dict[str, tuple[str, tuple[str, float] | None]]] = []
    multilingual = False
    for i, hf_dir in enumerate((source_dir, from_ggml_dir)):
        if hf_dir is None:
            heard.append(heard[0])
            continue
        bundle = load_hf(hf_dir)
        multilingual = multilingual or (i == 0 and bundle.is_multilingual)
        leg = {}
        for fx in fixtures:
            audio = read_wav_16k(intakes[fx.id].pcm_path)
            text = transcribe_hf(bundle, audio, fixture_language(params, fx), **hf_pin)
            leg[fx.id] = (text, detect_language_hf(bundle, audio) if multilingual else None)
        heard.append(leg)
        del bundle
        gc.collect()  # the weights go before the next leg's arrive
    return _HfHeard(heard[0], heard[1], multilingual)


def _pin(rules: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the policy's decoding pin (wer-v3), else the greedy pin the code held before."""
    return rules.get("decoding") or contracts.GREEDY_PIN


def _ggml_clip(ctx: StageContext, params: Params, fx: Fixture, got: Any, hf: _HfHeard,
               binary: Path, ggml_arg: str, rules: Mapping[str, Any], refs: list[EvidenceRef],
               texts: list[ClipText]) -> WerClip:
    """Transcribe one fixture with GGML beside what the HF legs heard; score it by the policy."""
    # Both legs read the one 16 kHz file decoded from the fixture (runtime/audio_intake.py).
    audio_path = got.pcm_path
    lang = fixture_language(params, fx)
    sc = scoring_for(rules, lang)

    def norm(text: str) -> str:
        return sc.normalize(rules, text)

    def count(ref: str, hyp: str) -> WordCounts:
        return sc.count(rules, ref, hyp)
    pin = _pin(rules)
    # Both implementations under the policy's one pin.
    raw_src, raw_fg = hf.source[fx.id][0], hf.from_ggml[fx.id][0]
    raw_ggml, res = cli_transcribe(binary, ggml_arg, audio_path, lang, pin=pin)
    if not res.ok:
        raise RunFailure(f"whisper-cli failed on fixture {fx.id}: {res.describe()}\n"
                           f"{res.stderr_text[-2000:]}")
    detected, detect_run = (_detect_languages(ctx, fx, hf, binary, ggml_arg, audio_path, refs)
                            if hf.multilingual else (None, None))
    given = fixture_text(params, fx)
    raw_ref = given or raw_src
    t = ClipText(fx.id, fx.public, audio_path, norm(raw_ref), norm(raw_src),
                 norm(raw_ggml), raw_ref, raw_src, raw_ggml, lang)
    texts.append(t)
    c_src, c_ggml = count(t.reference, t.source), count(t.reference, t.ggml)
    c_pair = count(t.source, t.ggml)
    fg = norm(raw_fg)
    c_fg, c_conv, c_impl = count(t.reference, fg), count(t.source, fg), count(fg, t.ggml)
    # raw_reference (public clips only, like every text): the text as given, which the
    # stage's result shows beside the raw transcripts (the rule scores the normalized texts).
    texts_of = ({"reference": t.reference, "source_text": t.source, "ggml_text": t.ggml,
                 "raw_reference": raw_ref, "raw_source": raw_src, "raw_ggml": raw_ggml,
                 "from_ggml_text": fg, "raw_from_ggml": raw_fg}
                if t.public else {})
    clip = WerClip(
        id=t.id, public=t.public, audio_sha256=got.source_sha256, intake=got.to_json(),
        language=lang, normalizer=sc.normalizer, unit=sc.unit,
        reference_from="text" if given else "source",
        source=Counts(**c_src.as_dict()), ggml=Counts(**c_ggml.as_dict()),
        pairwise=Counts(**c_pair.as_dict()),
        from_ggml=Counts(**c_fg.as_dict()), conversion=Counts(**c_conv.as_dict()),
        implementation=Counts(**c_impl.as_dict()), from_ggml_empty=not fg.strip(),
        source_empty=not t.source.strip(), ggml_empty=not t.ggml.strip(),
        # The full run record: the ledger check matches its argv, exit, signal and
        # stream digests (digests only, never the text) against the launch it cites.
        ggml_run=RunRecord.from_json(run_record(res), "ggml_run"), detected=detected,
        detect_run=detect_run, **texts_of)
    # stderr holds logs only (the transcript is on stdout): kept for every clip so the
    # validator can re-check COREML = 0 on each run.
    refs.append(ctx.write_bytes(f"ggml_stderr_{t.id}", res.stderr, f"ggml-{t.id}.stderr.txt"))
    if t.public:
        # The 16 kHz file both legs heard, so a reader of the report can listen to what
        # was scored; the rule holds it to the intake's digest. Private clips: never.
        refs.append(ctx.write_bytes(audio_evidence(t.id), Path(audio_path).read_bytes(),
                                    f"audio-{t.id}.wav"))
    _print_clip(t, sc.unit, detected, c_src, c_fg, c_ggml, c_conv, c_impl)
    return clip


def _detect_languages(ctx: StageContext, fx: Fixture, hf: _HfHeard, binary: Path,
                      ggml_arg: str, audio_path: Path, refs: list[EvidenceRef]
                      ) -> tuple[Detected, RunRecord]:
    """Detect the clip's language with whisper-cli; every leg's language, and its run."""
    # Facts, not gated: the language each leg hears, beside the one it was told.
    heard, dres = cli_detect_language(binary, ggml_arg, audio_path)
    if not dres.ok or heard is None:
        raise RunFailure(f"whisper-cli -dl failed on fixture {fx.id}: {dres.describe()}\n"
                         f"{dres.stderr_text[-2000:]}")
    src, fg = hf.source[fx.id][1], hf.from_ggml[fx.id][1]
    if src is None or fg is None:
        raise RuntimeError(f"fixture {fx.id}: a multilingual leg detected no language")
    legs = {"source": src, "from_ggml": fg, "ggml": heard}
    detected = Detected(**{leg: Heard(language=code, p=round(p, 6))
                           for leg, (code, p) in legs.items()})
    detect_run = RunRecord.from_json(run_record(dres), "detect_run")
    refs.append(ctx.write_bytes(f"ggml_detect_stderr_{fx.id}", dres.stderr,
                                f"ggml-detect-{fx.id}.stderr.txt"))
    return detected, detect_run


def _print_clip(t: ClipText, unit: str, detected: Detected | None, c_src: WordCounts,
                c_fg: WordCounts, c_ggml: WordCounts, c_conv: WordCounts,
                c_impl: WordCounts) -> None:
    """Print the clip's line: each leg's rate, the conversion's and the implementation's."""
    rate = "CER" if unit == "characters" else "WER"
    heard_as = "" if detected is None else (
        "; heard as " + ", ".join(f"{leg} {h.language} (p {h.p:.2f})" for leg, h in (
            ("source", detected.source), ("HF-from-ggml", detected.from_ggml),
            ("GGML", detected.ggml))))
    print(f"{t.id} ({t.language}): {rate} source {c_src.wer:.3f}, HF-from-ggml {c_fg.wer:.3f}, "
          f"GGML {c_ggml.wer:.3f}; conversion {c_conv.wer:.3f}, implementation "
          f"{c_impl.wer:.3f}{heard_as}")


def hybrid(ctx: StageContext, *, binary: Path, binary_sha256: str, model_arg: str,
           texts: list[ClipText], language: str, timeout: float = 600.0
           ) -> tuple[list[EvidenceRef], dict[str, Any], dict[str, str]]:
    """Transcribe every fixture with the Core ML build and write ``wer.hybrid`` evidence.

    Parameters
    ----------
    ctx : StageContext
        The 05_wer stage context.
    binary, binary_sha256 : Path, str
        The ``build.coreml`` whisper-cli and its digest.
    model_arg : str
        The ``-m`` string; its ``.mlmodelc`` must sit at ``coreml_encoder_path(model_arg)``.
    texts : list of ClipText
        The GGML and source results of ``wer.ggml_vs_source``.
    language : str
        Decoding language of a clip that names none (the model's).
    timeout : float
        Per-run timeout (the first, compiling run happened in the canary stage).

    Returns
    -------
    (refs, identities, transcripts)
        ``transcripts`` maps clip id to the raw hybrid transcript (public clips only).
    """
    policy = load_policy(POLICY_ID)
    rules = policy.rules
    refs: list[EvidenceRef] = []
    clips: list[HybridClip] = []
    shown: dict[str, str] = {}
    for t in texts:
        # Each clip in its own language, scored as wer.ggml_vs_source scored it.
        sc = scoring_for(rules, t.language or language)
        raw, res = cli_transcribe(binary, model_arg, t.audio, sc.language, timeout,
                                  pin=_pin(rules))
        text = sc.normalize(rules, raw)
        texts_of: dict[str, str] = {}
        # stderr carries logs only (the transcript is on stdout), so it is kept for every
        # clip: the validator re-checks the four load conditions on it.
        refs.append(ctx.write_bytes(f"hybrid_stderr_{t.id}", res.stderr,
                                    f"hybrid-{t.id}.stderr.txt"))
        if t.public:
            refs.append(ctx.write_bytes(f"hybrid_stdout_{t.id}", res.stdout,
                                        f"hybrid-{t.id}.stdout.txt"))
            texts_of = {"reference": t.reference, "ggml_text": t.ggml, "hybrid_text": text}
            shown[t.id] = raw
        clips.append(HybridClip(
            id=t.id, public=t.public, run=RunRecord.from_json(run_record(res), "run"),
            source=Counts(**sc.count(rules, t.reference, t.source).as_dict()),
            ggml=Counts(**sc.count(rules, t.reference, t.ggml).as_dict()),
            hybrid=Counts(**sc.count(rules, t.reference, text).as_dict()),
            hybrid_vs_ggml=Counts(**sc.count(rules, t.ggml, text).as_dict()),
            hybrid_empty=not text.strip(), language=sc.language, normalizer=sc.normalizer,
            unit=sc.unit, **texts_of))
    refs.append(ctx.write_json("hybrid", HybridEvidence(
        policy=WerPolicy.from_json(policy.rules), clips=tuple(clips),
        policy_sha256=policy.sha256, binary_sha256=binary_sha256,
        model_arg=model_arg).to_json()))
    return refs, {identities.BINARY_COREML: binary_sha256,
                  identities.POLICY_WER_SHA256: policy.sha256}, shown


def seam_wer(ctx: StageContext, *, texts: list[ClipText], language: str,
             timeout: float = 600.0) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Transcribe every fixture through the seam, per encoder variant; write ``wer.seam``.

    The patched seam build decodes each clip under the policy's pin, in the clip's language,
    with the same command line as the GGML leg (``-t 2``), once with the fp32 program and
    once with the fp16 one (when exported), each executed in Apple's place by an executor
    served from this process. Each transcript is scored against the reference and against
    the GGML transcript of the same clip; a difference is the encoder's numbers (the
    decoder, the mel and the pin are shared).

    Parameters
    ----------
    ctx : StageContext
        Stage 05's context.
    texts : list of ClipText
        The clips of ``wer.ggml_vs_source`` (references and GGML transcripts).
    language : str
        The model's language (a clip that names none).
    timeout : float
        Seconds per launch.

    Returns
    -------
    (list of EvidenceRef, dict)
        The ``seam_wer`` document and every launch's streams (stdout of public clips
        only), and the identities.
    """
    from verifylib.models.seam_encoder import SeamLoadRefused
    from verifylib.numerics.seam_executor import SeamExecutor

    policy = load_policy(POLICY_ID)
    rules = policy.rules
    b = seam_build(ctx, "patched")
    binary = Path(b["binary"])
    refs: list[EvidenceRef] = []
    ids: dict[str, Any] = {identities.BINARY_SEAM: b["sha256"],
                           identities.POLICY_WER_SHA256: policy.sha256}
    variants: list[SeamWerVariant] = []
    scratch = Path(tempfile.mkdtemp(prefix="verifylib-seam-wer-"))
    try:
        with SeamExecutor() as ex:
            for variant in seam_variants(ctx):
                enc = seam_encoder(ctx, variant, scratch)
                ids[enc.identity_key] = enc.tree_digest
                try:
                    ex.preload(enc.folder)
                except SeamLoadRefused:
                    pass  # each launch's init is refused in turn; the evidence says why
                clips = [_seam_clip(ctx, ex, binary, enc, t, language, rules, timeout, refs)
                         for t in texts]
                variants.append(SeamWerVariant(encoder=SeamEncoderRef.from_json(enc.to_json()),
                                               clips=tuple(clips)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    refs.append(ctx.write_json("seam_wer", SeamWerEvidence(
        policy=WerPolicy.from_json(rules), policy_sha256=policy.sha256, binary=str(binary),
        binary_sha256=b["sha256"], fixtures=tuple(t.id for t in texts),
        variants=tuple(variants)).to_json()))
    return refs, ids


def _seam_clip(ctx: StageContext, ex: Any, binary: Path, enc: SeamEncoder, t: ClipText,
               language: str, rules: Mapping[str, Any], timeout: float,
               refs: list[EvidenceRef]) -> SeamWerClip:
    """One fixture through the seam with one variant: launch, score, store its streams."""
    sc = scoring_for(rules, t.language or language)
    variant = enc.variant
    argv = [str(binary), "-m", enc.model_arg, "-f", str(t.audio), "-t", "2",
            *contracts.decoding_args(sc.language, **_pin(rules))]
    res, launch = seam_launch(ex, argv, timeout=timeout, output_floats=enc.output_floats)
    raw = " ".join(res.stdout_text.split())
    text = sc.normalize(rules, raw)
    vs_ggml = sc.count(rules, t.ggml, text)
    refs.append(ctx.write_bytes(f"seam_stderr_{variant}_{t.id}", res.stderr,
                                f"seam-{variant}-{t.id}.stderr.txt"))
    texts_of: dict[str, str] = {}
    if t.public:
        refs.append(ctx.write_bytes(f"seam_stdout_{variant}_{t.id}", res.stdout,
                                    f"seam-{variant}-{t.id}.stdout.txt"))
        texts_of = {"reference": t.reference, "ggml_text": t.ggml, "seam_text": text,
                    "raw_seam": raw}
    differs = text != t.ggml
    seam_c = sc.count(rules, t.reference, text)
    rate = "CER" if sc.unit == "characters" else "WER"
    print(f"{t.id} ({sc.language}) seam {variant}: {rate} {seam_c.wer:.3f}, vs GGML "
          f"{vs_ggml.wer:.3f}{' (differs: encoder)' if differs else ''}"
          f"{'' if res.ok else f'; launch {res.describe()}'}")
    rec = executor_record(launch)
    return SeamWerClip(
        id=t.id, public=t.public, language=sc.language, normalizer=sc.normalizer,
        unit=sc.unit, run=RunRecord.from_json(run_record(res), "run"),
        executor=None if rec is None else SeamExecutorRecord.from_json(rec, "executor"),
        seam=Counts(**seam_c.as_dict()), ggml=Counts(**sc.count(rules, t.reference,
                                                                  t.ggml).as_dict()),
        seam_vs_ggml=Counts(**vs_ggml.as_dict()), seam_empty=not text.strip(),
        cause="encoder" if differs else "same", **texts_of)


def run(params: Params, run_dir: str | os.PathLike[str]) -> StageReport:
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
        With ``result`` (:class:`~verifylib.evidence.wer.result.WerResult`) holding the
        per-clip table shown by :func:`verifylib.views.wer.show`.
    """
    ctx = StageContext(STAGE, params, run_dir)
    texts: list[ClipText] = []
    g = ctx.begin(WER_GGML_VS_SOURCE)
    if g:
        with g:
            refs, ids, texts = ggml_vs_source(ctx, params)
            g.judge(refs, ids)
    g = ctx.begin(WER_HYBRID)
    if g:
        with g:
            binary, sha = coreml_binary(ctx)
            _, model_arg = published_model(ctx)
            refs, ids, _ = hybrid(ctx, binary=binary, binary_sha256=sha, model_arg=model_arg,
                                  texts=texts, language=model_language(params))
            g.judge(refs, ids)
    g = ctx.begin(WER_SEAM, None if params.seam.enabled else "seam.enabled")
    if g:
        with g:
            if not texts:
                raise PrerequisiteBroken("wer.ggml_vs_source left no transcripts")
            refs, ids = seam_wer(ctx, texts=texts, language=model_language(params))
            g.judge(refs, ids)
    report = ctx.finish()
    # The per-clip table comes from the files the gates cite, as open_run reads it from a
    # published run; a non-public clip's texts never reach it (only its counts).
    report.result = wer_result_from_evidence(ctx.run_dir, ctx.records)
    return report
