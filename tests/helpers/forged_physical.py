"""Forgeries of a run's *physical results* that plain ``verify`` accepts.

Each helper clones a published run, replaces a physical result with another one, then
refreshes every digest that names the replaced bytes (in the stage files, the evidence
and the ledger) and reseals the receipt (``tests.helpers.forge.reseal``), so that the
project's own rules judge the forged run exactly as they judged the honest one. What is
left to catch it is a replay.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from verifylib import canonical
from verifylib.numerics.scoring import count_words

from tests.helpers.forge import clone, edit_json, reseal

PACKAGE = "fp32/ggml-model-encoder.mlpackage"


def _rewrite(path: Path, data: bytes) -> None:
    # Clones share files by hard link: a forged file is a new file, never an edit in place.
    tmp = path.with_name(path.name + ".forging")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def swap_digest(run_dir: Path, old: str, new: str) -> int:
    """Replace a digest everywhere the run's JSON names it; return the files changed."""
    changed = 0
    files = [*run_dir.glob("gates/*.json"), *run_dir.glob("evidence/**/*.json"),
             run_dir / "ledger.jsonl", run_dir / "run.json"]
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text(encoding="utf-8")
        if old in text:
            _rewrite(f, text.replace(old, new).encode("utf-8"))
            changed += 1
    return changed


def broken_package(src: Path, dest: Path) -> Path:
    """The fp32 package's weights zeroed in one block, its parity evidence left as it was."""
    run = clone(src, dest)
    pkg = run / PACKAGE
    old = canonical.tree_digest(pkg)
    (weights,) = pkg.rglob("weight.bin")
    data = bytearray(weights.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = bytes(4096)
    _rewrite(weights, bytes(data))
    new = canonical.tree_digest(pkg)
    assert swap_digest(run, old, new) > 0
    reseal(run)
    return run


def forged_transcripts(src: Path, dest: Path) -> Path:
    """Every GGML transcript replaced by the clip's reference text, counts recomputed."""
    run = clone(src, dest)

    def forge(doc):
        for clip in doc["clips"]:
            if clip.get("reference") is None:
                continue
            clip["ggml_text"], clip["raw_ggml"] = clip["reference"], clip["raw_reference"]
            clip["ggml"] = count_words(clip["reference"], clip["reference"]).as_dict()
            clip["ggml_empty"] = clip["reference"].strip() == ""
            if clip.get("pairwise") is not None:
                clip["pairwise"] = count_words(clip["source_text"], clip["ggml_text"]).as_dict()
            if clip.get("implementation") is not None:  # wer-v2's HF-from-ggml leg
                clip["implementation"] = count_words(clip["from_ggml_text"],
                                                     clip["ggml_text"]).as_dict()
    edit_json(run, "evidence/05_wer/wer.json", forge)
    reseal(run)
    return run


def swapped_model(src: Path, dest: Path) -> Path:
    """``ggml-model.bin`` replaced by another model (one tensor's bytes changed)."""
    run = clone(src, dest)
    changed = []
    for model in sorted(run.glob("*/ggml-model.bin")):
        old = canonical.sha256_file(model)
        data = bytearray(model.read_bytes())
        at = len(data) - 8192
        data[at:at + 2048] = bytes(2048)
        _rewrite(model, bytes(data))
        changed.append((old, canonical.sha256_file(model)))
    assert changed
    for old, new in dict(changed).items():
        swap_digest(run, old, new)
    reseal(run)
    return run


def relabelled_crashes(src: Path, dest: Path, *, signal: str = "SIGABRT",
                       returncode: int = -6) -> Path:
    """The unpatched lifecycle crashes relabelled as another signal, ledger included."""
    run = clone(src, dest)
    seqs = set()

    def relabel(doc):
        side = doc["sides"]["unpatched"]
        for r in side["runs"]:
            if r.get("signal"):
                r["signal"], r["returncode"], r["outcome"] = signal, returncode, signal
                seqs.add(r["launch"]["seq"])
        side["counts"] = {signal: len(side["runs"])}
    edit_json(run, "evidence/03_canary/lifecycle.json", relabel)
    ledger = run / "ledger.jsonl"
    lines = []
    for line in ledger.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("seq") in seqs:
            rec["signal"], rec["returncode"] = signal, returncode
        lines.append(json.dumps(rec, sort_keys=True, separators=(",", ":")))
    _rewrite(ledger, ("\n".join(lines) + "\n").encode("utf-8"))
    reseal(run)
    return run
