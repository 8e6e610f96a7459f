"""Upstream's own Core ML encoders of the default model, built by upstream's own converter.

whisper.cpp ships ``models/convert-whisper-to-coreml.py`` (what ``generate-coreml-model.sh``
runs) and ``models/convert-h5-to-coreml.py`` (its ``-h5`` mode, for a Hugging Face
checkpoint). The tests here want the packages those scripts make, for the default model,
without a Mac and without the network at conversion time:

- the two third-party packages the scripts import, ``openai-whisper`` and
  ``ane_transformers``, are downloaded as sdists (pure Python, pinned versions) through
  pip, unpacked into the test cache (members checked: no absolute path, no ``..``, no
  link or device) and put on ``sys.path`` of a child Python process only, so the test
  session's ``sys.modules`` never holds them;
- ``whisper/__init__.py`` imports ``numba`` and ``tiktoken``, which encoder conversion
  never calls: import-only stand-ins are written next to the child's driver;
- the scripts' ``__main__`` obtains the model with ``whisper.load_model(name)``, which
  downloads it. The driver replicates only that glue: it builds openai-whisper's
  ``Whisper`` from the default model's Hugging Face folder (dimensions from its config,
  tensors renamed to openai-whisper's names by :func:`openai_state_names`) and then calls
  the script's own functions: ``convert_encoder(hparams, encoder, quantize=False)`` for the
  plain path; ``WhisperANE(hparams)`` + ``load_state_dict`` (whose pre-hook,
  ``linear_to_conv2d_map``, reshapes the linears into 1x1 convs) for ``--optimize-ane``;
  and, for ``convert-h5-to-coreml.py``, its own ``convert_hf_whisper`` (Hugging Face folder
  -> openai-whisper checkpoint file) followed by ``whisper.load_model(<that file>)`` (a
  local file: openai-whisper downloads only for a model *name*) and ``convert_encoder``.

Each package is a cache entry ``<cache>/test-data/upstream-coreml/<key>/`` (staged beside
it and renamed into place under the cache's lock): ``ggml-model-encoder.mlpackage`` and
``made.json``, the record of what made it. The key covers the sdists' SHA-256, the source
tree id, the digests of the converter scripts and of the driver, the model's source digest,
the path and the torch/coremltools versions; a cache hit is re-hashed against its record.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from verifylib.canonical import (dumps, publish_dir, read_json, sha256_bytes, sha256_file,
                                 tree_digest, write_json)
from verifylib.locks import LOCKS_DIR, produce_once
from verifylib.runtime.runner import run

SDISTS = {"openai-whisper": "20250625", "ane-transformers": "0.1.3"}
"""The third-party packages upstream's converter imports, at the versions the tests pin."""

PATHS = ("plain", "ane", "h5")
"""``plain``: ``convert-whisper-to-coreml.py`` as run without flags; ``ane``: with
``--optimize-ane`` (what ``generate-coreml-model.sh`` passes); ``h5``:
``convert-h5-to-coreml.py`` (``generate-coreml-model.sh -h5``) on the Hugging Face folder."""

PACKAGE = "ggml-model-encoder.mlpackage"
CONVERTER = "models/convert-whisper-to-coreml.py"
H5_CONVERTER = "models/convert-h5-to-coreml.py"
ROOT_DIR = "upstream-coreml"
"""Folder of the entries below ``<cache>/test-data``."""

