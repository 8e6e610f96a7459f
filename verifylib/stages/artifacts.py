"""What earlier stages published, read back for later ones: the one place stages meet.

Stages stand side by side and never import each other. A later stage that needs a binary,
the source tree, the model file or a compiled encoder asks this module, which reads the
published gate records and evidence of *this* run directory and re-checks the bytes before
handing anything out: a cache folder or a binary is shared with other runs and may have
changed since the gate that vouched for it passed. Such a change raises
:class:`verifylib.errors.PrerequisiteBroken` (recorded as ERROR ``prerequisite-broken``),
never a silent fallback.

The names of published files (``fp32/ggml-model.bin``, ``ggml-model-encoder.mlpackage``)
live here too, so the writer and every reader spell them one way; the names of the
sidecars stage 01 leaves for stage 03 are in :mod:`verifylib.evidence.layout`, since the
run reader needs them as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from verifylib.canonical import read_json, sha256_file, tree_digest
from verifylib.errors import ParametersInvalid, PrerequisiteBroken
from verifylib.evidence import identities
from verifylib.evidence.build.schema import (
    CoremlBuildEvidence,
    GgmlBuildEvidence,
    SourceEvidence,
)
from verifylib.evidence.export.schema import GgmlModelEvidence
from verifylib.evidence.gates import (
    BUILD_COREML,
    BUILD_GGML,
    BUILD_SOURCE_IDENTITY,
    EXPORT_COMPILE,
    EXPORT_CONTRACT,
    EXPORT_GGML_MODEL,
)
from verifylib.evidence.layout import (
    ASAN_SIDECAR,
    EVIDENCE_DIR,
    UNPATCHED_IDENTITY,
    UNPATCHED_SIDECAR,
    USER_MANIFEST_EVIDENCE,
    USER_PATCH_EVIDENCE,
    read_stage_file,
)
from verifylib.evidence.records import EvidenceRef
from verifylib.params import Fixture, Params
from verifylib.resources import cache_dir
from verifylib.runtime.audio_intake import Intake, intake
from verifylib.runtime.sanitizer import SIDES as SANITIZER_SIDES
from verifylib.stages.context import StageContext

if TYPE_CHECKING:
    from verifylib.numerics.mil_compiled import CompiledSource
    from verifylib.numerics.mil_exec import Program
    from verifylib.whispercpp.source.fetch import SourceSpec

__all__ = [
    "GGML_MODEL", "ENCODER_PACKAGE", "ENCODER_COMPILED", "ASAN_SIDES", "BUILD_STAGE",
    "runtime_tree", "user_pin_evidence", "ggml_binary", "coreml_binary", "unpatched_binary",
    "asan_build", "sidecar_build",
    "published_model", "published_model_name", "audited_encoder", "AuditedEncoder",
    "GivenProgram", "given_program",
    "model_source", "source_ftype", "fixture_audio",
    "exported_variant", "compiled_variant", "published_mlmodelc", "model_language",
    "export_variants",
]

BUILD_STAGE = "01_build"

GGML_MODEL = ("fp32", "ggml-model.bin")
"""The whisper.cpp model file stage 02 writes, relative to the run directory."""

ENCODER_PACKAGE = "ggml-model-encoder.mlpackage"
"""Named after the model file: coremlc names its output after its input, so this compiles
to ``ggml-model-encoder.mlmodelc``, the path whisper.cpp derives from ``…/ggml-model.bin``."""

ENCODER_COMPILED = "ggml-model-encoder.mlmodelc"
"""The compiled encoder beside each variant's ``ggml-model.bin``."""


ASAN_SIDES = SANITIZER_SIDES
"""Side of ``canary.sanitizer`` -> (build variant, stage 01's identity for its digest)."""


def model_language(params: Params) -> str:
    """Return the decoding language of the model (parameter ``model.language``).

    Parameters
    ----------
    params : Params
        The run's parameters.

    Returns
    -------
    str
        The language code (``en`` unless the parameters say otherwise).
    """
    return params.model.language


def fixture_language(params: Params, fixture: Fixture) -> str:
    """Return the language a fixture is decoded and scored in.

    Parameters
    ----------
    params : Params
        The run's parameters.
    fixture : Fixture
        One of its fixtures.

    Returns
    -------
    str
        The fixture's own ``language``, else the model's (:func:`model_language`).
    """
    return fixture.language or model_language(params)


