"""Forged variants of the session's published run of the simulated Mac, for ``verifylib
compare`` (tests/simmac/test_compare.py and the comparison notebook's test): each is a clone
(:mod:`tests.helpers.forge`) edited and re-sealed the way the stage would have written it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.helpers.forge import clone, edit_json, relabel, reseal
from verifylib.evidence.parity.schema import AttributionEvidence
from verifylib.numerics.attribution import Attribution
from verifylib.numerics.drift import derive, module_summaries, rank

ATTRIBUTION = "evidence/04_parity/program-attribution.json"


DRIFT = "evidence/04_parity/program-drift.json"


def _edit_attribution(run_dir: Path, edit) -> None:
    """Apply ``edit(ops) -> ops`` to the fp32 attribution and recompute everything derived
    from the SNRs (ΔSNR, both rankings, the module summary), as the stage would."""
    def fn(doc):
        att = AttributionEvidence.from_json(doc)
        ops = tuple(edit(list(att.ops)))
        produced = {o.name for o in ops}
        inputs = {n for o in ops for n in o.inputs if n not in produced}
        ops = derive(ops, inputs, att.input_precision)
        snr = {o.name: o.snr_db for o in ops}
        points = tuple(dict(p, snr_db=snr[p["value"]]) for p in att.points if p["value"] in snr)
        return Attribution(
            ops=ops, top=rank(ops, "delta_snr_db"),
            precision_top=rank(ops, "precision_delta_snr_db"), modules=module_summaries(ops),
            points=points, compute=att.compute, variant=att.variant, fixture=att.fixture,
            unmapped=sum(o.module is None for o in ops), seconds=att.seconds,
            ceiling_db=att.ceiling_db, input_precision=att.input_precision).as_dict()
    edit_json(run_dir, ATTRIBUTION, fn)


def checkpoint2(src: Path, dest: Path, *, layer: int = 2, snr: float = 61.0) -> Path:
    """A clone whose program loses ``snr`` dB at ``layers.<layer>.fc1`` (and keeps that
    loss downstream), recorded with coremltools 9.1; re-sealed, so it verifies."""
    run = clone(src, dest)

    def lose(ops):
        start = next(o.index for o in ops if o.module == f"layers.{layer}.fc1")
        return [dataclasses.replace(o, snr_db=min(o.snr_db, snr), cosine=0.9999)
                if o.module is not None and o.index >= start and o.snr_db is not None else o
                for o in ops]
    _edit_attribution(run, lose)

    def curve(doc):
        for row in doc["layers"]["float32"]:
            label = row["label"]
            if label == "output" or (label.startswith("block ") and int(label[6:]) >= layer):
                row["snr_db"] = snr
    edit_json(run, DRIFT, curve)

    def upgrade(rec):
        rec["packages"]["coremltools"] = "9.1"
        rec["run_id"] = "checkpoint-2"
    edit_json(run, "run.json", upgrade)
    reseal(run)
    return run


def three_blocks(src: Path, dest: Path) -> Path:
    """A clone whose program and curve lack block 3 (another model's shape)."""
    run = clone(src, dest)
    _edit_attribution(run, lambda ops: [o for o in ops if not (o.module or o.scope)
                                        .startswith("layers.3")])
    edit_json(run, DRIFT, lambda doc: doc["layers"].update(
        {m: [r for r in rows if r["label"] != "block 3"] for m, rows in doc["layers"].items()}))
    reseal(run)
    return run


def parity_not_run(src: Path, dest: Path) -> Path:
    """A clone with ``parity.program`` relabelled NOT_RUN (it does not verify)."""
    run = clone(src, dest)
    relabel(run, "parity.program", "NOT_RUN", "prerequisite", "forged: said not to have run")
    reseal(run)
    return run