# The per-block leaves of a Hugging Face Whisper layer and their openai-whisper names.
_BLOCK_LEAVES = {
    "self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key",
    "self_attn.v_proj": "attn.value", "self_attn.out_proj": "attn.out",
    "self_attn_layer_norm": "attn_ln",
    "encoder_attn.q_proj": "cross_attn.query", "encoder_attn.k_proj": "cross_attn.key",
    "encoder_attn.v_proj": "cross_attn.value", "encoder_attn.out_proj": "cross_attn.out",
    "encoder_attn_layer_norm": "cross_attn_ln",
    "fc1": "mlp.0", "fc2": "mlp.2", "final_layer_norm": "mlp_ln",
}
# Whole-tensor renames outside the blocks (openai-whisper keeps the encoder's positions as
# a buffer and the decoder's as a parameter, both without a ".weight").
_TOP = {
    "encoder.embed_positions.weight": "encoder.positional_embedding",
    "decoder.embed_positions.weight": "decoder.positional_embedding",
    "decoder.embed_tokens.weight": "decoder.token_embedding.weight",
}
_TOP_MODULES = {"encoder.conv1": "encoder.conv1", "encoder.conv2": "encoder.conv2",
                "encoder.layer_norm": "encoder.ln_post", "decoder.layer_norm": "decoder.ln"}

_NUMBA_STANDIN = '''"""Import-only stand-in for numba (tests/helpers/upstream.py).

whisper/timing.py decorates two word-timing functions with ``numba.jit`` when it is
imported; encoder conversion never calls them, so the decorator returns them unchanged.
"""


def jit(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn
'''

_TIKTOKEN_STANDIN = '''"""Import-only stand-in for tiktoken (tests/helpers/upstream.py).

whisper/tokenizer.py names ``tiktoken.Encoding`` in a dataclass annotation when it is
imported; encoder conversion never tokenizes, so building one refuses.
"""


class Encoding:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("tiktoken is a stand-in here: encoder conversion does not tokenize")
'''

_DRIVER = '''"""Child-process driver of tests/helpers/upstream.py: one upstream conversion."""
import importlib.util
import json
import os
import sys
import time

sys.dont_write_bytecode = True  # the scripts live in a cached source tree: write nothing there
cfg = json.load(open(sys.argv[1]))
for entry in reversed(cfg["sys_path"]):
    sys.path.insert(0, entry)


def load_script(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


t0 = time.perf_counter()
import torch  # noqa: E402

torch.manual_seed(0)  # the converter traces on torch.randn input
kind = cfg["path"]
if kind == "h5":
    # The h5 script loads models/convert-whisper-to-coreml.py by that relative path, as
    # generate-coreml-model.sh runs it: from the tree root (the child's cwd).
    h5 = load_script("convert_h5_to_coreml", cfg["h5_script"])
    conv = h5.whisper_to_coreml
    import whisper  # noqa: E402
    pt = os.path.join(cfg["work"], "hf-model.pt")
    h5.convert_hf_whisper(cfg["hf_dir"], pt)
    model = whisper.load_model(pt).cpu()   # a local file: no download
    hparams = model.dims
    encoder = model.encoder
else:
    conv = load_script("whisper_to_coreml", cfg["script"])
    import whisper  # noqa: E402
    from safetensors import safe_open  # noqa: E402
    from whisper.model import ModelDimensions, Whisper  # noqa: E402
    hparams = ModelDimensions(**cfg["dims"])
    model = Whisper(hparams)
    state = {}
    with safe_open(cfg["weights"], "pt") as f:
        for hf_name, oa_name in cfg["rename"].items():
            state[oa_name] = f.get_tensor(hf_name)
    model.load_state_dict(state, strict=True)
    model.eval()
    if kind == "ane":
        ane = conv.WhisperANE(hparams).eval()
        ane.load_state_dict(model.state_dict())
        encoder = ane.encoder
    else:
        encoder = model.encoder
modules = {"whisper": whisper.__file__, "converter": conv.__file__}
t1 = time.perf_counter()
mlmodel = conv.convert_encoder(hparams, encoder, quantize=False)
t2 = time.perf_counter()
mlmodel.save(cfg["out"])
json.dump({"dims": {k: int(v) for k, v in vars(hparams).items()}, "modules": modules,
           "seconds": {"setup": t1 - t0, "convert": t2 - t1,
                       "save": time.perf_counter() - t2},
           "torch": torch.__version__,
           "coremltools": __import__("coremltools").__version__},
          open(cfg["result"], "w"))
'''


