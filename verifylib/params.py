"""Parameter files: one YAML per model, validated before any work starts.

The shape is declared once as a JSON Schema and followed by the checks a schema cannot
express: the pin exists in ``patches/manifest.yaml`` or in the manifest the file brings
(``runtime.manifest``), local files exist, a git commit agrees with its pin. Every error
names the file and the dotted key, and nothing is written before validation ends.

Two maintained validators check the one schema: ``fastjsonschema`` accepts a valid file
(it compiles the schema to plain Python and imports in milliseconds, which matters because
every stage notebook validates its parameters in a fresh kernel), and only a rejected file
is handed to ``jsonschema``, whose error objects carry what the messages need (the key path,
the failing keyword, every error at once). ``jsonschema`` costs most of a second to import.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import fastjsonschema

if TYPE_CHECKING:
    import jsonschema

from verifylib import resources, user_yaml
from verifylib.errors import ParametersInvalid
from verifylib.param_files import (
    check_audio,
    check_backend,
    check_ct2_model,
    check_encoder,
    check_ggml_file,
    check_languages,
    check_vocabulary,
    refuse_litter,
)
from verifylib.runtime.contracts import GGML_BACKENDS
from verifylib.user_yaml import dotted, shorten

PARAMETERS_DIR = resources.parameters_dir()
DEFAULT_PARAMETERS = resources.default_parameters()
PATCHES_MANIFEST = resources.manifest_path()

_NAME = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"}
_STR = {"type": "string", "minLength": 1}

SOURCE_SCHEMA = {
    "type": "object",
    "required": ["kind"],
    "additionalProperties": False,
    "properties": {
        "kind": {"enum": ["pypi-sdist", "git", "archive", "folder"]},
        "package": _STR,
        "subdir": _STR,
        "url": _STR,
        "commit": {"type": "string", "pattern": r"^[0-9a-f]{40}$"},
        "path": _STR,
    },
    "allOf": [
        {"if": {"properties": {"kind": {"const": "pypi-sdist"}}},
         "then": {"required": ["package"]}},
        {"if": {"properties": {"kind": {"const": "git"}}}, "then": {"required": ["url"]}},
        {"if": {"properties": {"kind": {"enum": ["archive", "folder"]}}},
         "then": {"required": ["path"]}},
    ],
}

MODEL_SCHEMA = {
    "type": "object",
    "required": ["kind"],
    "additionalProperties": False,
    "properties": {
        "kind": {"enum": ["ct2-pypi", "ct2-dir", "hf-dir", "hf-hub", "ggml"]},
        "package": _STR,
        "subdir": _STR,
        "path": _STR,
        "id": _STR,
        "revision": _STR,
        "language": {"type": "string", "pattern": r"^[a-z]{2,3}$"},
        # ct2-pypi only: more wheels whose ``subdir`` is merged into the model folder, for
        # a model split across uploads (``X.part1``, ``X.part2`` … are joined into ``X``)
        "parts": {"type": "array", "minItems": 1, "maxItems": 16,
                  "items": {"type": "object", "required": ["package", "subdir"],
                            "additionalProperties": False,
                            "properties": {"package": _STR, "subdir": _STR}}},
    },
    "allOf": [
        {"if": {"required": ["parts"]},
         "then": {"properties": {"kind": {"const": "ct2-pypi"}}}},
        {"if": {"properties": {"kind": {"const": "ct2-pypi"}}},
         "then": {"required": ["package", "subdir"]}},
        {"if": {"properties": {"kind": {"enum": ["ct2-dir", "hf-dir", "ggml"]}}},
         "then": {"required": ["path"]}},
        {"if": {"properties": {"kind": {"const": "hf-hub"}}}, "then": {"required": ["id"]}},
    ],
}

ENCODER_SCHEMA = {
    "type": "object",
    "required": ["path"],
    "additionalProperties": False,
    # a prebuilt ``…-encoder.mlpackage`` or ``…-encoder.mlmodelc`` (or the
    # ``…-encoder.mlmodelc.zip`` upstream ships), audited as given
    "properties": {"path": _STR},
}


FIXTURE_SCHEMA = {
    "type": "object",
    "required": ["id", "public"],
    "additionalProperties": False,
    "properties": {
        "id": _NAME,
        "runtime_file": _STR,   # a file inside the verified runtime source tree
        "path": _STR,           # a local file, relative to the parameter file
        "text": {"type": "string"},
        "text_file": _STR,      # reference text in a UTF-8 file, relative to the parameter file
        "public": {"type": "boolean"},
        "language": {"type": "string", "pattern": r"^[a-z]{2,3}$"},  # default: model.language
    },
    "oneOf": [{"required": ["runtime_file"]}, {"required": ["path"]}],
}

SCHEMA = {
    "type": "object",
    "required": ["name", "runtime", "model"],
    "additionalProperties": False,
    "properties": {
        "name": _NAME,
        "description": {"type": "string"},
        "runtime": {
            "type": "object",
            "required": ["pin", "source"],
            "additionalProperties": False,
            "properties": {
                "pin": _STR,
                # a manifest of the user's own, relative to the parameter file: more pins
                "manifest": _STR,
                "source": SOURCE_SCHEMA,
                "ggml_native": {"type": "boolean"},
                "ggml_backend": {"enum": list(GGML_BACKENDS)},
                "jobs": {"type": "integer", "minimum": 1, "maximum": 64},
            },
        },
        "model": MODEL_SCHEMA,
        "encoder": ENCODER_SCHEMA,
        "fixtures": {"type": "array", "items": FIXTURE_SCHEMA},
        "canary": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"runs": {"type": "integer", "minimum": 1, "maximum": 1000},
                           "enabled": {"type": "boolean"},
                           # seconds per whisper-cli canary run, and for the first Core ML
                           # run (on-device compilation of the .mlmodelc: minutes)
                           "timeout_s": {"type": "number", "exclusiveMinimum": 0},
                           "first_run_timeout_s": {"type": "number", "exclusiveMinimum": 0}},
        },
        "export": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"fp16": {"type": "boolean"}},
        },
        # verifylib's Core ML seam on any OS (docs/runtime-contract.md §11): its builds and
        # its three informational gates.
        "seam": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean"}},
        },
    },
}

# Every top-level key a notebook's parameters cell must declare (plus ``run_dir``).
PARAMETER_KEYS: tuple[str, ...] = tuple(SCHEMA["properties"])

DEFAULTS: dict[str, Any] = {
    "description": "",
    # cpu: see RuntimeSection.ggml_backend.
    "runtime": {"ggml_native": True, "ggml_backend": GGML_BACKENDS[0], "jobs": 2},
    "fixtures": [],
    "canary": {"runs": 20, "enabled": True, "timeout_s": 120, "first_run_timeout_s": 900},
    "export": {"fp16": True},
    "seam": {"enabled": True},
}


@dataclass(frozen=True)
class RuntimeSection:
    """The ``runtime`` section: which whisper.cpp to build and how.

    Attributes
    ----------
    pin : str
        Name of a pin in the packaged manifest or in :attr:`manifest`.
    source : dict
        Where the source comes from (``kind`` and its keys), as written.
    ggml_native : bool
        Build with ``GGML_NATIVE``.
    jobs : int
        Parallel build jobs.
    ggml_backend : str or None
        The ggml backend of every build, hence of the GGML legs and of the hybrid decoder:
        ``cpu`` (the default) or ``metal`` (macOS only); None only in the parameters of a
        run recorded before the key existed. The default is the CPU because the Core ML
        encoder is judged against the GGML leg: that reference should be the deterministic
        CPU path the Linux evidence and the lifecycle defect reproduction were measured on,
        while Metal changes numerics and scheduling; and the hybrid decoder runs on the
        same backend as the GGML leg, so a WER difference between them is the encoder's.
    manifest : str or None
        A pin manifest of the user's own (``runtime.manifest``, resolved): its pins are
        available beside the packaged ones. None (the key absent, as in every run made
        before it existed): the packaged pins only.
    """

    pin: str
    source: dict
    ggml_native: bool
    jobs: int
    ggml_backend: str | None = None
    manifest: str | None = None


@dataclass(frozen=True)
class ModelSection:
    """The ``model`` section: the model under audit.

    Attributes
    ----------
    kind : str
        ``ct2-pypi``, ``ct2-dir``, ``hf-dir`` or ``hf-hub``.
    language : str
        Decoding language (``en`` unless given).
    spec : dict
        The section as written, for the model intake.
    """

    kind: str
    language: str
    spec: dict


@dataclass(frozen=True)
class EncoderSection:
    """The optional ``encoder`` section: a prebuilt Core ML encoder audited as given.

    Attributes
    ----------
    path : str
        The ``…-encoder.mlpackage``, ``…-encoder.mlmodelc`` or ``…-encoder.mlmodelc.zip``,
        resolved.
    format : str
        ``"mlpackage"`` or ``"mlmodelc"``, from the suffix (a zip holds an ``.mlmodelc``).
    archive : bool
        True when the path names a zip, unpacked into the run by stage 02.
    """

    path: str
    format: str
    archive: bool = False


@dataclass(frozen=True)
class Fixture:
    """One entry of ``fixtures``: an audio clip and, optionally, its reference text.

    Attributes
    ----------
    id : str
        Unique name.
    public : bool
        False keeps its text and transcripts out of the evidence (digests and counts only).
    runtime_file, path : str or None
        Exactly one: a file inside the verified runtime tree, or a local file.
    text, text_file : str or None
        At most one: the reference text, or a UTF-8 file holding it.
    language : str or None
        The language it is spoken in, decoded and scored as such by both legs; None means
        the model's (``model.language``).
    """

    id: str
    public: bool
    runtime_file: str | None = None
    path: str | None = None
    text: str | None = None
    text_file: str | None = None
    language: str | None = None


@dataclass(frozen=True)
class CanarySection:
    """The ``canary`` section: the lifecycle A/B and the Core ML canaries.

    Attributes
    ----------
    runs : int
        Lifecycle runs per side.
    enabled : bool
        False disables every canary gate (NOT_RUN(disabled)).
    timeout_s : float
        Seconds per canary run.
    first_run_timeout_s : float
        Seconds for the first Core ML run (on-device compilation can take minutes).
    """

    runs: int
    enabled: bool
    timeout_s: float
    first_run_timeout_s: float


@dataclass(frozen=True)
class ExportSection:
    """The ``export`` section.

    Attributes
    ----------
    fp16 : bool
        Also export (and measure, informationally) the fp16 variant.
    """

    fp16: bool


@dataclass(frozen=True)
class SeamSection:
    """The ``seam`` section: verifylib's Core ML seam (docs/runtime-contract.md §11).

    Attributes
    ----------
    enabled : bool
        False builds no seam variant and disables the three seam gates (NOT_RUN(disabled)).
    """

    enabled: bool


@dataclass(frozen=True)
class Params:
    """A validated parameter set.

    Attributes
    ----------
    name : str
        Model name, used for ``reports/<name>/``.
    data : dict
        The full parameter tree with defaults filled in.
    origin : str
        Where the values came from (a file path, or ``"notebook"``).
    base_dir : Path
        Folder that relative paths in the parameters are resolved against.
    """

    name: str
    data: dict
    origin: str
    base_dir: Path

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @property
    def runtime(self) -> RuntimeSection:
        """The ``runtime`` section, typed."""
        r = self.data["runtime"]
        return RuntimeSection(r["pin"], copy.deepcopy(r["source"]), r["ggml_native"], r["jobs"],
                              r.get("ggml_backend"), r.get("manifest"))

    @property
    def model(self) -> ModelSection:
        """The ``model`` section, typed."""
        m = self.data["model"]
        return ModelSection(m["kind"], m.get("language") or "en", copy.deepcopy(m))

    @property
    def encoder(self) -> EncoderSection | None:
        """The ``encoder`` section, typed, or None when stage 02 exports the encoder."""
        e = self.data.get("encoder")
        if e is None:
            return None
        zipped = e["path"].endswith(".zip")
        return EncoderSection(e["path"], Path(e["path"].removesuffix(".zip")).suffix[1:], zipped)

    @property
    def fixtures(self) -> tuple[Fixture, ...]:
        """The ``fixtures`` list, typed, in file order."""
        return tuple(Fixture(**fx) for fx in self.data["fixtures"])

    @property
    def canary(self) -> CanarySection:
        """The ``canary`` section, typed."""
        c = self.data["canary"]
        return CanarySection(c["runs"], c["enabled"], c["timeout_s"], c["first_run_timeout_s"])

    @property
    def export(self) -> ExportSection:
        """The ``export`` section, typed."""
        return ExportSection(self.data["export"].get("fp16", True))

    @property
    def seam(self) -> SeamSection:
        """The ``seam`` section, typed (enabled in the parameters of runs made before it)."""
        return SeamSection(self.data.get("seam", {}).get("enabled", True))

    def resolve(self, rel: str) -> Path:
        """Resolve a path from the parameters against :attr:`base_dir`."""
        p = Path(rel).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def as_papermill(self) -> dict:
        """Return the values as papermill parameters (one per top-level key)."""
        return copy.deepcopy(self.data)


_FAST_VALIDATE = None


def _schema_problems(data: Any) -> list[str]:
    """Messages for the first five schema errors of ``data`` (empty when it conforms)."""
    global _FAST_VALIDATE
    if _FAST_VALIDATE is None:
        _FAST_VALIDATE = fastjsonschema.compile(SCHEMA)
    try:
        _FAST_VALIDATE(copy.deepcopy(data))  # it fills defaults in place; keep ours intact
        return []
    except fastjsonschema.JsonSchemaException as fast:
        import jsonschema

        validator = jsonschema.Draft202012Validator(SCHEMA)
        errors = sorted(validator.iter_errors(data),
                        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
        # Should the two ever disagree, the refusal stands, with the fast validator's words.
        return [_schema_error_message(e) for e in errors[:5]] or [shorten(fast.message, 200)]


def _merge_defaults(data: dict) -> dict:
    out = copy.deepcopy(data)
    for key, default in DEFAULTS.items():
        if key not in out:
            out[key] = copy.deepcopy(default)
        elif isinstance(default, dict) and isinstance(out[key], dict):
            for k, v in default.items():
                out[key].setdefault(k, copy.deepcopy(v))
    return out


def _schema_error_message(err: "jsonschema.ValidationError") -> str:
    # jsonschema's own message holds the repr of the failing value, whole: never shown
    # uncut (a value's key and its type say where and what).
    key = dotted(err.absolute_path)
    if err.validator == "additionalProperties":
        extra = sorted(map(str, set(err.instance) - set(err.schema.get("properties", {}))))
        names = ", ".join(dotted([*err.absolute_path, e]) for e in extra[:5])
        more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
        return f"unknown key {names}{more}"
    if err.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", err.message)
        name = missing[0] if missing else err.message
        full = f"{key}.{name}" if err.absolute_path else name
        return f"missing key {full}"
    if err.validator == "type":
        return f"key {key}: expected {err.validator_value}, got {type(err.instance).__name__}"
    if err.validator == "oneOf" and isinstance(err.instance, dict):
        return f"key {key}: give exactly one of runtime_file or path"
    if err.validator == "pattern":
        return f"key {key}: {shorten(repr(err.instance), 60)} does not match " \
               f"{err.validator_value!r}"
    return f"key {key}: {shorten(err.message, 200)}"


def _runtime_pins(origin: str, runtime: dict, base_dir: Path, manifest: Path) -> dict:
    """Return the packaged pins and those of the parameter file's own ``runtime.manifest``."""
    from verifylib.whispercpp.source import load_pins, load_user_pins
    try:
        pins = load_pins(manifest)
    except ValueError as exc:
        raise ParametersInvalid(f"{origin}: key runtime.pin: the pin manifest is unusable: "
                                f"{exc}") from None
    if runtime.get("manifest") is None:
        return pins
    path = (base_dir / Path(runtime["manifest"]).expanduser()).resolve()
    try:
        return {**pins, **load_user_pins(path, pins)}
    except ValueError as exc:
        raise ParametersInvalid(f"{origin}: key runtime.manifest: {exc}") from None


