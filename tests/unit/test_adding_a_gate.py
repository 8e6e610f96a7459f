"""Adding a gate, as docs/architecture.md#adding-a-gate lists it, proved on a throwaway one.

An informational gate of stage 06 is added the documented way, here by patching what the
listed files hold (its row of the gate table with the sentence its PASS proves, its rule in
the rules registry, and the stage writing its evidence and judging it), with nothing else
touched: the run records it, the receipt binds it, ``verify`` re-judges it with the same
rule, the verdict counts it as informational, and the report's first screen lists it under
the informational gates with what its PASS proves.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import synthetic
from verifylib import canonical
from verifylib.evidence import gates, receipt, registry
from verifylib.evidence.gates import Capability, Judgement, Status
from verifylib.views.gates import receipt_summary

pytestmark = pytest.mark.unit

NEW = "placement.throwaway"


def _rule(ev) -> Judgement:
    """PASS iff the gate's document says the throwaway check held."""
    return Judgement.of(ev.json("doc").get("ok") is True, "the throwaway check held")


@pytest.fixture
def with_new_gate(monkeypatch):
    row = dataclasses.replace(
        gates.BY_ID["placement.plan"], id=NEW, required=False, capability=Capability.ANY,
        prerequisites=(), pass_rule="the throwaway document says ok",
        proves="A throwaway check held (a test's gate: it proves the way a gate is added).")
    monkeypatch.setattr(gates, "GATES", gates.GATES + (row,))
    monkeypatch.setitem(gates.BY_ID, NEW, row)
    synthetic.install_rules(monkeypatch)
    monkeypatch.setitem(registry.RULES, NEW, _rule)
    return row


def test_a_gate_added_the_documented_way_is_recorded_bound_verified_and_shown(
        tmp_path, with_new_gate):
    run_dir = synthetic.make_run(tmp_path)
    rec = canonical.read_json(run_dir / "receipt.json")
    row = next(g for g in rec["gates"] if g["id"] == NEW)
    assert (row["status"], row["required"], row["stage"]) == ("PASS", False, "06_placement")
    assert [e["path"] for e in row["evidence"]] == [f"evidence/06_placement/{NEW}.json"]
    res = receipt.verify(run_dir)
    assert res.ok, res.problems
    page = receipt_summary(rec, "0" * 64, run_dir=run_dir)
    informational = page.split('id="informational"', 1)[1]
    assert "placement.<wbr>throwaway" in informational
    assert "A throwaway check held" in informational
    # Its FAIL is judged and verified like any other, and, informational, moves no verdict.
    failed = synthetic.make_run(tmp_path / "failed", fail={NEW})
    rec = canonical.read_json(failed / "receipt.json")
    assert next(g for g in rec["gates"] if g["id"] == NEW)["status"] == Status.FAIL.value
    assert rec["verdict"] == canonical.read_json(run_dir / "receipt.json")["verdict"]
    assert receipt.verify(failed).ok


def test_a_gate_added_is_in_the_replay_catalogue_without_a_line_of_replay(with_new_gate):
    from verifylib.replay import claims
    derived = claims.derive_claims(gates.GATES)
    (spec,) = [c for c in derived if c.gate == NEW]
    # Its own id, titled from its pass rule; any host can run it, so it is listed with the
    # claims this host re-derives, before the macOS-only ones.
    assert (spec.id, spec.title, spec.macos_only) == (NEW, "the throwaway document says ok",
                                                      False)
    assert derived.index(spec) < min(i for i, c in enumerate(derived) if c.macos_only)
    # The catalogue without the new gate is the published one, and an override replaces a
    # gate's default claim.
    assert claims.derive_claims(gates.GATES[:-1]) == claims.CLAIMS
    named = claims.ClaimSpec("placement.throwaway.doc", NEW, "the document, named")
    assert [c for c in claims.derive_claims(gates.GATES, {NEW: (named,)})
            if c.gate == NEW] == [named]