class UpstreamError(RuntimeError):
    """Building an upstream artifact failed (what failed is in the message)."""


@dataclass(frozen=True)
class Sdists:
    """The two sdists, downloaded and unpacked in the cache.

    Attributes
    ----------
    root : Path
        The cache entry.
    sha256 : dict
        Requirement (``name==version``) -> SHA-256 of the downloaded archive.
    paths : dict
        Package name -> unpacked source root (the folder to put on ``sys.path``).
    cached : bool
        True if the entry was already in the cache.
    """

    root: Path
    sha256: dict
    paths: dict
    cached: bool


@dataclass(frozen=True)
class UpstreamEncoders:
    """Upstream's encoder packages of the default model.

    Attributes
    ----------
    paths : dict
        Path (``plain``, ``ane``, ``h5``) -> the saved ``ggml-model-encoder.mlpackage``.
    made : dict
        Path -> its ``made.json`` record (key, inputs, digests, seconds, op histogram).
    sdists : Sdists
        The third-party sources the conversions imported.
    tree_id : str
        The whisper.cpp source tree the scripts came from.
    model_digest : str
        The default model's source digest.
    notes : dict
        Path -> why it was not built (empty when all were).
    """

    paths: dict
    made: dict
    sdists: Sdists
    tree_id: str
    model_digest: str
    notes: dict = field(default_factory=dict)


def _quiet(_msg: str) -> None:
    return None


def root_of(cache: str | os.PathLike) -> Path:
    """Return ``<cache>/test-data/upstream-coreml``."""
    return Path(cache) / "test-data" / ROOT_DIR


# ----------------------------------------------------------------------------- sdists