def _check_runtime(origin: str, runtime: dict, base_dir: Path, manifest: Path) -> None:
    """Refuse an unknown pin or backend, or a source that is not the pin's or is missing."""
    pins = _runtime_pins(origin, runtime, base_dir, manifest)
    pin = runtime["pin"]
    if pin not in pins:
        also = (f" or {(base_dir / Path(runtime['manifest']).expanduser()).resolve()}"
                if runtime.get("manifest") is not None else "")
        raise ParametersInvalid(f"{origin}: key runtime.pin: unknown pin {shorten(repr(pin))} "
                                f"(known: {', '.join(sorted(pins))}; see {manifest}{also})")
    check_backend(origin, runtime["ggml_backend"])
    src = runtime["source"]
    if src["kind"] == "git":
        want = pins[pin].commit
        if src.get("commit", want) != want:
            raise ParametersInvalid(f"{origin}: key runtime.source.commit: {src['commit']} is "
                                    f"not pin {pin}'s commit {want}")
    if src["kind"] in ("archive", "folder"):
        path = (base_dir / Path(src["path"]).expanduser())
        if not path.exists():
            raise ParametersInvalid(f"{origin}: key runtime.source.path: {path} does not exist")
        if src["kind"] == "archive" and not path.is_file():
            raise ParametersInvalid(f"{origin}: key runtime.source.path: {path} is not a file")
        if src["kind"] == "folder" and not path.is_dir():
            raise ParametersInvalid(f"{origin}: key runtime.source.path: {path} is not a folder")
        if src["kind"] == "folder":
            # Only the subdir is copied; a missing one is the fetch's to report.
            sub = path / src["subdir"] if src.get("subdir") else path
            refuse_litter(f"{origin}: key runtime.source.path", sub if sub.is_dir() else path,
                           "the source's git tree id, which must be the pin's")


