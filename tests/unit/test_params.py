"""Parameter files are validated before any work: the shipped files validate, bad ones are
refused naming file and key. The command line's exit 2 is in tests/fake/test_params.py."""


import pytest
import yaml

from verifylib import params
from verifylib.errors import ParametersInvalid

from tests.helpers import ROOT


@pytest.mark.parametrize("name", ["tiny-en.yaml", "tiny-en-97c56f1.yaml", "tiny-en-v1.9.3.yaml"])
def test_shipped_parameter_files_validate(name):
    p = params.load(ROOT / "parameters" / name)
    assert p.name == name[:-5]
    assert p["canary"]["runs"] == 20


def test_v193_file_needs_github_for_its_source_only():
    # The newest release beside the default: the same registry model and clips, so the
    # two audits compare, and git (GitHub) for the source, at the manifest's commit.
    from verifylib.whispercpp.source import load_pins

    new = params.load(ROOT / "parameters" / "tiny-en-v1.9.3.yaml")
    default = params.load(ROOT / "parameters" / "tiny-en.yaml")
    assert new.runtime.pin == "v1.9.3"
    assert new.runtime.source == {"kind": "git",
                                  "url": "https://github.com/ggml-org/whisper.cpp.git",
                                  "commit": load_pins()["v1.9.3"].commit}
    assert new["model"] == default["model"] and new["model"]["kind"] == "ct2-pypi"
    assert new.fixtures == default.fixtures


def _write(tmp_path, mutate):
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    mutate(data)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


CASES = [
    (lambda d: d.__setitem__("colour", "blue"), "unknown key colour"),
    (lambda d: d["runtime"].__setitem__("turbo", True), "unknown key runtime.turbo"),
    (lambda d: d["canary"].__setitem__("runs", "twenty"), "key canary.runs: expected integer"),
    (lambda d: d["runtime"].__setitem__("pin", "v0.0.1"), "key runtime.pin: unknown pin"),
    (lambda d: d["runtime"].__setitem__("source", {"kind": "folder", "path": "/nonexistent/x"}),
     "key runtime.source.path"),
    (lambda d: d["fixtures"][0].update({"path": "nope.wav"}) or d["fixtures"][0].pop("runtime_file"),
     "key fixtures[0].path"),
    (lambda d: d.pop("model"), "missing key model"),
    (lambda d: d["fixtures"][0].__setitem__("public", False), "key fixtures[0].text: a non-public"),
    (lambda d: d["fixtures"][0].__setitem__("text_file", "nope.txt"), "give text or text_file"),
    (lambda d: d["runtime"].__setitem__("source", {"kind": "git", "url": "x", "commit": "a" * 40}),
     "key runtime.source.commit"),
]


@pytest.mark.parametrize("mutate,message", CASES)
def test_bad_parameters_are_named(tmp_path, mutate, message):
    f = _write(tmp_path, mutate)
    with pytest.raises(ParametersInvalid) as exc:
        params.load(f)
    assert str(f) in str(exc.value)
    assert message in str(exc.value)


def test_missing_and_non_yaml_files(tmp_path):
    with pytest.raises(ParametersInvalid, match="not found"):
        params.load(tmp_path / "absent.yaml")
    bad = tmp_path / "x.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ParametersInvalid, match="not valid YAML"):
        params.load(bad)


# ----------------------------------------------------------------------------- encoder / ggml

def _package(root, name="ggml-tiny.en-encoder.mlpackage", files=("Manifest.json",
             "Data/com.apple.CoreML/model.mlmodel")):
    pkg = root / name
    for f in files:
        (pkg / f).parent.mkdir(parents=True, exist_ok=True)
        (pkg / f).write_bytes(b"x")
    return pkg


def _only_jfk(d):
    # The other fixtures are relative to parameters/, which a copy in tmp_path is not in.
    d["fixtures"] = d["fixtures"][:1]


