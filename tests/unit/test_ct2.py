"""The CTranslate2 reader: synthetic files for every rule, then the real registry model."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from verifylib.models.ct2 import CT2Model, ModelError, read_ct2

# dtype name -> (code, numpy dtype of the raw bytes), as CTranslate2 numbers them.
CODES = {"float32": (0, "<f4"), "int8": (1, "i1"), "int16": (2, "<i2"), "int32": (3, "<i4"),
         "float16": (4, "<f2"), "bfloat16": (5, "<u2")}


def _string(text: str) -> bytes:
    raw = text.encode("utf-8") + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2_file(path: Path, variables: list[tuple[str, np.ndarray, str]], *,
                   aliases: dict[str, str] | None = None, spec: str = "WhisperSpec",
                   revision: int = 3, version: int = 6) -> Path:
    """Write a CTranslate2 model.bin independently of the reader under test.

    ``variables`` holds (name, array, dtype name); a bfloat16 array is given as float32
    and truncated to its upper 16 bits.
    """
    out = [struct.pack("<I", version), _string(spec), struct.pack("<I", revision),
           struct.pack("<I", len(variables))]
    for name, arr, dtype in variables:
        code, np_dtype = CODES[dtype]
        if dtype == "bfloat16":
            data = (np.asarray(arr, dtype="<f4").view("<u4") >> 16).astype("<u2").tobytes()
        else:
            data = np.ascontiguousarray(arr, dtype=np_dtype).tobytes()
        arr = np.asarray(arr)
        out.append(_string(name) + struct.pack("<B", arr.ndim)
                   + b"".join(struct.pack("<I", d) for d in arr.shape)
                   + struct.pack("<BI", code, len(data)) + data)
    aliases = aliases or {}
    out.append(struct.pack("<I", len(aliases)))
    for a, t in aliases.items():
        out.append(_string(a) + _string(t))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(out))
    return path


def _sample_vars():
    rng = np.random.default_rng(0)
    return [
        ("a/f32", rng.standard_normal((2, 3)).astype(np.float32), "float32"),
        ("a/f16", rng.standard_normal((4,)).astype(np.float16), "float16"),
        ("a/bf16", np.array([1.0, -2.5, 3.140625], np.float32), "bfloat16"),
        ("a/i8", np.array(3, np.int8), "int8"),
        ("a/i16", np.array(-1, np.int16), "int16"),
        ("a/i32", np.array([[7, -8]], np.int32), "int32"),
    ]


def test_round_trip_all_dtypes(tmp_path):
    write_ct2_file(tmp_path / "model.bin", _sample_vars(), aliases={"b/alias": "a/f32"})
    m = read_ct2(tmp_path)  # a folder is accepted too
    assert isinstance(m, CT2Model)
    assert (m.version, m.spec_name, m.revision) == (6, "WhisperSpec", 3)
    assert list(m.variables) == [v[0] for v in _sample_vars()]
    for name, arr, dtype in _sample_vars():
        assert m.dtypes[name] == dtype
        got = m.variables[name]
        assert got.shape == np.asarray(arr).shape
        np.testing.assert_array_equal(got, arr)  # bfloat16 values chosen to be exact
        assert not got.flags.writeable
    assert m.variables["a/bf16"].dtype == np.float32
    assert m.variables["a/i16"].reshape(()).item() == -1  # int16 is signed
    assert m.aliases == {"b/alias": "a/f32"} and m.resolve("b/alias") == "a/f32"
    assert m.scalar("a/i8") == 3


def test_truncated_file_names_file_and_variable(tmp_path):
    path = write_ct2_file(tmp_path / "model.bin", _sample_vars())
    data = path.read_bytes()
    path.write_bytes(data[:40])
    with pytest.raises(ModelError) as ei:
        read_ct2(path)
    assert str(path) in str(ei.value) and "'a/f32'" in str(ei.value)
    assert "truncated" in str(ei.value)


def test_unknown_dtype_code_refused(tmp_path):
    path = write_ct2_file(tmp_path / "model.bin", [("x/w", np.zeros(2, np.float32), "float32")])
    data = bytearray(path.read_bytes())
    # header (4 + 2+12 + 4 + 4) + name (2 + 4) + rank (1) + dim (4) -> dtype byte
    off = 26 + 6 + 1 + 4
    assert data[off] == 0
    data[off] = 9
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"variable 'x/w' has unknown dtype code 9") as ei:
        read_ct2(path)
    assert str(path) in str(ei.value)


def test_byte_count_mismatch_refused(tmp_path):
    path = write_ct2_file(tmp_path / "model.bin", [("x/w", np.zeros(2, np.float32), "float32")])
    data = bytearray(path.read_bytes())
    off = 26 + 6 + 1 + 4 + 1
    assert struct.unpack_from("<I", data, off)[0] == 8
    struct.pack_into("<I", data, off, 6)
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"variable 'x/w' declares 6 bytes, but dims \[2\] of float32 need 8"):
        read_ct2(path)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: struct.pack("<I", 5) + d[4:], "supported binary version"),
    (lambda d: d + b"\0", "trailing bytes"),
    (lambda d: b"", "truncated while reading the binary version"),
])
def test_structural_refusals(tmp_path, mutate, message):
    path = write_ct2_file(tmp_path / "model.bin", [("x/w", np.zeros(2, np.float32), "float32")])
    path.write_bytes(mutate(path.read_bytes()))
    with pytest.raises(ModelError, match=message):
        read_ct2(path)


def test_dangling_alias_and_duplicate_refused(tmp_path):
    p1 = write_ct2_file(tmp_path / "a" / "model.bin", [("x", np.zeros(1, np.float32), "float32")],
                        aliases={"y": "nothing"})
    with pytest.raises(ModelError, match="alias 'y' points to no variable"):
        read_ct2(p1)
    v = ("x", np.zeros(1, np.float32), "float32")
    p2 = write_ct2_file(tmp_path / "b" / "model.bin", [v, v])
    with pytest.raises(ModelError, match="variable 'x' appears twice"):
        read_ct2(p2)


def test_missing_file_refused(tmp_path):
    with pytest.raises(ModelError, match="no such file"):
        read_ct2(tmp_path)


def test_real_faster_whisper_tiny_en(tiny_en_ct2_dir):
    m = read_ct2(tiny_en_ct2_dir / "model.bin")
    assert (m.version, m.spec_name, m.revision) == (6, "WhisperSpec", 3)
    assert len(m.variables) == 148
    assert m.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert m.variables["decoder/embeddings/weight"].shape == (51864, 384)
    assert m.dtypes["decoder/embeddings/weight"] == "float16"
    assert m.scalar("encoder/num_heads") == 6 and m.scalar("decoder/num_heads") == 6
    assert m.scalar("decoder/activation") == 3  # GELU
    counts = {}
    for d in m.dtypes.values():
        counts[d] = counts.get(d, 0) + 1
    assert counts == {"float16": 139, "int8": 5, "int16": 4}
    total = sum(v.nbytes for k, v in m.variables.items() if m.dtypes[k] != "bfloat16")
    assert total < (tiny_en_ct2_dir / "model.bin").stat().st_size  # data + headers, parsed exactly


from tests.test_model import cache_root, tiny_en_ct2_dir  # noqa: E402,F401  (shared fixtures)