def _refuse_link(origin: str, key: str, path: Path) -> None:
    # Paths are stored resolved (run.json, every notebook): a link would put its target's
    # path there, and the audit would read whatever the link points to at the time.
    if path.is_symlink():
        raise ParametersInvalid(f"{origin}: key {key}: {path} is a symbolic link; name the "
                                "file itself")


def _check_fixtures(origin: str, fixtures: list[dict], base_dir: Path) -> None:
    """Refuse duplicate fixture ids, missing recordings or texts, an inline private text."""
    seen: dict[str, str] = {}  # case-folded id -> its first spelling
    for i, fx in enumerate(fixtures):
        first = seen.get(fx["id"].casefold())
        if first == fx["id"]:
            raise ParametersInvalid(f"{origin}: key fixtures[{i}].id: duplicate id {fx['id']!r}")
        if first is not None:
            # Evidence files are named by fixture id (ggml-<id>.stderr.txt): on a
            # case-insensitive file system, macOS's default, the two would be one file.
            raise ParametersInvalid(
                f"{origin}: key fixtures[{i}].id: {fx['id']!r} and {first!r} differ only in "
                "case; their evidence files would be one file on a case-insensitive file "
                "system (macOS's default): rename one")
        seen[fx["id"].casefold()] = fx["id"]
        if "path" in fx:
            fp = base_dir / Path(fx["path"]).expanduser()
            _refuse_link(origin, f"fixtures[{i}].path", fp)
            if not fp.is_file():
                raise ParametersInvalid(f"{origin}: key fixtures[{i}].path: {fp} does not exist")
            check_audio(origin, i, fp)
        if "text" in fx and "text_file" in fx:
            raise ParametersInvalid(f"{origin}: key fixtures[{i}]: give text or text_file, "
                                    "not both")
        if "text" in fx and not fx["public"]:
            # Parameters are copied into every executed notebook and run.json; a private
            # reference text must stay in its own file and be persisted only as counts.
            raise ParametersInvalid(f"{origin}: key fixtures[{i}].text: a non-public fixture's "
                                    "reference must be given as text_file, not inline")
        if "text_file" in fx:
            tp = base_dir / Path(fx["text_file"]).expanduser()
            _refuse_link(origin, f"fixtures[{i}].text_file", tp)
            if not tp.is_file():
                raise ParametersInvalid(f"{origin}: key fixtures[{i}].text_file: {tp} "
                                        "does not exist")