def export_variants(params: Params) -> list[str]:
    """List the Core ML variants stage 02 exports.

    Parameters
    ----------
    params : Params
        The run's parameters.

    Returns
    -------
    list of str
        ``fp32`` always, then ``fp16`` unless ``export.fp16`` is false.
    """
    return ["fp32"] + (["fp16"] if params.export.fp16 else [])


def runtime_tree(ctx: StageContext) -> Path:
    """Return the verified whisper.cpp source folder of this run (``build.source_identity``).

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    Path
        The folder, its git tree id checked again against the one that passed (on the
        stage's first call; later calls of the same stage return the checked folder).

    Raises
    ------
    PrerequisiteBroken
        If the gate did not pass, or the folder no longer has the tree id that passed.
    """
    from verifylib.whispercpp.source import git_tree_id

    if ctx.checked_runtime_tree is not None:
        return ctx.checked_runtime_tree
    ev = ctx.document(BUILD_SOURCE_IDENTITY, "source", SourceEvidence)
    path = Path(ev.path or "")
    if not ev.path or not path.is_dir() or git_tree_id(path) != ev.computed_tree:
        raise PrerequisiteBroken(f"runtime source {path} changed since "
                                 f"build.source_identity passed")
    ctx.checked_runtime_tree = path
    return path


def user_pin_evidence(ctx: StageContext) -> tuple[list[EvidenceRef], dict[str, Any]]:
    """Return the user manifest stage 01 carried for a user-declared pin, to cite again.

    A later gate that judges the builds against the pin (``canary.sanitizer``) cites the
    same carried files and binds the same identity as ``build.source_identity``, so its
    rule reads the pin from the run, as the build gates' do.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    (list of EvidenceRef, dict)
        The carried manifest and patches and ``{"runtime.manifest.sha256": …}``; both
        empty for a packaged pin, or when stage 01 recorded no source gate.
    """
    rec = ctx.prior().get(BUILD_SOURCE_IDENTITY)
    if rec is None:
        return [], {}
    refs = [r for r in rec.evidence
            if r.name == USER_MANIFEST_EVIDENCE or r.name.startswith(USER_PATCH_EVIDENCE)]
    ids = {k: v for k, v in rec.identities.items() if k == identities.RUNTIME_MANIFEST}
    return refs, ids


def ggml_binary(ctx: StageContext) -> tuple[Path, str]:
    """Return the ``build.ggml`` whisper-cli of this run and its SHA-256, re-hashed before use.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    binary : Path
        The whisper-cli.
    sha256 : str
        Its recorded (and re-checked) digest.

    Raises
    ------
    PrerequisiteBroken
        If the gate did not pass or the binary is not the recorded bytes.
    """
    return _passed_binary(ctx, BUILD_GGML, "build")


def coreml_binary(ctx: StageContext) -> tuple[Path, str]:
    """Return the ``build.coreml`` whisper-cli of this run and its SHA-256, re-hashed.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    binary : Path
        The Core ML whisper-cli.
    sha256 : str
        Its recorded (and re-checked) digest.

    Raises
    ------
    PrerequisiteBroken
        If the gate did not pass or the binary is not the recorded bytes.
    """
    return _passed_binary(ctx, BUILD_COREML, "coreml_build")


def _passed_binary(ctx: StageContext, gate_id: str, evidence: str) -> tuple[Path, str]:
    ev: CoremlBuildEvidence | GgmlBuildEvidence
    if gate_id == BUILD_COREML:
        ev = ctx.document(gate_id, evidence, CoremlBuildEvidence)
    else:
        ev = ctx.document(gate_id, evidence, GgmlBuildEvidence)
    binary = Path(ev.binary)
    if not binary.is_file() or sha256_file(binary) != ev.sha256:
        raise PrerequisiteBroken(f"{binary} is not the whisper-cli that passed {gate_id}")
    return binary, ev.sha256


