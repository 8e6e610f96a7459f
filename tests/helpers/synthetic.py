"""Synthetic run directories for validator tests: every gate judged by a stand-in rule.

The stand-in rule (installed with :func:`install_rules`) passes a gate iff its evidence
document says ``{"ok": true}``, so a test can build a complete run in milliseconds,
without whisper.cpp, and then forge it. Gates the host cannot run, and their dependants,
end NOT_RUN exactly as in a real run, because :meth:`StageContext.begin` decides.
"""

from __future__ import annotations

from pathlib import Path

from verifylib.evidence import gates, receipt
from verifylib import params
from verifylib.evidence import registry as rules
from verifylib.errors import PrerequisiteBroken
from verifylib.evidence.gates import Judgement, Status
from verifylib.stages.context import StageContext

from tests.helpers import ROOT  # tests/unit/test_forgeries.py reads it from here


def standin_rule(ev) -> Judgement:
    """PASS iff the gate's ``doc`` evidence holds ``ok: true``."""
    d = ev.json("doc")
    return Judgement(Status.PASS if d.get("ok") is True else Status.FAIL,
                     "stand-in rule: ok" if d.get("ok") is True else "stand-in rule: not ok")


def install_rules(monkeypatch) -> None:
    """Replace every implemented gate's rule by :func:`standin_rule` for one test."""
    for g in gates.GATES:
        if g.implemented:
            monkeypatch.setitem(rules.RULES, g.id, standin_rule)


def params_with(tmp_path: Path, **sections) -> Path:
    """The default parameter file with some keys changed, written to ``tmp_path``.

    ``sections`` maps a section to the keys to set in it, e.g. ``canary={"enabled": False}``.
    Relative fixture paths are made absolute so the copy validates where it lies.
    """
    import yaml
    src = ROOT / "parameters" / "tiny-en.yaml"
    data = yaml.safe_load(src.read_text())
    for fx in data["fixtures"]:
        for key in ("path", "text_file"):
            if key in fx:
                fx[key] = str((src.parent / fx[key]).resolve())
    for section, values in sections.items():
        data[section].update(values)
    out = Path(tmp_path) / "params.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def make_run(tmp_path: Path, *, fail: set[str] = frozenset(), error: set[str] = frozenset(),
             broken: set[str] = frozenset(), identities: dict | None = None, param_file: str = "tiny-en.yaml",
             receipt_too: bool = True) -> Path:
    """Build a run directory in which every runnable gate is judged by the stand-in rule.

    Parameters
    ----------
    fail : set of str
        Gates whose evidence says ``ok: false``.
    error : set of str
        Gates whose evaluation raises (an honest ERROR with a stored traceback).
    broken : set of str
        Gates whose evaluation raises :class:`verifylib.errors.PrerequisiteBroken` (ERROR
        with reason kind ``prerequisite-broken``).
    identities : dict, optional
        Gate id to identities it binds (default: ``build.source_identity`` binds
        ``runtime.tree``).
    """
    p = params.load(ROOT / "parameters" / param_file)  # an absolute path stays as it is
    run_dir = Path(tmp_path) / "run"
    identities = identities if identities is not None else {
        "build.source_identity": {"runtime.tree": "a" * 40}}
    for stage in gates.STAGES:
        ctx = StageContext(stage, p, run_dir)
        for g in gates.stage_gates(stage):
            if not g.implemented:
                continue
            run = ctx.begin(g.id, gates.disabling_key(g, p.data))
            if run is None:
                continue
            with run:
                if g.id in error:
                    raise RuntimeError(f"synthetic harness failure in {g.id}")
                if g.id in broken:
                    raise PrerequisiteBroken(f"synthetic: what {g.id} stood on changed")
                ref = ctx.write_json("doc", {"ok": g.id not in fail}, f"{g.id}.json")
                run.judge([ref], identities.get(g.id, {}))
        ctx.finish()
    if receipt_too:
        receipt.build_receipt(run_dir)
    return run_dir