def test_a_given_encoder_is_accepted_and_switches_the_fp16_export_off(tmp_path):
    pkg = _package(tmp_path)
    p = params.load(_write(tmp_path, lambda d: (d.__setitem__("encoder", {"path": str(pkg)}),
                                                d.pop("export"), _only_jfk(d))))
    assert p.encoder == params.EncoderSection(str(pkg), "mlpackage")
    assert p.export.fp16 is False
    assert params.load(ROOT / "parameters" / "tiny-en.yaml").encoder is None


def test_a_relative_encoder_path_is_resolved_against_the_parameter_file(tmp_path):
    _package(tmp_path, "enc.mlmodelc", ("metadata.json", "coremldata.bin"))
    p = params.load(_write(tmp_path, lambda d: (d.__setitem__("encoder", {"path": "enc.mlmodelc"}),
                                                d.pop("export"), _only_jfk(d))))
    assert p.encoder.path == str((tmp_path / "enc.mlmodelc").resolve())
    assert p.encoder.format == "mlmodelc"


ENCODER_CASES = [
    (lambda t: str(t / "absent.mlpackage"), "does not exist"),
    (lambda t: str(_package(t, "enc.zip")), "ends in none of .mlpackage, .mlmodelc, .mlmodelc.zip"),
    (lambda t: (t / "f.mlpackage").write_bytes(b"") or str(t / "f.mlpackage"), "is a file"),
    (lambda t: str(_package(t, "e.mlpackage", ("Manifest.json",))),
     "is not an ML package (no Data/com.apple.CoreML/model.mlmodel)"),
    (lambda t: str(_package(t, "e.mlmodelc", ("model.mil",))),
     "is not a compiled Core ML model (no metadata.json, coremldata.bin)"),
]


@pytest.mark.parametrize("make, message", ENCODER_CASES)
def test_a_bad_encoder_path_is_refused_naming_the_key(tmp_path, make, message):
    path = make(tmp_path)
    f = _write(tmp_path, lambda d: (d.__setitem__("encoder", {"path": path}), d.pop("export")))
    with pytest.raises(ParametersInvalid) as exc:
        params.load(f)
    assert str(f) in str(exc.value) and "key encoder.path" in str(exc.value)
    assert message in str(exc.value)


def test_an_fp16_export_beside_a_given_encoder_is_refused(tmp_path):
    pkg = _package(tmp_path)
    f = _write(tmp_path, lambda d: d.update(encoder={"path": str(pkg)}, export={"fp16": True}))
    with pytest.raises(ParametersInvalid, match="key export.fp16: a prebuilt encoder"):
        params.load(f)


@pytest.mark.parametrize("body, message", [
    (None, "does not exist"),
    (b"lmgg" + b"\0" * 60, "magic"),
    (b"lmgg", "truncated"),
])
def test_a_bad_ggml_model_file_is_refused_naming_the_key(tmp_path, body, message):
    path = tmp_path / "ggml-tiny.en.bin"
    if body is not None:
        path.write_bytes(body[::-1] if message == "magic" else
                         (0x67676D6C).to_bytes(4, "little") + body)
    f = _write(tmp_path, lambda d: d.__setitem__("model", {"kind": "ggml", "path": str(path),
                                                           "language": "en"}))
    with pytest.raises(ParametersInvalid) as exc:
        params.load(f)
    assert "key model.path" in str(exc.value) and str(f) in str(exc.value)
    assert message in str(exc.value).lower()


