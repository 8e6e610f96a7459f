"""What an audit's Core ML seam gates must show for the encoder it audited
(docs/runtime-contract.md §11), read from the published run's own files.

``canary.seam_positive`` and ``wer.seam`` run whisper.cpp's Core ML path with verifylib's
``whisper_coreml_*`` and the encoder's program executed by verifylib. For a third-party
encoder that means *its* program: a given ``.mlmodelc`` (or its zip, unpacked) is read from
its ``model.mil`` where the run placed it (kind ``mlmodelc``); a given ``.mlpackage`` on
Linux, where no ``coremlc`` runs, through a stand-in naming the published package (kind
``standin``). Either way the program the executor loaded carries the tree digest the audit
bound, and the launches' encode calls were served by it.

The functions assert and return the document they read, so a test can assert more.
"""

from __future__ import annotations

from pathlib import Path

from verifylib import canonical
from verifylib.canonical import sha256_file

SEAM_POSITIVE = "evidence/03_canary/seam_positive.json"
SEAM_WER = "evidence/05_wer/seam_wer.json"
PACKAGE_SLOT = "fp32/ggml-model-encoder.mlpackage"
MLMODELC_SLOT = "fp32/ggml-model-encoder.mlmodelc"
KINDS = {"mlmodelc": (MLMODELC_SLOT, "artifact.fp32.mlmodelc.tree_digest"),
         "standin": (PACKAGE_SLOT, "artifact.fp32.mlpackage.tree_digest")}
"""Encoder kind -> the run-relative artifact the program comes from, and its identity."""


def _records(run_dir: Path) -> dict:
    out = {}
    for path in sorted((run_dir / "gates").glob("*.json")):
        for rec in canonical.read_json(path)["gates"]:
            out[rec["id"]] = rec
    return out


def _cites(rec: dict, relpath: str) -> bool:
    return any(e["path"] == relpath for e in rec["evidence"])


def _in_run(path: str, run_dir: Path, artifact: str) -> bool:
    """``path`` is the run's ``artifact`` where the stage wrote it: in the run, or in the
    folder ``verifylib run`` stages a run in before renaming it into place."""
    return Path(path) in (run_dir / artifact,
                          run_dir.parent / ".staging" / run_dir.name / artifact)


def _served_by_program(ex: dict | None, run_dir: Path, kind: str, digest: str,
                       where: str) -> list[dict]:
    """The executor record loaded the encoder's own program and served every encode call."""
    assert ex is not None, f"{where}: the launch never reached the executor"
    assert ex["loaded"] and ex["refusal"] is None, (where, ex["refusal"])
    # The launch told the executor whisper.cpp's encoder buffer: n_audio_ctx * n_audio_state.
    assert ex["output_floats"] == 1500 * 384, (where, ex["output_floats"])
    prog = ex["program"]
    assert prog["kind"] == kind, (where, prog)
    assert prog["digest"] == digest, (where, prog["digest"], digest)
    artifact = KINDS[kind][0]
    slot = run_dir / artifact
    if kind == "mlmodelc":
        # The seam read the compiled model's text where the run placed it.
        assert prog["source"] == {
            "model_mil_sha256": sha256_file(slot / "model.mil"),
            "weight_bin_sha256": sha256_file(slot / "weights" / "weight.bin")}, (where, prog)
    else:
        # The stand-in named the run's published package.
        assert set(prog["source"]) == {"package"}, (where, prog)
        assert _in_run(prog["source"]["package"], run_dir.resolve(), artifact), (where, prog)
    calls = ex["calls"]
    assert len(calls) >= 1, f"{where}: no encode call was served"
    assert [c["index"] for c in calls] == list(range(1, len(calls) + 1)), where
    for c in calls:
        assert c["refused"] is None and c["output_sha256"], (where, c)
        assert (c["n_mel"], c["n_ctx"]) == (80, 3000), (where, c)
        assert c["output_shape"] == [1, 1500, 384], (where, c)
    assert ex["freed"], where
    return calls


