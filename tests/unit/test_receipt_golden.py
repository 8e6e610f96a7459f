"""The validator's exact words for each kind of tampering.

An auditor reads these lines, so they are part of the contract: each case pins the whole
problem list, not a fragment of it. Synthetic runs (``tests/helpers/synthetic.py``) keep this fast.
"""

from __future__ import annotations

import pytest

from verifylib.evidence import gates, receipt

from tests.helpers.forge import clone, edit_json, reseal
from tests.helpers.synthetic import install_rules, make_run

ANY_GATES = [g.id for g in gates.GATES if g.capability is gates.Capability.ANY
             and g.implemented]


@pytest.fixture
def honest(tmp_path, monkeypatch):
    install_rules(monkeypatch)
    return make_run(tmp_path / "honest")


def _problems(run_dir):
    res = receipt.verify(run_dir)
    assert not res.ok
    return res.problems


def test_file_list_problems(honest, tmp_path):
    d = clone(honest, tmp_path / "f")

    def edit(r):
        r["files"][0]["sha256"] = "XYZ"
        r["files"][1]["path"] = "../escape"
        r["files"].append({"path": "evidence/nothere.json", "sha256": "a" * 64})
        r["files"] = [x for x in r["files"] if x["path"] != "run.json"]
    first, second = receipt._covered_files(d)[:2]
    edit_json(d, "receipt.json", edit)
    assert _problems(d) == [
        f"{first}: malformed digest 'XYZ'",
        "receipt lists a bad path '../escape'",
        "evidence/nothere.json: missing",
        f"{second}: present but not listed in the receipt",
        "run.json: present but not listed in the receipt",
        "run.json: not covered by the receipt",
    ]


def test_changed_evidence_names_file_and_gate(honest, tmp_path):
    d = clone(honest, tmp_path / "c")
    p = d / "evidence/01_build/build.ggml.json"
    data = p.read_bytes()
    p.unlink()
    p.write_bytes(data + b" ")
    rel = "evidence/01_build/build.ggml.json"
    assert _problems(d) == [
        f"{rel}: changed (SHA-256 differs from the receipt)",
        f"gate build.ggml: evidence file changed: {rel} (digest differs from record)",
        f"build.ggml: cannot read evidence {rel} for its launches: evidence file changed: "
        f"{rel} (digest differs from record)",
    ]


@pytest.mark.parametrize("edit, expect", [
    (lambda r: r.update(params_sha256="0" * 64),
     ["parameters: run.json's params do not hash to the bound params_sha256"]),
    (lambda r: r["host"].update(simulated=True),
     ["host record: the run was made on a simulated host (verify --allow-simulated to "
      "inspect it anyway)"]),
    (lambda r: r["host"]["capabilities"].update(macos=True),
     ["host record: stored capabilities {'any': True, 'macos': True, 'macos+xcode': False, "
      "'macos-14.4': False} do not follow from its facts {'any': True, 'macos': False, "
      "'macos+xcode': False, 'macos-14.4': False}"]),
])
def test_run_record_problems(honest, tmp_path, edit, expect):
    d = clone(honest, tmp_path / "r")
    edit_json(d, "run.json", edit)
    reseal(d)
    assert _problems(d) == expect


def test_simulated_host_is_accepted_only_when_allowed(honest, tmp_path):
    d = clone(honest, tmp_path / "s")
    edit_json(d, "run.json", lambda r: r["host"].update(simulated=True))
    reseal(d)
    assert receipt.verify(d, allow_simulated=True).ok


def test_unusable_host_record(honest, tmp_path):
    d = clone(honest, tmp_path / "h")
    edit_json(d, "run.json", lambda r: r["host"].update(macos_version="1x"))
    reseal(d)
    got = _problems(d)
    assert got[0] == "host record: malformed macos_version '1x'"
    judged = [p for p in got[1:] if "PASS recorded" in p]
    assert judged == [f"gate {gid}: PASS recorded on a host without capability any"
                      for gid in ANY_GATES]
    assert "gate build.coreml: NOT_RUN(platform) but no usable host record says what the " \
           "host lacks" in got


def test_receipt_host_must_be_run_json_host(honest, tmp_path):
    d = clone(honest, tmp_path / "hd")
    edit_json(d, "receipt.json", lambda r: r["host"].update(machine="arm64"))
    assert _problems(d) == ["host record: the receipt's differs from run.json's"]


def test_gate_rows_problems(honest, tmp_path):
    d = clone(honest, tmp_path / "rows")

    def edit(r):
        r["gates"].append(dict(r["gates"][0]))
        r["gates"].append({"id": "nope.gate"})
        r["identities"] = []
    edit_json(d, "receipt.json", edit)
    assert _problems(d) == [
        "receipt gate rows are malformed or duplicated",
        "receipt names unknown gates: ['nope.gate']",
        "identity table malformed",
        "identity table: the receipt's differs from the stages' merged identities",
        "gate build.source_identity: identity runtime.tree differs from the identity table",
    ]


def test_gate_row_fields(honest, tmp_path):
    d = clone(honest, tmp_path / "rf")

    def edit(r):
        r["gates"][0]["stage"] = "02_export"
        r["gates"][1]["required"] = False
        r["gates"][2]["status"] = "MAYBE"
    edit_json(d, "receipt.json", edit)
    res = receipt.verify(d)
    assert res.verdict is None
    assert res.problems == [
        "gate build.source_identity: stage/required differ from the registry",
        "gate build.patch_exact: stage/required differ from the registry",
        "gate build.ggml: unknown status 'MAYBE'",
        "gate export.ggml_model: PASS although prerequisite build.ggml is missing",
        "gate canary.lifecycle_ab: PASS although prerequisite build.ggml is missing",
    ]


def test_receipt_row_must_match_its_stage_file(honest, tmp_path):
    d = clone(honest, tmp_path / "sf")

    def edit(r):
        for g in r["gates"]:
            if g["id"] == "build.ggml":
                g["reason"]["detail"] = "reworded"
    edit_json(d, "receipt.json", edit)
    assert _problems(d) == ["gate build.ggml: receipt row differs from gates/01_build.json"]


@pytest.mark.parametrize("text, expect", [
    (None, "receipt missing"),
    ("{", "not strict JSON"),
    ('{"schema": "other"}', "not a verifylib-receipt/2 receipt"),
])
def test_unusable_receipts(tmp_path, text, expect):
    (tmp_path / "run").mkdir()
    if text is not None:
        (tmp_path / "run" / "receipt.json").write_text(text)
    res = receipt.verify(tmp_path / "run")
    assert not res.ok and res.verdict is None
    (p,) = res.problems
    assert p.endswith(expect) or expect in p
