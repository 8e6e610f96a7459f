"""The ``.npz`` evidence files: what :func:`verifylib.numerics.arrays.encode` writes."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from verifylib.errors import EvidenceInvalid
from verifylib.numerics.arrays import decode, encode


def _arrays():
    rng = np.random.default_rng(7)
    # Structured like an encoder's output (smooth along time), not white noise.
    smooth = np.cumsum(rng.standard_normal((1, 300, 16)), axis=1).astype(np.float32)
    return {"fixture": smooth, "mask": smooth > 0, "ids": np.arange(5, dtype=np.int64)}


def test_numpy_reads_the_archive_back_exactly():
    arrays = _arrays()
    with np.load(io.BytesIO(encode(arrays)), allow_pickle=False) as z:
        assert sorted(z.files) == sorted(arrays)
        for key, want in arrays.items():
            assert z[key].dtype == want.dtype and np.array_equal(z[key], want)
    got = decode(encode(arrays))
    assert all(np.array_equal(got[k], arrays[k]) for k in arrays)


def test_the_same_arrays_give_the_same_bytes():
    # As numpy.savez_compressed's: a fixed member date, not the time of writing.
    a = encode(_arrays())
    assert encode(_arrays()) == a
    with zipfile.ZipFile(io.BytesIO(a)) as zf:
        infos = zf.infolist()
    assert [i.filename for i in infos] == ["fixture.npy", "mask.npy", "ids.npy"]
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}


def test_deflate_level_one_is_smaller_than_stored_and_near_numpys():
    arrays = _arrays()
    ours = encode(arrays)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    raw = sum(a.nbytes for a in arrays.values())
    assert len(ours) < raw
    assert len(ours) <= 1.1 * len(buf.getvalue())


@pytest.mark.parametrize("arrays", [{"a/b": np.zeros(2)}, {"": np.zeros(2)},
                                    {"s": np.array(["x"])}])
def test_bad_names_and_non_numeric_arrays_are_refused(arrays):
    with pytest.raises(EvidenceInvalid):
        encode(arrays)