def safe_extract(archive: str | os.PathLike, dest: str | os.PathLike) -> list[str]:
    """Unpack a ``.tar.gz`` sdist, refusing any member that could land outside ``dest``.

    Parameters
    ----------
    archive : path-like
        The archive.
    dest : path-like
        Folder to unpack into (created).

    Returns
    -------
    list of str
        The top-level names unpacked.

    Raises
    ------
    UpstreamError
        On an absolute member path, a ``..`` component, or a member that is neither a
        regular file nor a folder (links and devices could point anywhere).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tf:
        members = tf.getmembers()
        for m in members:
            parts = Path(m.name).parts
            if m.name.startswith(("/", "\\")) or Path(m.name).is_absolute() or ".." in parts:
                raise UpstreamError(f"{archive}: unsafe member path {m.name!r}")
            if not (m.isfile() or m.isdir()):
                raise UpstreamError(f"{archive}: member {m.name!r} is not a file or folder")
        # The "data" filter re-checks the same (and drops modes no sdist needs).
        tf.extractall(dest, members=members, filter="data")
    return sorted({Path(m.name).parts[0] for m in members if Path(m.name).parts})


def _sdists_key() -> str:
    return sha256_bytes(dumps(SDISTS))[:32]


def _sdists_from(root: Path, cached: bool) -> Sdists | None:
    try:
        rec = read_json(root / "sdists.json")
    except (OSError, ValueError):
        return None
    src = root / "src"
    if not src.is_dir() or tree_digest(src) != rec.get("src_digest"):
        return None
    paths = {name: src / rel for name, rel in rec["paths"].items()}
    if not all(p.is_dir() for p in paths.values()):
        return None
    return Sdists(root, dict(rec["sha256"]), paths, cached)


def obtain_sdists(cache: str | os.PathLike, log: Callable[[str], None] = _quiet) -> Sdists:
    """Download and unpack the pinned sdists once (``pip download --no-binary :all:``).

    Parameters
    ----------
    cache : path-like
        The test cache (``$VERIFYLIB_CACHE``).
    log : callable
        Progress lines.

    Returns
    -------
    Sdists
        The cache entry ``<cache>/test-data/upstream-coreml/sdists-<key>``.
    """
    cache = Path(cache)
    key = _sdists_key()
    final = root_of(cache) / f"sdists-{key}"

    def check():
        return _sdists_from(final, True)

    def produce():
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=final.parent))
        try:
            reqs = [f"{n}=={v}" for n, v in SDISTS.items()]
            log(f"pip download {' '.join(reqs)}")
            run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                 *reqs, "-d", staging / "dl"], check=True, timeout=900, what="pip download")
            sha, paths = {}, {}
            for name, version in SDISTS.items():
                stem = name.replace("-", "_")
                (archive,) = [p for p in (staging / "dl").iterdir()
                              if p.name.lower() == f"{stem}-{version}.tar.gz"]
                sha[f"{name}=={version}"] = sha256_file(archive)
                (top,) = safe_extract(archive, staging / "src")
                paths[name] = top
            write_json(staging / "sdists.json",
                       {"requirements": SDISTS, "sha256": sha, "paths": paths,
                        "src_digest": tree_digest(staging / "src")})
            publish_dir(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        found = _sdists_from(final, False)
        assert found is not None, final
        return found

    return produce_once(cache / LOCKS_DIR, "upstream-sdists", key, check=check,
                        produce=produce, what="upstream sdists", log=log)


# ----------------------------------------------------------------------------- the model

def openai_state_names(hf_names) -> dict[str, str]:
    """Map a Hugging Face Whisper checkpoint's tensor names to openai-whisper's.

    Parameters
    ----------
    hf_names : iterable of str
        Names as in the safetensors file (``model.encoder.layers.0.fc1.weight`` ...).

    Returns
    -------
    dict
        Hugging Face name -> openai-whisper ``Whisper.state_dict()`` name
        (``encoder.blocks.0.mlp.0.weight`` ...).

    Raises
    ------
    UpstreamError
        For a name with no openai-whisper counterpart (an untied ``proj_out``, say):
        silently dropping a tensor would build a different model.
    """
    out = {}
    for hf in hf_names:
        name = hf[len("model."):] if hf.startswith("model.") else hf
        if name in _TOP:
            out[hf] = _TOP[name]
            continue
        module, _, param = name.rpartition(".")
        if module in _TOP_MODULES:
            out[hf] = f"{_TOP_MODULES[module]}.{param}"
            continue
        parts = module.split(".")
        if len(parts) >= 4 and parts[0] in ("encoder", "decoder") and parts[1] == "layers" \
                and parts[2].isdigit():
            leaf = ".".join(parts[3:])
            if leaf in _BLOCK_LEAVES:
                out[hf] = f"{parts[0]}.blocks.{parts[2]}.{_BLOCK_LEAVES[leaf]}.{param}"
                continue
        raise UpstreamError(f"no openai-whisper name for the tensor {hf!r}")
    return out


def model_dims(config: Mapping) -> dict[str, int]:
    """Build openai-whisper's ``ModelDimensions`` fields from a Hugging Face config.

    Parameters
    ----------
    config : mapping
        The folder's ``config.json``.

    Returns
    -------
    dict
        The ten ``ModelDimensions`` fields.
    """
    return {"n_mels": config["num_mel_bins"], "n_audio_ctx": config["max_source_positions"],
            "n_audio_state": config["d_model"], "n_audio_head": config["encoder_attention_heads"],
            "n_audio_layer": config["encoder_layers"], "n_vocab": config["vocab_size"],
            "n_text_ctx": config["max_target_positions"], "n_text_state": config["d_model"],
            "n_text_head": config["decoder_attention_heads"],
            "n_text_layer": config["decoder_layers"]}


# ----------------------------------------------------------------------------- artifacts

def _versions() -> dict:
    from importlib.metadata import version
    return {"torch": version("torch"), "coremltools": version("coremltools")}


def artifact_key(sdists: Sdists, tree_id: str, source_root: Path, model_digest: str,
                 path: str) -> tuple[str, dict]:
    """Return the cache key of one artifact and the inputs it covers.

    Parameters
    ----------
    sdists : Sdists
        Gives the archives' SHA-256.
    tree_id : str
        The whisper.cpp source tree id.
    source_root : Path
        The tree (the converter scripts are digested from it).
    model_digest : str
        The model's source digest.
    path : str
        One of :data:`PATHS`.

    Returns
    -------
    (str, dict)
        The hex key and the canonical inputs it digests.
    """
    inputs = {"sdists": sdists.sha256, "tree": tree_id,
              "converter": sha256_file(source_root / CONVERTER), "model": model_digest,
              "path": path, "driver": sha256_bytes(_DRIVER.encode()),
              "standins": sha256_bytes((_NUMBA_STANDIN + _TIKTOKEN_STANDIN).encode()),
              **_versions()}
    if path == "h5":
        inputs["h5_converter"] = sha256_file(source_root / H5_CONVERTER)
    return sha256_bytes(dumps(inputs)), inputs


def op_histogram(package: str | os.PathLike) -> dict[str, int]:
    """Count the op types of a saved package's main function (``const`` included).

    Parameters
    ----------
    package : path-like
        The ``.mlpackage``.

    Returns
    -------
    dict
        Op type -> count.
    """
    from verifylib.numerics.mil_exec import load_program
    return dict(load_program(package).op_counts)


def _artifact_from(final: Path) -> dict | None:
    try:
        made = read_json(final / "made.json")
    except (OSError, ValueError):
        return None
    pkg = final / PACKAGE
    if not pkg.is_dir() or tree_digest(pkg) != made.get("package_digest"):
        return None
    return made


def build_artifact(cache: str | os.PathLike, sdists: Sdists, source_root: Path, tree_id: str,
                   hf_dir: Path, model_digest: str, path: str,
                   log: Callable[[str], None] = _quiet) -> tuple[Path, dict]:
    """Build (or reuse) one upstream encoder package in the cache.

    Parameters
    ----------
    cache : path-like
        The test cache.
    sdists : Sdists
        From :func:`obtain_sdists`.
    source_root : Path
        The pristine whisper.cpp tree holding the converter scripts.
    tree_id : str
        Its git tree id.
    hf_dir : Path
        The default model's Hugging Face folder.
    model_digest : str
        Its source digest.
    path : str
        One of :data:`PATHS`.
    log : callable
        Progress lines.

    Returns
    -------
    (Path, dict)
        The package and its ``made.json`` record.

    Raises
    ------
    UpstreamError
        If the conversion child fails (its stderr tail is in the message).
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    cache = Path(cache)
    key, inputs = artifact_key(sdists, tree_id, source_root, model_digest, path)
    final = root_of(cache) / key

    def check():
        made = _artifact_from(final)
        return None if made is None else (final / PACKAGE, made)

    def produce():
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=final.parent))
        work = Path(tempfile.mkdtemp(prefix="verifylib-upstream-"))
        try:
            standins = work / "standins"
            standins.mkdir()
            (standins / "numba.py").write_text(_NUMBA_STANDIN)
            (standins / "tiktoken.py").write_text(_TIKTOKEN_STANDIN)
            driver = work / "driver.py"
            driver.write_text(_DRIVER)
            config = json.loads((hf_dir / "config.json").read_text())
            from safetensors import safe_open
            with safe_open(str(hf_dir / "model.safetensors"), "pt") as f:
                rename = openai_state_names(f.keys())
            cfg = {"path": path, "sys_path": [str(standins),
                                              str(sdists.paths["openai-whisper"]),
                                              str(sdists.paths["ane-transformers"])],
                   "script": str(source_root / CONVERTER),
                   "h5_script": str(source_root / H5_CONVERTER), "hf_dir": str(hf_dir),
                   "weights": str(hf_dir / "model.safetensors"), "dims": model_dims(config),
                   "rename": rename, "work": str(work), "out": str(staging / PACKAGE),
                   "result": str(work / "result.json")}
            (work / "config.json").write_text(json.dumps(cfg))
            log(f"upstream {path}: converting (about a minute)")
            t0 = time.perf_counter()
            # cwd is the tree root because convert-h5-to-coreml.py finds its sibling by a
            # relative path (generate-coreml-model.sh runs it from there); -B with the
            # driver's dont_write_bytecode keeps __pycache__ out of the cached tree.
            res = run([sys.executable, "-B", driver, work / "config.json"], cwd=source_root,
                      timeout=1800, env_extra={"HF_HUB_OFFLINE": "1",
                                               "TRANSFORMERS_OFFLINE": "1",
                                               "PYTHONDONTWRITEBYTECODE": "1"})
            wall = time.perf_counter() - t0
            if not res.ok:
                tail = "\n".join(res.stderr_text.strip().splitlines()[-25:])
                raise UpstreamError(f"upstream {path} conversion failed ({res.describe()}):\n"
                                    f"{tail}")
            child = json.loads((work / "result.json").read_text())
            made = {"key": key, "inputs": inputs, "path": path,
                    "script": H5_CONVERTER if path == "h5" else CONVERTER,
                    "how": _HOW[path], "child": child, "wall_s": round(wall, 3),
                    "op_counts": op_histogram(staging / PACKAGE),
                    "package_digest": tree_digest(staging / PACKAGE)}
            write_json(staging / "made.json", made)
            publish_dir(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
        found = check()
        assert found is not None, final
        return found

    return produce_once(cache / LOCKS_DIR, "upstream-coreml", key, check=check,
                        produce=produce, what=f"upstream {path} Core ML encoder", log=log)


_HOW = {
    "plain": "convert-whisper-to-coreml.py convert_encoder(hparams, Whisper.encoder, "
             "quantize=False); Whisper built from the HF folder (openai names)",
    "ane": "convert-whisper-to-coreml.py WhisperANE(hparams).load_state_dict(Whisper "
           "state dict) (linear_to_conv2d_map), then convert_encoder(hparams, "
           "WhisperANE.encoder, quantize=False)",
    "h5": "convert-h5-to-coreml.py convert_hf_whisper(hf_dir, pt), whisper.load_model(pt), "
          "then convert_encoder(hparams, encoder, quantize=False)",
}


def upstream_encoders(cache: str | os.PathLike, source_tree, model_info,
                      paths=PATHS, log: Callable[[str], None] = _quiet) -> UpstreamEncoders:
    """Build (or reuse) every upstream encoder package of the default model.

    Parameters
    ----------
    cache : path-like
        The test cache.
    source_tree : verifylib.whispercpp.source.SourceTree
        The pristine pinned tree (``.path``, ``.tree_id``).
    model_info : verifylib.models.intake.ModelInfo
        The default model (``.hf_dir``, ``.source_digest``).
    paths : iterable of str
        Which of :data:`PATHS` to build.
    log : callable
        Progress lines.

    Returns
    -------
    UpstreamEncoders
    """
    sdists = obtain_sdists(cache, log)
    root = Path(source_tree.path)
    built, made, notes = {}, {}, {}
    for p in paths:
        if p == "h5" and not (root / H5_CONVERTER).is_file():
            notes[p] = f"{H5_CONVERTER} is not in the tree"
            continue
        built[p], made[p] = build_artifact(cache, sdists, root, source_tree.tree_id,
                                           Path(model_info.hf_dir), model_info.source_digest,
                                           p, log)
    return UpstreamEncoders(built, made, sdists, source_tree.tree_id,
                            model_info.source_digest, notes)
