"""The CTranslate2 reader on synthetic files, one per rule (tests/helpers/ct2_files.py writes
them independently of the reader). The real registry model is read in
tests/physical/test_ct2.py."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from verifylib.models.ct2 import CT2Model, ModelError, read_ct2
from tests.helpers.ct2_files import write_ct2_file


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




# ----------------------------------------------------------------------------- header only

def test_the_header_pass_lists_what_read_ct2_reads_without_the_data(tmp_path):
    from verifylib.models.ct2 import read_ct2_header
    path = write_ct2_file(tmp_path / "model.bin", _sample_vars(), aliases={"b/alias": "a/f32"})
    head = read_ct2_header(tmp_path)
    full = read_ct2(path)
    assert [v.name for v in head.variables] == list(full.variables)
    assert {v.name: v.dtype for v in head.variables} == full.dtypes
    assert head.aliases == full.aliases and head.size == path.stat().st_size
    data = path.read_bytes()
    for v in head.variables:
        assert tuple(v.dims) == full.variables[v.name].shape
        assert data[v.offset:v.offset + v.nbytes] == bytes(
            np.ascontiguousarray(full.variables[v.name]).tobytes()) or v.dtype == "bfloat16"


def test_the_header_pass_refuses_hostile_tables(tmp_path):
    """Truncated, a variable count of 2^32-1, dims of 2^31 (their bytes overflow the byte
    count), and a dim whose extent passes the file's end: each refused, naming the file."""
    from tests.helpers.hostile_inputs import hostile_ct2
    from verifylib.models.ct2 import read_ct2_header
    needles = {"ct2-truncated": "truncated while reading",
               "ct2-count": "declares 4294967295 variables",
               "ct2-dims": "dims [2147483648, 4] of float32 need 34359738368"}
    for name, folder in hostile_ct2(tmp_path).items():
        with pytest.raises(ModelError, match=re.escape(needles[name])) as exc:
            read_ct2_header(folder)
        assert str(folder / "model.bin") in str(exc.value)
    # int8 [2^31] declares 2^31 bytes, which agrees with its dims: its extent is refused.
    path = write_ct2_file(tmp_path / "past" / "model.bin", [("x", np.zeros(4, np.int8), "int8")])
    data = bytearray(path.read_bytes())
    at = 4 + 14 + 4 + 4 + 4 + 1  # header, count, name "x\0", rank -> dim 0
    struct.pack_into("<I", data, at, 2 ** 31)
    struct.pack_into("<I", data, at + 4 + 1, 2 ** 31)  # the byte count after the dtype
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="truncated while reading the data of variable 'x'"):
        read_ct2_header(path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "model.bin").write_bytes(b"")
    with pytest.raises(ModelError, match="truncated while reading the binary version"):
        read_ct2_header(tmp_path / "empty")