def unpatched_binary(ctx: StageContext) -> tuple[Path, str]:
    """Return the unpatched whisper-cli stage 01 built in this run, re-hashed before use.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    binary : Path
        The unpatched whisper-cli (from stage 01's sidecar record).
    sha256 : str
        Its recorded (and re-checked) digest.

    Raises
    ------
    PrerequisiteBroken
        If stage 01 recorded none, its build failed, or the bytes or the identity differ.
    """
    path = ctx.run_dir / EVIDENCE_DIR / BUILD_STAGE / f"{UNPATCHED_SIDECAR}.json"
    if not path.is_file():
        raise PrerequisiteBroken("stage 01_build recorded no unpatched build")
    ev = read_json(path)
    if not ev.get("built"):
        raise PrerequisiteBroken(f"the unpatched build failed: {ev.get('error')}")
    ids = (read_stage_file(ctx.run_dir, BUILD_STAGE) or {}).get("identities", {})
    if ids.get(UNPATCHED_IDENTITY) != ev.get("sha256"):
        raise PrerequisiteBroken("the unpatched build record disagrees with stage 01's "
                                 "identities")
    binary = Path(ev["binary"])
    if not binary.is_file() or sha256_file(binary) != ev["sha256"]:
        raise PrerequisiteBroken(f"{binary} is not the unpatched whisper-cli stage 01 recorded")
    return binary, ev["sha256"]


def asan_build(ctx: StageContext, side: str) -> dict[str, Any]:
    """Return the AddressSanitizer build stage 01 recorded for one side, re-hashed before use.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    side : str
        ``"unpatched"`` or ``"patched"`` (see :data:`ASAN_SIDES`).

    Returns
    -------
    dict
        The side's build record from the sidecar ``asan_builds.json`` (``binary``,
        ``sha256``, ``variant``, ``options``, ``needed_libs``, ``static``, ``tree_id``,
        ``patch_sha256``, ``key`` …).

    Raises
    ------
    PrerequisiteBroken
        If stage 01 recorded no such build, the build failed, or the bytes or the
        identity differ from the record.
    """
    variant, identity = ASAN_SIDES[side]
    return sidecar_build(ctx, ASAN_SIDECAR, side, variant, identity, "AddressSanitizer")


def sidecar_build(ctx: StageContext, sidecar: str, side: str, variant: str, identity: str,
                  what: str, none_recorded: str = "") -> dict[str, Any]:
    """Return one side's build from a stage 01 sidecar of builds, re-hashed before use.

    The AddressSanitizer builds (:func:`asan_build`) and the seam builds are recorded alike:
    a sidecar maps each side to its build record, and stage 01 binds each built binary's
    digest to an identity.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    sidecar : str
        The sidecar's name (``asan_builds``, ``seam_builds``).
    side : str
        The side to return.
    variant : str
        The build variant the side must be.
    identity : str
        The identity stage 01 bound its digest to.
    what : str
        What the builds are, for messages (``AddressSanitizer``, ``seam``).
    none_recorded : str
        Added to the message when the sidecar is missing (the parameter that switches it off).

    Returns
    -------
    dict
        The side's build record (``binary``, ``sha256``, ``variant``, ``options``, ``key`` …).

    Raises
    ------
    PrerequisiteBroken
        If stage 01 recorded no such build, the build failed, or the bytes or the
        identity differ from the record.
    """
    path = ctx.run_dir / EVIDENCE_DIR / BUILD_STAGE / f"{sidecar}.json"
    if not path.is_file():
        raise PrerequisiteBroken(f"stage 01_build recorded no {what} builds{none_recorded}")
    ev = (read_json(path) or {}).get(side)
    if not isinstance(ev, dict):
        raise PrerequisiteBroken(f"stage 01_build recorded no {side} {what} build")
    if not ev.get("built"):
        raise PrerequisiteBroken(f"the {side} {what} build failed: {ev.get('error')}")
    if ev.get("variant") != variant:
        raise PrerequisiteBroken(f"the {side} {what} record is variant "
                                 f"{ev.get('variant')!r}, not {variant!r}")
    ids = (read_stage_file(ctx.run_dir, BUILD_STAGE) or {}).get("identities", {})
    if ids.get(identity) != ev.get("sha256"):
        raise PrerequisiteBroken(f"the {side} {what} build record disagrees with "
                                 f"stage 01's identities")
    binary = Path(ev["binary"])
    if not binary.is_file() or sha256_file(binary) != ev["sha256"]:
        raise PrerequisiteBroken(f"{binary} is not the {side} {what} whisper-cli "
                                 f"stage 01 recorded")
    return dict(ev)


