"""Core ML export, the parts that convert nothing: the contract check on a description, the
recorded tool versions, hard-link publishing, and the macOS-only steps (coremlc,
CompiledMLModel) driven correctly, tested with fakes. Conversions are in
tests/physical/test_coreml_export.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from verifylib.runtime import contracts
from verifylib.canonical import tree_digest
from verifylib.models.coreml_contract import (
    EncoderContract,
    EncoderContractBroken,
    contract_problems,
)
from verifylib.models.coreml_export import build_facts
from verifylib.models.coreml_package import (
    CompileError,
    compile_mlpackage,
    link_or_copy,
    load_compiled,
    predict_compiled,
)
from verifylib.runtime.runner import RunResult


PACKAGE = "ggml-model-encoder.mlpackage"


# ----------------------------------------------------------------------------- helpers


def test_build_facts_record_versions_and_the_torch_warning():
    f = build_facts()
    assert f["coremltools"] == "9.0" and f["torch"].startswith("2.13")
    assert f["torch_max_tested_by_coremltools"] == "2.7.0"
    assert f["torch_above_tested"] is True
    (warning,) = f["torch_version_warning"]
    assert "has not been tested with coremltools" in warning and "2.7.0" in warning


def test_the_torch_warning_coremltools_logs_at_import_is_not_printed(capsys):
    """Printed when coremltools is imported, it came before a refusal's one line; logged by
    the same check run outside the import (build_facts), it is kept as evidence."""
    import logging

    import verifylib  # noqa: F401 - installs the filter, as any verifylib import does

    line = ("Torch version 2.13.0+cpu has not been tested with coremltools. You may run into "
            "unexpected errors. Torch 2.7.0 is the most recent version that has been tested.")
    logger = logging.getLogger("coremltools")
    kept: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: kept.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        # The module-level code of coremltools._deps, as its import runs it.
        exec(compile("warn(line)", "_deps/__init__.py", "exec"),
             {"__name__": "coremltools._deps", "warn": logger.warning, "line": line})
        assert kept == []
        logger.warning(line)  # called from a function, as build_facts calls the check
        assert kept == [line]
        logger.warning("another coremltools warning")
        assert kept == [line, "another coremltools warning"]
    finally:
        logger.removeHandler(handler)
    assert "has not been tested" not in capsys.readouterr().err


def test_contract_problems_is_pure_and_complete():
    c = EncoderContract(80, 1500, 384, 1, 2)
    good = {"model_type": "mlProgram", "compute_dtypes": ["FLOAT32"],
            "inputs": [{"name": "logmel_data", "type": "multiArrayType", "dtype": "FLOAT32",
                        "shape": [1, 80, 3000], "flexible_shape": None}],
            "outputs": [{"name": "output", "type": "multiArrayType", "dtype": "FLOAT32",
                         "shape": [1, 1500, 384], "flexible_shape": None}]}
    assert contract_problems(good, c, "fp32") == []
    bad = {**good, "model_type": "neuralNetwork"}
    assert "not an ML program" in contract_problems(bad, c, "fp32")[0]
    flex = {**good, "inputs": [{**good["inputs"][0], "flexible_shape": "shapeRange"}]}
    assert "flexible shape" in contract_problems(flex, c, "fp32")[0]
    extra = {**good, "outputs": good["outputs"] + [{**good["outputs"][0], "name": "x"}]}
    assert "exactly ['output']" in contract_problems(extra, c, "fp32")[0]
    wide = {**good, "outputs": [{**good["outputs"][0], "shape": [1, 1500, 512]}]}
    assert "shape [1, 1500, 512]" in contract_problems(wide, c, "fp32")[0]
    assert contract_problems(good, c, "fp16") == ["fp16 variant computes in ['FLOAT32'], "
                                                  "expected FLOAT16"]
    with pytest.raises(ValueError):
        EncoderContract(80, 0, 384, 1, 2)


def test_link_or_copy_publishes_the_same_bytes(tmp_path):
    src = tmp_path / "fp32" / "ggml-model.bin"
    src.parent.mkdir()
    src.write_bytes(b"ggml" * 100)
    how = link_or_copy(src, tmp_path / "fp16" / "ggml-model.bin")
    assert how in ("hardlink", "copy")
    assert (tmp_path / "fp16" / "ggml-model.bin").read_bytes() == src.read_bytes()
    assert [p.name for p in (tmp_path / "fp16").iterdir()] == ["ggml-model.bin"]


# ----------------------------------------------------------------------------- macOS steps, faked

def _result(argv, rc=0, stderr=b""):
    return RunResult(argv=[str(a) for a in argv], returncode=rc,
                     signal=contracts.decode_signal(rc, "Linux"), timed_out=False, stdout=b"",
                     stderr=stderr, wall_s=0.1, signal_table="Linux")


def _fake_coremlc(produce=True, rc=0, name=None):
    calls = []

    def runner(argv, timeout=None):
        calls.append(list(argv))
        assert argv[:3] == ["xcrun", "coremlc", "compile"]
        pkg, out = Path(argv[3]), Path(argv[4])
        if produce and rc == 0:
            d = out / (name or pkg.stem + ".mlmodelc")
            (d / "weights").mkdir(parents=True)
            (d / "model.mil").write_text("program(1.0)")
            (d / "weights" / "weight.bin").write_bytes(b"\0" * 64)
        return _result(argv, rc, b"coremlc: error: boom\n" if rc else b"")
    return runner, calls


def test_compile_publishes_the_named_mlmodelc(tmp_path):
    pkg = tmp_path / "fp32" / PACKAGE
    pkg.mkdir(parents=True)
    dest = tmp_path / "fp32" / "ggml-model-encoder.mlmodelc"
    runner, calls = _fake_coremlc()
    res = compile_mlpackage(pkg, dest, runner=runner)
    (argv,) = calls
    assert argv[3] == str(pkg) and Path(argv[4]).parent == dest.parent
    assert res.path == dest and res.tree_digest == tree_digest(dest)
    assert sorted(p.name for p in dest.parent.iterdir()) == sorted([PACKAGE, dest.name])
    # The runtime derives exactly this folder from the model file beside it.
    assert contracts.coreml_encoder_path(str(tmp_path / "fp32" / "ggml-model.bin")) == str(dest)


@pytest.mark.parametrize("produce,rc,name,err", [
    (True, 1, None, "coremlc failed (exit 1)"),
    (False, 0, None, "wrote no ggml-model-encoder.mlmodelc"),
    (True, 0, "other.mlmodelc", "found ['other.mlmodelc']"),
])
def test_compile_failures_place_nothing(tmp_path, produce, rc, name, err):
    pkg = tmp_path / "fp32" / PACKAGE
    pkg.mkdir(parents=True)
    dest = tmp_path / "fp32" / "ggml-model-encoder.mlmodelc"
    runner, _ = _fake_coremlc(produce, rc, name)
    with pytest.raises(CompileError, match=err.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        compile_mlpackage(pkg, dest, runner=runner)
    assert [p.name for p in dest.parent.iterdir()] == [PACKAGE]


def test_compile_refuses_a_package_named_otherwise(tmp_path):
    with pytest.raises(ValueError, match="name the .mlpackage after the .mlmodelc"):
        compile_mlpackage(tmp_path / "encoder.mlpackage",
                          tmp_path / "ggml-model-encoder.mlmodelc", runner=_fake_coremlc()[0])


class FakeCompiled:
    """Stands in for coremltools.models.CompiledMLModel (macOS only)."""

    def __init__(self, path, compute_units=None, output=None):
        self.path, self.compute_units, self._output = path, compute_units, output
        self.fed = None

    def predict(self, feeds):
        self.fed = feeds
        return self._output(feeds)


def test_runtime_loads_with_compute_units_all_and_checks_the_output():
    import coremltools as ct
    c = EncoderContract(8, 5, 4, 1, 2)
    made = []

    def loader(path, compute_units=None):
        m = FakeCompiled(path, compute_units,
                         lambda f: {"output": np.ones(c.output_shape, np.float32)})
        made.append(m)
        return m

    model = load_compiled("/x/ggml-model-encoder.mlmodelc", loader=loader)
    assert model.compute_units == ct.ComputeUnit.ALL
    assert model.path == "/x/ggml-model-encoder.mlmodelc"
    mel = np.zeros(c.input_shape, np.float64)
    y = predict_compiled(model, mel, c)
    assert y.shape == c.output_shape
    assert list(model.fed) == ["logmel_data"] and model.fed["logmel_data"].dtype == np.float32
    for out, needle in (({"encoder_output": np.ones(c.output_shape, np.float32)}, "outputs"),
                        ({"output": np.ones(c.output_shape, np.float16)}, "dtype"),
                        ({"output": np.ones((1, 6, 4), np.float32)}, "shape")):
        bad = FakeCompiled("p", None, lambda f, out=out: out)
        with pytest.raises(EncoderContractBroken, match=needle):
            predict_compiled(bad, mel, c)
    with pytest.raises(ValueError):
        predict_compiled(model, np.zeros((1, 8, 9), np.float32), c)
