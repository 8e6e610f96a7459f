"""Hostile parameter files are refused in one line before anything expands them: an alias
bomb, deep nesting, a file or a string over its limit (verifylib/user_yaml.py). The
command line's exit 2 and empty reports folder are in tests/fake/test_params.py."""

import tracemalloc

import pytest
import yaml

from verifylib import user_yaml, params
from verifylib.errors import ParametersInvalid

from tests.helpers import ROOT

BASE = (ROOT / "parameters" / "tiny-en.yaml").read_text()


def _file(tmp_path, text, name="hostile.yaml"):
    f = tmp_path / name
    f.write_text(text)
    return f


def _refusal(path) -> str:
    """The refusal of ``params.load(path)``, checked to be one line naming the file."""
    with pytest.raises(ParametersInvalid) as info:
        params.load(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    assert len(msg) < 400, msg
    return msg


def _bomb(levels=9) -> str:
    """Anchors a0..a<levels>, each a list of ten aliases of the one before: 10^levels strings."""
    lines = ['bomb_0: &a0 "lol"']
    for i in range(1, levels + 1):
        lines.append(f"bomb_{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


@pytest.fixture
def no_schema(monkeypatch):
    """Fail the test if a refusal reached the schema validators."""
    def reached(data):
        raise AssertionError("the schema validators saw the data")
    monkeypatch.setattr(params, "_schema_problems", reached)


@pytest.mark.parametrize("key", ["name", "description", "fixtures"])
def test_an_alias_bomb_is_refused_before_it_expands(tmp_path, key, no_schema):
    text = _bomb() + BASE.replace(f"\n{key}:", f"\n{key}: *a9\nold_{key}:", 1) \
        if key != "name" else _bomb() + BASE.replace("name: tiny-en", "name: *a9")
    f = _file(tmp_path, text)
    tracemalloc.start()
    try:
        msg = _refusal(f)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Refused at the first alias (line 2 of the bomb), whatever later line uses it.
    assert "line 2, column" in msg and "YAML alias *a0 refused" in msg
    assert peak < 8 << 20  # a bomb expanded even once would take gigabytes


def test_a_merge_key_is_an_alias_too(tmp_path):
    text = BASE.replace("canary:\n  runs: 20", "canary: &c\n  runs: 20") + "export2:\n  <<: *c\n"
    assert "YAML alias *c refused" in _refusal(_file(tmp_path, text))


@pytest.mark.parametrize("opening,closing", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_refused_at_the_limit_not_by_a_recursion_error(
        tmp_path, opening, closing, no_schema):
    depth = 100_000
    f = _file(tmp_path, "name: " + opening * depth + "1" + closing * depth + "\n")
    msg = _refusal(f)
    assert f"nested deeper than {user_yaml.MAX_DEPTH} levels" in msg
    assert "line 1, column" in msg


def test_nesting_up_to_the_limit_is_read(tmp_path):
    # The top-level mapping is level 1: 31 lists inside it reach the limit.
    inner = user_yaml.MAX_DEPTH - 1
    f = _file(tmp_path, "deep: " + "[" * inner + "1" + "]" * inner + "\n")
    assert user_yaml.read(f)["deep"] == eval("[" * inner + "1" + "]" * inner)
    f = _file(tmp_path, "deep: " + "[" * (inner + 1) + "1" + "]" * (inner + 1) + "\n")
    with pytest.raises(ParametersInvalid, match="nested deeper than 32"):
        user_yaml.read(f)


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path, no_schema):
    # A 50 MB description: the file is sparse (its size is what is checked, before a byte
    # of it is read), so the test writes a few KB.
    f = _file(tmp_path, BASE.replace("description: >-\n", "description: x"))
    with open(f, "r+b") as fh:
        fh.truncate(50_000_000)
    msg = _refusal(f)
    assert msg == (f"{f}: 50000000 bytes, above the limit of {user_yaml.MAX_FILE_BYTES} "
                   "for a parameter file")
    with open(f, "r+b") as fh:
        fh.truncate(user_yaml.MAX_FILE_BYTES + 1)
    assert "above the limit" in _refusal(f)


def test_a_string_just_over_the_limit_is_refused_naming_its_key(tmp_path, no_schema):
    limit = user_yaml.MAX_STRING_BYTES
    at = BASE.replace("description: >-\n", f"description: {'x' * limit}\nold: >-\n")
    over = BASE.replace("description: >-\n", f"description: {'x' * (limit + 1)}\nold: >-\n")
    assert user_yaml.read(_file(tmp_path, at, "at.yaml"))["description"] == "x" * limit
    msg = _refusal(_file(tmp_path, over))
    assert msg.endswith(f"key description: a string of {limit + 1} bytes, above the limit "
                        f"of {limit}")
    # Counted in UTF-8 bytes: 5462 three-byte characters are 16386 bytes.
    wide = BASE.replace("  - id: jfk\n", f"  - id: jfk\n    note: {'語' * 5462}\n")
    assert "key fixtures[0].note: a string of 16386 bytes" in _refusal(_file(tmp_path, wide))


def test_a_key_over_the_limit_is_refused(tmp_path):
    # YAML's plain keys stop at 1024 characters; an explicit one (``? key``) does not.
    f = _file(tmp_path, BASE + f"? {'k' * (user_yaml.MAX_STRING_BYTES + 1)}\n: 1\n")
    msg = _refusal(f)
    assert "a key of 16385 bytes" in msg and "kkkk… (16385 characters)" in msg


def test_too_many_values_are_refused(tmp_path, no_schema):
    f = _file(tmp_path, BASE + "extra: [" + ", ".join(["0"] * user_yaml.MAX_NODES) + "]\n")
    assert f"more than {user_yaml.MAX_NODES} keys and values" in _refusal(f)


def test_an_integer_python_will_not_convert_is_refused_with_its_place(tmp_path):
    f = _file(tmp_path, BASE.replace("jobs: 2", "jobs: " + "9" * 5000))
    msg = _refusal(f)
    assert "line 13, column 9: a value cannot be read" in msg


def test_invalid_yaml_is_one_line_with_its_place(tmp_path):
    msg = _refusal(_file(tmp_path, "name: tiny\n  bad: [indent\n"))
    assert msg.startswith(f"{tmp_path / 'hostile.yaml'}: not valid YAML: line 2, column")


def test_trees_given_as_data_are_bounded_too():
    # A notebook's injected parameters never pass through the YAML reader.
    data = yaml.safe_load(BASE)
    data["description"] = "d" * (user_yaml.MAX_STRING_BYTES + 1)
    with pytest.raises(ParametersInvalid, match="notebook parameters: key description: a "
                                                "string of 16385 bytes"):
        params.validate(data, "notebook parameters", ROOT / "parameters")
    # A Python bomb: one list shared ten times per level, walked as every reader walks it.
    bomb: object = "lol"
    for _ in range(9):
        bomb = [bomb] * 10
    data = yaml.safe_load(BASE)
    data["fixtures"] = bomb
    with pytest.raises(ParametersInvalid, match="more than 10000 keys and values"):
        params.validate(data, "notebook parameters", ROOT / "parameters")
    deep: object = 1
    for _ in range(5000):
        deep = {"a": deep}
    data = yaml.safe_load(BASE)
    data["model"] = deep
    with pytest.raises(ParametersInvalid, match=r"key model\.a\.a.*nested deeper than 32"):
        params.validate(data, "notebook parameters", ROOT / "parameters")


def test_schema_messages_never_show_a_value_whole(tmp_path):
    long_name = "n" * 10_000 + "!"
    msg = _refusal(_file(tmp_path, BASE.replace("name: tiny-en", f"name: {long_name}")))
    assert "key name: 'nnnn" in msg and "does not match" in msg
    extra = "".join(f"unknown_{i}: {'v' * 1000}\n" for i in range(100))
    msg = _refusal(_file(tmp_path, BASE + extra))
    assert msg.count("unknown_") == 5 and msg.endswith("and 95 more")
    msg = _refusal(_file(tmp_path, BASE.replace("pin: v1.8.5", f"pin: {'p' * 10_000}")))
    assert "unknown pin 'pppp" in msg and "(10002 characters)" in msg


def test_shorten_and_dotted():
    assert user_yaml.shorten("abc", 5) == "abc"
    assert user_yaml.shorten("abcdef", 3) == "abc… (6 characters)"
    assert user_yaml.dotted(["fixtures", 0, "path"]) == "fixtures[0].path"
    assert user_yaml.dotted([]) == "<top level>"


def test_a_user_pin_manifest_is_read_under_the_same_limits(tmp_path):
    """``runtime.manifest`` names a YAML file the user brings: an alias bomb as a pin's
    commit is refused at the alias, as in a parameter file, and its place is named."""
    from tests.unit.test_user_pins import parameter_file, user_manifest
    from verifylib.whispercpp.source import load_user_pins

    manifest = user_manifest(tmp_path / "pins")
    text = manifest.read_text().replace(f"commit: '{'a' * 40}'", "commit: *a9")
    manifest.write_text(_bomb() + text)
    tracemalloc.start()
    try:
        with pytest.raises(ParametersInvalid) as direct:
            load_user_pins(manifest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(direct.value).startswith(f"{manifest}: line 2, column")
    assert "a manifest takes no anchors' aliases" in str(direct.value)
    assert peak < 8 << 20
    f = parameter_file(tmp_path / "params", "../pins/user.yaml")
    msg = _refusal(f)
    assert msg.startswith(f"{f}: key runtime.manifest: {manifest}: line 2, column"), msg
    # A long value is shown cut, not whole.
    manifest.write_text(text.replace("commit: *a9", f"commit: '{'c' * 10_000}'"))
    with pytest.raises(ParametersInvalid, match=r"got 'cccc.*\(10002 characters\)$"):
        load_user_pins(manifest)