def assert_seam_positive(run_dir: Path, *, kind: str, digest: str) -> dict:
    """``canary.seam_positive`` PASSed on the audited encoder's own program.

    Parameters
    ----------
    run_dir : Path
        The published run.
    kind : str
        ``mlmodelc`` (a given compiled model or its zip) or ``standin`` (a given package).
    digest : str
        The encoder's tree digest, computed by the test from what was given.

    Returns
    -------
    dict
        The ``seam_positive`` document.
    """
    run_dir = Path(run_dir)
    rec = _records(run_dir)["canary.seam_positive"]
    assert rec["status"] == "PASS", rec["reason"]
    assert _cites(rec, SEAM_POSITIVE), rec["evidence"]
    artifact, identity = KINDS[kind]
    doc = canonical.read_json(run_dir / SEAM_POSITIVE)
    enc = doc["encoder"]
    assert (enc["variant"], enc["kind"], enc["artifact"], enc["identity_key"]) == \
        ("fp32", kind, artifact, identity), enc
    assert enc["tree_digest"] == digest, (enc["tree_digest"], digest)
    assert rec["identities"][identity] == digest
    receipt = canonical.read_json(run_dir / "receipt.json")
    assert receipt["identities"][identity] == digest
    if kind == "mlmodelc":
        # Loaded where it sits in the run, at the path whisper.cpp derives from -m.
        assert _in_run(enc["folder"], run_dir, artifact), enc
    else:
        # A stand-in lives in a scratch folder, never in the run.
        assert not Path(enc["folder"]).is_relative_to(run_dir), enc
        assert enc["folder"].endswith("-encoder.mlmodelc"), enc
    ex = doc["executor"]
    assert ex["folder"] == enc["folder"], (ex["folder"], enc["folder"])
    calls = _served_by_program(ex, run_dir, kind, digest, "canary.seam_positive")
    run = doc["run"]
    assert (run["returncode"], run["signal"], run["timed_out"]) == (0, None, False), run
    assert run["encode_runs"] == len(calls), (run["encode_runs"], len(calls))
    assert doc["transcript_chars"] > 0
    assert f"on the fp32 {kind} {digest[:12]}" in rec["reason"]["detail"], rec["reason"]
    return doc


def assert_seam_wer(run_dir: Path, *, kind: str, digest: str, fixtures: list[str]) -> dict:
    """``wer.seam`` PASSed with one variant, the fp32 slot holding the audited encoder, each
    fixture's launch served by that encoder's program.

    Parameters
    ----------
    run_dir : Path
        The published run.
    kind, digest : str
        As for :func:`assert_seam_positive`.
    fixtures : list of str
        The audit's fixture ids, in parameter order.

    Returns
    -------
    dict
        The ``seam_wer`` document.
    """
    run_dir = Path(run_dir)
    rec = _records(run_dir)["wer.seam"]
    assert rec["status"] == "PASS", rec["reason"]
    assert _cites(rec, SEAM_WER), rec["evidence"]
    artifact, identity = KINDS[kind]
    doc = canonical.read_json(run_dir / SEAM_WER)
    assert doc["fixtures"] == fixtures
    (variant,) = doc["variants"]  # a given encoder has no fp16 variant of its own
    enc = variant["encoder"]
    assert (enc["variant"], enc["kind"], enc["artifact"], enc["identity_key"],
            enc["tree_digest"]) == ("fp32", kind, artifact, identity, digest), enc
    assert rec["identities"][identity] == digest
    assert [c["id"] for c in variant["clips"]] == fixtures
    for c in variant["clips"]:
        where = f"wer.seam {c['id']}"
        assert c["cause"] in ("same", "encoder"), (where, c["cause"])
        assert c["run"]["returncode"] == 0 and c["run"]["signal"] is None, (where, c["run"])
        assert not c["seam_empty"], where
        assert c["executor"]["folder"] == enc["folder"], where
        _served_by_program(c["executor"], run_dir, kind, digest, where)
    assert "fp32: " in rec["reason"]["detail"], rec["reason"]
    return doc


__all__ = ["assert_seam_positive", "assert_seam_wer", "KINDS", "SEAM_POSITIVE", "SEAM_WER"]