def test_a_ggml_model_path_must_be_a_bin_file(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    f = _write(tmp_path, lambda d: d.__setitem__("model", {"kind": "ggml", "path": "m.gguf"}))
    with pytest.raises(ParametersInvalid, match=r"key model.path: m.gguf does not end in .bin"):
        params.load(f)


# ----------------------------------------------------------------------------- runtime.ggml_backend

def test_the_ggml_backend_defaults_to_cpu_and_metal_needs_macos(tmp_path):
    from verifylib.runtime import capabilities
    assert params.load(ROOT / "parameters" / "tiny-en.yaml").runtime.ggml_backend == "cpu"
    f = _write(tmp_path, lambda d: d["runtime"].__setitem__("ggml_backend", "cuda"))
    with pytest.raises(ParametersInvalid, match=r"key runtime.ggml_backend: .*'cpu', 'metal'"):
        params.load(f)
    metal = _write(tmp_path, lambda d: d["runtime"].__setitem__("ggml_backend", "metal"))
    assert capabilities.detect().system == "Linux"
    with pytest.raises(ParametersInvalid) as exc:
        params.load(metal)
    assert str(metal) in str(exc.value)
    assert "key runtime.ggml_backend: 'metal' needs macOS (this host: Linux" in str(exc.value)
    # The host decides, as for every capability: a (simulated) Mac accepts it.
    import shutil
    shutil.copytree(ROOT / "parameters" / "fixtures", tmp_path / "fixtures")
    capabilities.simulate(capabilities.HostCapabilities("Darwin", "arm64", (15, 1), None,
                                                        simulated=True))
    try:
        assert params.load(metal).runtime.ggml_backend == "metal"
    finally:
        capabilities.simulate(None)


def test_verifylib_run_with_metal_on_linux_exits_2_before_any_work(tmp_path, capsys):
    from verifylib.cli import main as cli
    metal = _write(tmp_path, lambda d: d["runtime"].__setitem__("ggml_backend", "metal"))
    reports = tmp_path / "reports"
    assert cli.main(["run", str(metal), "--reports", str(reports)]) == 2
    assert "key runtime.ggml_backend: 'metal' needs macOS" in capsys.readouterr().err
    assert not reports.exists()


# ----------------------------------------------------------------------------- hostile files

def test_a_linked_fixture_is_refused_and_its_target_never_stored(tmp_path):
    """A link is refused whatever it points to: stored resolved, its target's path would
    be in run.json and every notebook."""
    from tests.helpers.hostile_inputs import accepted_audio
    good = accepted_audio(tmp_path / "a")["stereo"]
    for target, name in ((good, "good.wav"), ("/etc/passwd", "passwd.wav")):
        (tmp_path / name).symlink_to(target)
        f = _write(tmp_path, lambda d: d.update(fixtures=[{"id": "x", "public": True,
                                                           "path": name, "text": "hi"}]))
        with pytest.raises(ParametersInvalid) as exc:
            params.load(f)
        assert f"{f}: key fixtures[0].path: {tmp_path / name} is a symbolic link" \
            in str(exc.value)
    (tmp_path / "ref.txt").symlink_to("/etc/passwd")
    f = _write(tmp_path, lambda d: d.update(fixtures=[{"id": "x", "public": True,
                                                       "path": str(good),
                                                       "text_file": "ref.txt"}]))
    with pytest.raises(ParametersInvalid, match=r"key fixtures\[0\].text_file: .* symbolic"):
        params.load(f)


def test_8_bit_stereo_and_22050_hz_fixtures_are_accepted(tmp_path):
    """Decoded once to 16 kHz mono 16-bit by the intake: nothing to refuse."""
    from tests.helpers.hostile_inputs import accepted_audio
    files = accepted_audio(tmp_path)
    f = _write(tmp_path, lambda d: d.update(fixtures=[
        {"id": k.replace("-", "_"), "public": True, "path": str(v), "text": "hi"}
        for k, v in files.items()]))
    assert len(params.load(f).fixtures) == 3


def test_a_hostile_ct2_folder_is_refused_at_validation(tmp_path):
    from tests.helpers.hostile_inputs import ct2_folder, hostile_ct2
    for name, folder in hostile_ct2(tmp_path).items():
        f = _write(tmp_path, lambda d: d.update(model={"kind": "ct2-dir", "path": str(folder)}))
        with pytest.raises(ParametersInvalid) as exc:
            params.load(f)
        assert str(exc.value).startswith(f"{f}: key model.path: {folder / 'model.bin'}: "), name
    other = ct2_folder(tmp_path / "other")
    from tests.helpers.ct2_files import write_ct2_file
    import numpy as np
    write_ct2_file(other / "model.bin", [("x", np.zeros(1, np.float32), "float32")],
                   spec="TransformerSpec")
    f = _write(tmp_path, lambda d: d.update(model={"kind": "ct2-dir", "path": str(other)}))
    with pytest.raises(ParametersInvalid, match="'TransformerSpec' is not a Whisper model"):
        params.load(f)