def published_model_name(ftype: str) -> str:
    """Return the run-relative name of the published model file for a tensor type.

    ``fp32/ggml-model.bin`` for a full-precision file; a quantized one keeps its ftype as
    whisper.cpp's own files do (``fp32/ggml-model-q5_0.bin``), and whisper.cpp's Core ML
    path rule drops exactly that suffix, so the encoder beside it is still
    ``fp32/ggml-model-encoder.mlmodelc``.

    Parameters
    ----------
    ftype : str
        ``f32``, ``f16``, ``q8_0``, ``q5_1``, ``q5_0``, ``q4_1`` or ``q4_0``.

    Returns
    -------
    str
    """
    if ftype in ("f32", "f16"):
        return "/".join(GGML_MODEL)
    return f"{GGML_MODEL[0]}/ggml-model-{ftype}.bin"


@dataclass(frozen=True)
class AuditedEncoder:
    """The encoder the required gates audit, as ``export.contract`` placed it.

    Attributes
    ----------
    path : Path
        The placed ``.mlpackage`` or ``.mlmodelc`` (its tree digest checked again).
    rel_path : str
        Its run-relative path.
    format : str
        ``mlpackage`` or ``mlmodelc``.
    precision : str
        Its declared compute precision (``fp32`` for the suite's own export).
    identity_key : str
        The identity its tree digest is bound to.
    prebuilt : bool
        True for an encoder audited as given (parameter ``encoder.path``).
    """

    path: Path
    rel_path: str
    format: str
    precision: str
    identity_key: str
    prebuilt: bool


def audited_encoder(ctx: StageContext) -> AuditedEncoder:
    """Return the encoder ``export.contract`` placed in the gated (``fp32``) slot.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    AuditedEncoder

    Raises
    ------
    PrerequisiteBroken
        If the gate did not pass or the placed folder's bytes changed since.
    """
    exported = ctx.evidence_of(EXPORT_CONTRACT, "contract")
    v = exported_variant(ctx, "fp32")
    pre = exported.get("prebuilt")
    fmt = pre["format"] if pre else "mlpackage"
    precision = pre["precision"] if pre else "fp32"
    path = ctx.run_dir / v["path"]
    if not path.is_dir() or tree_digest(path) != v.get("tree_digest"):
        raise PrerequisiteBroken(f"{path} is not the encoder export.contract placed")
    return AuditedEncoder(path, v["path"], fmt, precision,
                          f"artifact.fp32.{fmt}.tree_digest", pre is not None)


@dataclass(frozen=True)
class GivenProgram:
    """A given ``.mlmodelc``'s program, read from its ``model.mil`` for the executor.

    Attributes
    ----------
    program : Program or None
        The program (:func:`verifylib.numerics.mil_compiled.load_compiled_program`), None
        when it could not be read.
    source : CompiledSource or None
        Where it was read from (the digests the evidence records).
    why_not : str or None
        Why it could not be read (added to the gate's NOT_RUN(platform) reason).
    """

    program: Program | None
    source: CompiledSource | None
    why_not: str | None


def given_program(ctx: StageContext) -> GivenProgram | None:
    """Read the program of the given ``.mlmodelc`` ``export.contract`` placed, off macOS.

    On macOS Core ML runs a given compiled model (``CompiledMLModel``), as before; elsewhere
    the gates that execute the audited encoder's program (``export.pair``,
    ``parity.program``) run it with the MIL executor when its ``model.mil`` reads whole.

    Parameters
    ----------
    ctx : StageContext
        The asking stage (02 or 04).

    Returns
    -------
    GivenProgram or None
        None when this does not apply: the encoder is not a given ``.mlmodelc``, or this
        host runs Core ML. Otherwise the program, or why it could not be read (the placed
        folder missing or changed, a ``model.mil`` the reader or the executor refuses).
    """
    from verifylib.evidence.gates import Capability, given_compiled_encoder
    from verifylib.runtime.capabilities import detect

    # A zip (upstream's download) was unpacked into the run: its placed folder is read.
    if given_compiled_encoder(ctx.params.data) is None or detect().has(Capability.MACOS):
        return None
    from verifylib.errors import VerifylibError
    from verifylib.numerics.mil_compiled import load_compiled_program
    try:
        placed = audited_encoder(ctx)
    except VerifylibError as exc:
        return GivenProgram(None, None, f"no compiled model to read ({exc})")
    try:
        program, source = load_compiled_program(placed.path)
    except (VerifylibError, OSError) as exc:
        return GivenProgram(None, None, "verifylib's executor cannot run the program of its "
                                        f"model.mil: {exc}")
    return GivenProgram(program, source, None)


