"""Runs made by each release verify today, under their own versions, and edits still fail.

The runs are complete runs of the smallest audit each release could make
(tests/data/runs/README.md), unpacked into a temporary folder: no cache, network or child
process.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.helpers import ROOT
from verifylib.evidence import receipt

DATA = ROOT / "tests" / "data" / "runs"
RUNS = {  # archive stem -> (receipt format, gate table, made by)
    "0.1.0-5d1a7a1-receipt1-table1": ("verifylib-receipt/1", 1, "0.1.0"),
    "0.1.0-8ffc2c4-receipt1-table2": ("verifylib-receipt/1", 2, "0.1.0"),
    "0.2.0-receipt2-table3": ("verifylib-receipt/2", 3, "0.2.0"),
}


def _unpack(stem: str, dest: Path) -> Path:
    with tarfile.open(DATA / f"{stem}.tar.xz") as tar:
        (top,) = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        tar.extractall(dest, filter="data")
    return dest / top


@pytest.mark.parametrize("stem", RUNS)
def test_each_release_s_run_verifies_under_its_own_versions(stem, tmp_path):
    run_dir = _unpack(stem, tmp_path)
    res = receipt.verify(run_dir)
    assert res.ok, res.problems
    assert res.verdict == "INCOMPLETE"
    fmt, table, made_by = RUNS[stem]
    assert (res.versions["receipt"], res.versions["gate_table"], res.versions["verifylib"]) \
        == (fmt, table, made_by)
    assert res.versions["policies"]["parity.program"] == ["fp32-v1"]


@pytest.mark.parametrize("stem", RUNS)
def test_an_edited_run_of_any_release_does_not_verify(stem, tmp_path):
    run_dir = _unpack(stem, tmp_path)
    # A byte of the evidence.
    wer = run_dir / "evidence" / "05_wer" / "wer.json"
    wer.write_bytes(wer.read_bytes().replace(b'"jfk"', b'"jfK"', 1))
    res = receipt.verify(run_dir)
    assert not res.ok and "evidence/05_wer/wer.json: changed (SHA-256 differs from the " \
        "receipt)" in res.problems


@pytest.mark.parametrize("stem", RUNS)
def test_a_receipt_made_to_claim_another_table_does_not_verify(stem, tmp_path):
    run_dir = _unpack(stem, tmp_path)
    path = run_dir / "receipt.json"
    doc = json.loads(path.read_text())
    fmt, table, _ = RUNS[stem]
    if fmt == "verifylib-receipt/2":
        doc["versions"]["gate_table"] = 2
    else:
        # A /1 receipt with one gate row dropped names no table at all.
        doc["gates"] = [g for g in doc["gates"] if g["id"] != "parity.program"]
    path.write_text(json.dumps(doc))
    res = receipt.verify(run_dir)
    assert not res.ok, res.problems
    if fmt == "verifylib-receipt/2":
        # Table 2 has no seam gates: the receipt's are unknown to it, and their launches
        # are owned by no gate.
        assert "receipt names unknown gates: ['canary.seam_negative', " \
            "'canary.seam_positive', 'wer.seam']" in res.problems, res.problems
    else:
        assert res.problems == [f"{path}: a verifylib-receipt/1 receipt whose gates are those "
                                "of no gate table this version knows"]


def test_a_receipt_whose_versions_were_edited_does_not_verify(tmp_path):
    run_dir = _unpack("0.2.0-receipt2-table3", tmp_path)
    path = run_dir / "receipt.json"
    doc = json.loads(path.read_text())
    doc["versions"]["policies"]["wer.ggml_vs_source"] = ["wer-v1"]
    path.write_text(json.dumps(doc))
    res = receipt.verify(run_dir)
    assert res.problems == ["versions: the receipt's differ from what its evidence was judged "
                            "under"]
    doc["versions"]["gate_table"] = 9
    path.write_text(json.dumps(doc))
    assert receipt.verify(run_dir).problems == [
        f"{path}: names gate table 9, which this version of verifylib does not know (it knows "
        "1 to 3)"]