def validate(data: Any, origin: str, base_dir: Path,
             manifest: Path = PATCHES_MANIFEST) -> Params:
    """Validate a parameter tree.

    Parameters
    ----------
    data : Any
        The parsed YAML.
    origin : str
        Name of the file (or other origin) used in error messages.
    base_dir : Path
        Folder against which relative paths resolve.
    manifest : Path
        The pins manifest.

    Returns
    -------
    Params
        The validated parameters with defaults filled in.

    Raises
    ------
    ParametersInvalid
        Naming ``origin`` and the offending key.
    """
    if not isinstance(data, dict):
        raise ParametersInvalid(f"{origin}: expected a mapping at the top level, "
                                f"got {type(data).__name__}")
    # Before either schema validator walks it: their work and messages grow with it.
    user_yaml.check_tree(data, origin)
    problems = _schema_problems(data)
    if problems:
        raise ParametersInvalid(f"{origin}: " + "; ".join(problems))
    p = _merge_defaults(data)
    _check_runtime(origin, p["runtime"], base_dir, manifest)
    model = p["model"]
    if model["kind"] in ("ct2-dir", "hf-dir"):
        mp = base_dir / Path(model["path"]).expanduser()
        if not mp.is_dir():
            raise ParametersInvalid(f"{origin}: key model.path: {mp} is not a folder")
        refuse_litter(f"{origin}: key model.path", mp,
                       "the model's digest, its identity in every run")
        if model["kind"] == "ct2-dir":
            check_ct2_model(origin, mp)
    if model["kind"] == "ggml":
        check_ggml_file(origin, base_dir / Path(model["path"]).expanduser())
    if "encoder" in p:
        if data.get("export", {}).get("fp16") is True:
            raise ParametersInvalid(f"{origin}: key export.fp16: a prebuilt encoder (key "
                                    "encoder.path) is audited as given; no fp16 variant is "
                                    "exported beside it")
        # Nothing is exported: the fp16 variant's gates are NOT_RUN(disabled) by this key.
        p["export"]["fp16"] = False
        check_encoder(origin, base_dir / Path(p["encoder"]["path"]).expanduser())
    _check_fixtures(origin, p["fixtures"], base_dir)
    check_vocabulary(origin, p["model"], base_dir)
    check_languages(origin, p, base_dir)
    _absolutize(p, base_dir)
    return Params(name=p["name"], data=p, origin=origin, base_dir=base_dir.resolve())