def published_model(ctx: StageContext) -> tuple[Path, str]:
    """Return the model file that ``export.ggml_model`` published, and its ``-m``.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    path : Path
        The model file, its bytes checked again.
    model_arg : str
        The recorded ``-m`` string when it names that file, else ``str(path)``.

    Raises
    ------
    PrerequisiteBroken
        If the gate did not pass or the file's bytes are not the ones it recorded.
    """
    ev = ctx.document(EXPORT_GGML_MODEL, "ggml", GgmlModelEvidence)
    if ev.path != published_model_name(ev.ftype):
        raise PrerequisiteBroken(f"export.ggml_model names {ev.path!r}, not a model file name "
                                 f"this stage publishes")
    path = ctx.run_dir / ev.path
    if not path.is_file() or sha256_file(path) != ev.sha256:
        raise PrerequisiteBroken(f"{path} is not the model file that passed "
                                 f"export.ggml_model")
    return path, (ev.model_arg if Path(ev.model_arg) == path else str(path))


def source_ftype(ctx: StageContext) -> str | None:
    """Return the tensor type of a ggml-file source, or None for any other model kind.

    What ``export.ggml_model`` recorded of the published file when it passed (the file the
    gates measure), else the named file's header (stage 02's contract does not wait for the
    whisper.cpp build).

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    str or None
        The header's ftype (``f16``, ``q5_0`` ...) when ``model.kind`` is ``ggml``.
    """
    if ctx.params.model.kind != "ggml":
        return None
    try:
        return ctx.document(EXPORT_GGML_MODEL, "ggml", GgmlModelEvidence).ftype
    except PrerequisiteBroken:
        pass
    from verifylib.models.ggml_file import open_ggml

    return open_ggml(ctx.params.resolve(ctx.params.model.spec["path"])).ftype_name


def model_source(ctx: StageContext) -> dict[str, Any]:
    """Find the Hugging Face model folder of this run.

    ``export.ggml_model``'s evidence when it passed; otherwise the same intake done again
    (from the cache), so the Core ML gates do not depend on the whisper.cpp build.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    dict
        ``hf_dir``, ``source_digest`` and ``from`` (which of the two it came from).
    """
    try:
        ev = ctx.evidence_of(EXPORT_GGML_MODEL, "model")
        return {"hf_dir": ev["hf_dir"], "source_digest": ev["source_digest"],
                "from": "export.ggml_model evidence"}
    except PrerequisiteBroken:
        from verifylib.models.intake import obtain_model

        params = ctx.params
        info = obtain_model(params.model.spec, cache_dir(), log=print, base_dir=params.base_dir)
        return {"hf_dir": str(info.hf_dir), "source_digest": info.source_digest,
                "from": "model intake (export.ggml_model did not pass)"}


def fixture_audio(ctx: StageContext, fixture: Fixture) -> Path:
    """Locate a fixture's audio file: inside the verified runtime tree, or a local path.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    fixture : Fixture
        The fixture; its ``runtime_file`` (a file of the tree) or its ``path``
        (resolved against the parameter file) names the audio.

    Returns
    -------
    Path
        The audio file.

    Raises
    ------
    ParametersInvalid
        If the file does not exist.
    """
    if fixture.runtime_file is not None:
        path = runtime_tree(ctx) / fixture.runtime_file
    else:
        path = ctx.params.resolve(_local_path(fixture))
    if not path.is_file():
        raise ParametersInvalid(f"fixture {fixture.id}: audio file {path} not found")
    return path


def _local_path(fixture: Fixture) -> str:
    # Params validation leaves exactly one of runtime_file and path set.
    if fixture.path is None:
        raise ParametersInvalid(f"fixture {fixture.id}: neither runtime_file nor path is set")
    return fixture.path


