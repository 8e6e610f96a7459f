"""Parameter files are validated before any work: the shipped files validate, bad ones are
refused naming file and key. The command line's exit 2 is in tests/fake/test_params.py."""


import pytest
import yaml

from verifylib import params
from verifylib.errors import ParametersInvalid

from tests.helpers import ROOT


@pytest.mark.parametrize("name", ["tiny-en.yaml", "tiny-en-97c56f1.yaml"])
def test_shipped_parameter_files_validate(name):
    p = params.load(ROOT / "parameters" / name)
    assert p.name == name[:-5]
    assert p["canary"]["runs"] == 20


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