def check_distinct_names(all_params: Sequence[Params], reports_root: Path | None = None) -> None:
    """Refuse models of one batch whose names are equal, also when only in case.

    Each model's runs go to ``reports/<name>/``: on a case-insensitive file system (macOS's
    default) ``Tiny`` and ``tiny`` would be one folder. So would a model and a folder of the
    reports folder spelled like it in another case (a run of another batch).

    Parameters
    ----------
    all_params : sequence of Params
        The batch's parameters.
    reports_root : Path, optional
        The reports folder the batch publishes into, whose model folders are checked too.

    Raises
    ------
    ParametersInvalid
        Naming both spellings and where each comes from.
    """
    seen: dict[str, Params] = {}
    for p in all_params:
        other = seen.setdefault(p.name.casefold(), p)
        if other is p:
            continue
        how = "the same name" if other.name == p.name else "names that differ only in case"
        raise ParametersInvalid(
            f"{other.origin} and {p.origin} use {how} ({other.name!r}, {p.name!r}); each "
            "model's runs go to reports/<name>/, one folder for both on a case-insensitive "
            "file system (macOS's default): rename one")
    if reports_root is None or not Path(reports_root).is_dir():
        return
    for entry in Path(reports_root).iterdir():
        p = seen.get(entry.name.casefold())
        if p is not None and entry.is_dir() and entry.name != p.name:
            raise ParametersInvalid(
                f"{p.origin}: model {p.name!r} would publish into {entry}, the folder of "
                f"model {entry.name!r}: on a case-insensitive file system (macOS's default) "
                "they are one folder; rename the model or use another --reports folder")


