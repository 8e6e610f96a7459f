"""Gate ``export.contract`` of stage 02 for an encoder audited as given (``encoder.path``).

Most users never export an encoder: they download ``ggml-*-encoder.mlmodelc.zip`` or run
upstream's converter. Such an encoder is read before anything is measured
(:func:`verifylib.models.encoder_reader.describe_encoder`: converter, declared compute
precision, weight compression, layout, IO contract), checked against the contract derived
from the model, and copied unchanged into the gated slot
(``fp32/ggml-model-encoder.mlpackage`` or ``….mlmodelc``: the slot is named after the gated
variant, the declared precision is recorded). The parity policy is chosen here, from the
declaration and the model file's ftype, and recorded; ``verify`` chooses it again.

A ``….mlmodelc.zip`` (as downloaded) is checked again and unpacked into a staging folder
inside the run (:func:`verifylib.models.encoder_zip.unpack`: regular files only, each member
held to its declared size), never beside the archive; the unpacked folder is then audited
exactly as a given folder, and renamed into the slot instead of copied. The zip's SHA-256
and the files its central directory listed are recorded beside the unpacked tree's digest.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from verifylib.canonical import publish_dir, tree_digest
from verifylib.evidence import identities
from verifylib.evidence.export.schema import ContractEvidence
from verifylib.evidence.fields import Schema
from verifylib.evidence.gates import EXPORT_CONTRACT
from verifylib.params import EncoderSection
from verifylib.stages.artifacts import (
    ENCODER_COMPILED,
    ENCODER_PACKAGE,
    model_source,
    source_ftype,
)
from verifylib.stages.context import StageContext

SLOT = "fp32"
"""The gated variant's folder, which the audited encoder occupies."""


@dataclass(frozen=True)
class _Given:
    """The folder to audit: the one the parameters name, or the one unpacked from their zip."""

    folder: Path
    staged: bool  # unpacked inside the run: placed by renaming it
    archive: dict[str, Any] | None  # the ``prebuilt.archive`` record


@contextmanager
def _given(ctx: StageContext, section: EncoderSection) -> Iterator[_Given]:
    """Yield the folder to audit; a zip is unpacked into the run and removed afterwards."""
    if not section.archive:
        yield _Given(Path(section.path), False, None)
        return
    from verifylib.models.encoder_zip import unpack

    # Beside the slot, on the run's file system, so the unpacked folder is renamed into it.
    slot = ctx.artifact_path(SLOT, ENCODER_COMPILED).parent
    staging = Path(tempfile.mkdtemp(prefix=".unzip-", dir=slot))
    try:
        got = unpack(section.path, staging / "unpacked")
        record = {"sha256": got.sha256, "bytes": got.size, "top": got.listing.top,
                  "files": [{"path": m.path, "bytes": m.size, "crc32": f"{m.crc32:08x}"}
                            for m in got.listing.files],
                  "skipped": got.listing.skipped}
        yield _Given(got.folder, True, record)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _place(ctx: StageContext, given: _Given, name: str, source_digest: str,
           problems: list[str]) -> str | None:
    """Put the audited folder into the slot; return its tree digest (None if it changed)."""
    final = ctx.artifact_path(SLOT, name)
    if given.staged:
        publish_dir(given.folder, final)
        return source_digest
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.staging-", dir=final.parent))
    try:
        shutil.copytree(given.folder, staging / name, symlinks=False)
        placed_digest = tree_digest(staging / name)
        if placed_digest != source_digest:
            problems.append(f"the copy of {given.folder} differs from it (changed while it "
                            "was copied?)")
            return None
        publish_dir(staging / name, final)
        return placed_digest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def run_prebuilt_contract(
        ctx: StageContext, section: EncoderSection,
        through_schema: Callable[[type[Schema], dict[str, Any]], dict[str, Any]]) -> None:
    """Judge ``export.contract`` for the encoder the parameters name.

    Parameters
    ----------
    ctx : StageContext
        Stage 02's context.
    section : EncoderSection
        The parameters' ``encoder`` section, naming the encoder audited as given.
    through_schema : callable
        ``(schema, doc) -> doc`` as the export stage writes its documents.
    """
    from verifylib.evidence.export.rules import prebuilt_contract_problems
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.coreml_export import build_facts
    from verifylib.models.encoder_reader import describe_encoder
    from verifylib.models.hf import load_hf_encoder
    from verifylib.numerics.parity import choose_parity_policy

    g = ctx.begin(EXPORT_CONTRACT)
    if not g:
        return
    with g:
        src = model_source(ctx)
        encoder, _ = load_hf_encoder(src["hf_dir"])
        contract = contract_of(encoder)
        del encoder
        for stale in (ENCODER_PACKAGE, ENCODER_COMPILED):
            shutil.rmtree(ctx.run_dir / SLOT / stale, ignore_errors=True)
        with _given(ctx, section) as given:
            # What the user gave, digested before anything reads it.
            source_digest = tree_digest(given.folder)
            card = describe_encoder(given.folder)
            description = card.description()
            problems = prebuilt_contract_problems(description, contract, card.precision,
                                                  card.precision_reason)
            # The choice is made from the declaration, before anything is measured.
            policy_id = (choose_parity_policy(card.precision, source_ftype(ctx)).policy_id
                         if card.precision != "unknown" else "undetermined")
            name = ENCODER_COMPILED if card.format == "mlmodelc" else ENCODER_PACKAGE
            # The card is recorded as the placed folder reads (``verify`` describes that
            # copy again and compares whole cards): its name is the slot's, the given one
            # is ``prebuilt.given``. Nothing else in a card depends on the folder's name.
            card = dataclasses.replace(card, name=name)
            placed_digest = (None if problems
                             else _place(ctx, given, name, source_digest, problems))
        placed = not problems
        prebuilt = {"given": section.path, "format": card.format,
                    "source_tree_digest": source_digest, "card": card.to_json(),
                    "precision": card.precision, "parity_policy": policy_id}
        if given.archive is not None:
            prebuilt["archive"] = given.archive
        doc = {
            "model": src, "config": contract.values(), "contract": contract.as_dict(),
            "variants": [{"precision": SLOT, "path": f"{SLOT}/{name}",
                          "description": description, "problems": problems,
                          "placed": placed, "tree_digest": placed_digest if placed else None}],
            "build": {**build_facts(), "trace_seconds": 0.0}, "model_copies": {},
            "prebuilt": prebuilt,
        }
        ref = ctx.write_json("contract", through_schema(ContractEvidence, doc))
        ids = {identities.MODEL_SOURCE_DIGEST: src["source_digest"],
               identities.ENCODER_PRECISION: card.precision,
               identities.ENCODER_PARITY_POLICY: policy_id}
        if given.archive is not None:
            ids[identities.ENCODER_ARCHIVE_SHA256] = given.archive["sha256"]
        if placed:
            ids[f"artifact.{SLOT}.{card.format}.tree_digest"] = placed_digest
        g.judge([ref], ids)
