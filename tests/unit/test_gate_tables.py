"""Gate tables as data: every version a run can have been judged under, and the current one
is the live table (changing the table without a new version entry fails here)."""

from __future__ import annotations

import json
from pathlib import Path

import verifylib
from verifylib.evidence import gates


def _doc():
    return json.loads(Path(gates.__file__).with_name("gate_tables.json").read_text())


def test_the_current_version_is_the_live_table():
    rows = _doc()["tables"][str(gates.GATE_TABLE)]["gates"]
    assert rows == [gates.row_of(g) for g in gates.GATES]
    assert max(int(v) for v in _doc()["tables"]) == gates.GATE_TABLE
    assert gates.table(gates.GATE_TABLE) is gates.GATES


def test_each_version_is_known_by_its_gates():
    tables = {v: gates.table(v) for v in range(1, gates.GATE_TABLE + 1)}
    assert [len(t) for t in tables.values()] == [18, 19, 22]
    for v, t in tables.items():
        assert gates.table_of_ids(g.id for g in t) == v
    # 2 added export.pair to 1; 3 the seam's three informational gates to 2.
    ids = {v: {g.id for g in t} for v, t in tables.items()}
    assert ids[2] - ids[1] == {"export.pair"}
    assert ids[3] - ids[2] == {"canary.seam_negative", "canary.seam_positive", "wer.seam"}
    assert gates.table_of_ids(["build.ggml"]) is None


def test_an_older_table_keeps_its_own_rows_and_verdict():
    t1 = gates.table(1)
    statuses = {g.id: "PASS" for g in t1}
    assert gates.verdict(statuses, t1) is gates.Verdict.ADMISSIBLE
    statuses["parity.program"] = "FAIL"
    assert gates.verdict(statuses, t1) is gates.Verdict.REJECTED


def test_the_version_says_the_gate_table():
    from verifylib.cli import main as cli
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--version"]) == 0
    assert out.getvalue().strip() == (f"verifylib {verifylib.__version__} (gate table "
                                      f"{gates.GATE_TABLE}, receipt verifylib-receipt/2)")