def _absolutize(p: dict, base_dir: Path) -> None:
    # Paths are stored resolved, so the same parameters give the same digest whether they
    # come from a file, from papermill's injection, or from a copy in another folder.
    def fix(holder: dict, key: str) -> None:
        if key in holder:
            holder[key] = str((base_dir / Path(holder[key]).expanduser()).resolve())
    fix(p["runtime"]["source"], "path")
    fix(p["runtime"], "manifest")
    fix(p["model"], "path")
    if "encoder" in p:
        fix(p["encoder"], "path")
    for fx in p["fixtures"]:
        fix(fx, "path")
        fix(fx, "text_file")


def load(path: str | Path, manifest: Path = PATCHES_MANIFEST) -> Params:
    """Load and validate one parameter file.

    Parameters
    ----------
    path : path-like
        A YAML file in the layout of ``parameters/tiny-en.yaml``.
    manifest : Path
        The pins manifest.

    Returns
    -------
    Params

    Raises
    ------
    ParametersInvalid
        If the file is missing, is not YAML, passes a limit of
        :mod:`verifylib.user_yaml` (size, aliases, depth, string length), or fails
        validation.
    """
    path = Path(path)
    if not path.is_file():
        raise ParametersInvalid(f"{path}: parameter file not found")
    data = user_yaml.read(path)
    # Relative paths in a parameter file are relative to the file's own folder.
    return validate(data, str(path), path.resolve().parent, manifest)