def fixture_intake(ctx: StageContext, fixture: Fixture) -> Intake:
    """Decode a fixture once to the 16 kHz mono 16-bit WAV both legs read.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    fixture : Fixture
        The fixture (located by :func:`fixture_audio`).

    Returns
    -------
    verifylib.runtime.audio_intake.Intake
        The original's digest (the fixture's identity), the converted file in the shared
        cache (``<cache>/audio/<original sha256>/<fixture id>-16k.wav``, the same bytes for
        every stage and replay) and its digest. A damaged conversion found there is
        replaced, and the stage prints one line saying so.
    """
    return intake(fixture_audio(ctx, fixture), cache_dir() / "audio", fixture.id, log=print)


def exported_variant(ctx: StageContext, variant: str) -> dict[str, Any]:
    """Return ``export.contract``'s record of a placed variant (``fp32`` or ``fp16``).

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    variant : str
        ``fp32`` or ``fp16``.

    Returns
    -------
    dict
        The variant's entry of the gate's ``contract`` evidence.

    Raises
    ------
    PrerequisiteBroken
        If the gate did not pass, or the variant was not exported or not placed.
    """
    variants: list[dict[str, Any]] = ctx.evidence_of(EXPORT_CONTRACT, "contract")["variants"]
    for v in variants:
        if v["precision"] == variant:
            if not v["placed"]:
                raise PrerequisiteBroken(f"the {variant} package was not placed by "
                                         f"export.contract")
            return v
    raise PrerequisiteBroken(f"export.contract exported no {variant} variant (parameter "
                             f"export.fp16 differs between the stages?)")


def compiled_variant(ctx: StageContext, variant: str) -> dict[str, Any]:
    """Return ``export.compile``'s record of a compiled variant.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    variant : str
        ``fp32`` or ``fp16``.

    Returns
    -------
    dict
        The variant's entry of the gate's ``compile`` evidence.

    Raises
    ------
    PrerequisiteBroken
        If the gate did not pass or compiled no such variant.
    """
    variants: list[dict[str, Any]] = ctx.evidence_of(EXPORT_COMPILE, "compile")["variants"]
    for v in variants:
        if v["precision"] == variant:
            return v
    raise PrerequisiteBroken(f"export.compile compiled no {variant} variant")


def published_mlmodelc(ctx: StageContext, variant: str) -> Path | None:
    """Return the ``.mlmodelc`` folder published for a variant, or None if there is none.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    variant : str
        ``fp32`` or ``fp16``.

    Returns
    -------
    Path or None
        ``<run_dir>/<variant>/ggml-model-encoder.mlmodelc`` when it is a folder.
    """
    path = ctx.run_dir / variant / ENCODER_COMPILED
    return path if path.is_dir() else None


def source_spec(params: Params) -> SourceSpec:
    """Build the :class:`~verifylib.whispercpp.source.SourceSpec` of the whisper.cpp source.

    Parameters
    ----------
    params : Params
        The parameter file's parameters (``runtime.source`` and ``runtime.pin``).

    Returns
    -------
    verifylib.whispercpp.source.SourceSpec
        The source, with the pin's commit filled in for a git source that names none and
        a ``path`` resolved against the parameter file.
    """
    from verifylib.whispercpp import source as _source

    src = params.runtime.source
    if src["kind"] == "git":
        pins = _source.available_pins(params.runtime.manifest)
        src.setdefault("commit", pins[params.runtime.pin].commit)
    if "path" in src:
        src["path"] = str(params.resolve(src["path"]))
    return _source.SourceSpec(**src)


def standalone_fixture_audio(params: Params, fixture: Fixture, *,
                             log: Callable[[str], None] = print) -> Path:
    """Locate a fixture's audio outside any run: a local path, or a file of the pinned source.

    For tools that touch no run (``verifylib drift``): a whisper.cpp sample comes from the
    pinned source obtained into the cache as stage 01 would obtain it.

    Parameters
    ----------
    params : Params
        The parameters (their runtime source, and the base for a local path).
    fixture : Fixture
        The fixture.
    log : callable
        Receives progress lines while the source is obtained.

    Returns
    -------
    Path
        The audio file.

    Raises
    ------
    ParametersInvalid
        If the file does not exist.
    """
    if fixture.runtime_file is not None:
        from verifylib.whispercpp.source import obtain_source

        tree = obtain_source(source_spec(params), cache_dir(), log=log)
        path = Path(tree.path) / fixture.runtime_file
    else:
        path = params.resolve(_local_path(fixture))
    if not path.is_file():
        raise ParametersInvalid(f"fixture {fixture.id}: audio file {path} not found")
    return path