def fixture_text(params: "Params", fixture: Fixture) -> str | None:
    """Return a fixture's reference text, or None.

    Parameters
    ----------
    params : Params
        The parameters the fixture belongs to (``text_file`` is resolved against them).
    fixture : Fixture
        The fixture.

    Returns
    -------
    str or None
        The inline ``text``, else the stripped content of ``text_file``, else None.
    """
    if fixture.text is not None:
        return fixture.text
    if fixture.text_file:
        return params.resolve(fixture.text_file).read_text(encoding="utf-8").strip()
    return None


def from_notebook(namespace: Mapping[str, Any]) -> Params:
    """Build parameters inside a notebook from its parameters-cell variables.

    A notebook's parameters cell declares every key of :data:`PARAMETER_KEYS` as ``None``;
    papermill's ``-f file.yaml`` overrides them. When nothing was injected (``name`` is
    None) the default parameter file is used, so a researcher can open a notebook and run
    it as is.

    Parameters
    ----------
    namespace : mapping
        Usually ``globals()`` of the notebook.

    Returns
    -------
    Params
    """
    values = {k: namespace.get(k) for k in PARAMETER_KEYS}
    if values.get("name") is None:
        return load(DEFAULT_PARAMETERS)
    data = {k: v for k, v in values.items() if v is not None}
    # `papermill -f parameters/x.yaml` injects the file's values without its location;
    # relative paths then resolve against parameters/, where parameter files live.
    return validate(data, "notebook parameters", PARAMETERS_DIR)
