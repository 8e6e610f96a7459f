"""The identity keys of a run: one named constant per key of the receipt's identity table.

A gate records the identities its evidence binds (``ctx.identity`` or the identities of
``GateRun.judge``); the receipt merges them into one table, and a judge, the attestation
and ``verifylib compare`` read them back. Every such key is spelt here once, so a writer
and a reader cannot drift apart. The values are part of the receipt format
(``verifylib-receipt/1``): renaming one is a format change.
"""

from __future__ import annotations

BINARY_GGML = "binary.ggml.sha256"
"""SHA-256 of the patched GGML ``whisper-cli``."""

BINARY_GGML_UNPATCHED = "binary.ggml_unpatched.sha256"
"""SHA-256 of the unpatched GGML ``whisper-cli`` (the A side of the lifecycle A/B)."""

BINARY_GGML_ASAN = "binary.ggml_asan.sha256"
"""SHA-256 of the patched AddressSanitizer ``whisper-cli``."""

BINARY_GGML_UNPATCHED_ASAN = "binary.ggml_unpatched_asan.sha256"
"""SHA-256 of the unpatched AddressSanitizer ``whisper-cli``."""

BINARY_COREML = "binary.coreml.sha256"
"""SHA-256 of the Core ML ``whisper-cli``."""

BINARY_SEAM = "binary.seam.sha256"
"""SHA-256 of the patched seam ``whisper-cli`` (whisper.cpp's Core ML path against
verifylib's seam, docs/runtime-contract.md §11): never a Core ML binary."""

BINARY_SEAM_UNPATCHED = "binary.seam_unpatched.sha256"
"""SHA-256 of the unpatched seam ``whisper-cli``."""

BINARY_SEAM_UNPATCHED_ASAN = "binary.seam_unpatched_asan.sha256"
"""SHA-256 of the unpatched seam ``whisper-cli`` built with AddressSanitizer."""

SEAM_BINARIES = (BINARY_SEAM, BINARY_SEAM_UNPATCHED, BINARY_SEAM_UNPATCHED_ASAN)
"""The identities of every seam binary a run may hold."""

BINARY_GGML_BACKEND = "binary.ggml.backend"
"""The ggml backend (``cpu``, ``metal``) the GGML ``whisper-cli`` is pinned to and its
``build.ggml`` probe launch logged choosing: the backend of every launch of that binary
(the lifecycle A/B's, the GGML transcripts'). Absent from runs made before backends were
pinned."""

BINARY_COREML_BACKEND = "binary.coreml.backend"
"""The ggml backend of the Core ML ``whisper-cli``, the hybrid runs' decoder: pinned like
the GGML build's, and logged by the ``whisper-bench`` built alike. Absent from runs made
before backends were pinned."""

RUNTIME_MANIFEST = "runtime.manifest.sha256"
"""SHA-256 of the pin manifest a parameter file brings of its own (``runtime.manifest``),
bound when the run's pin is one of its pins, a user-declared pin: the run carries a copy of
that manifest and its patches, and ``verify`` judges the pin against the copy. Absent from
runs on a packaged pin."""

MODEL_GGML = "model.ggml.sha256"
"""SHA-256 of the published ``ggml-model.bin``."""

MODEL_GGML_FTYPE = "model.ggml.ftype"
"""Tensor type of the published model file (``f16``, ``q5_0`` ...), from its header."""

ENCODER_PRECISION = "encoder.precision"
"""The audited encoder's declared compute precision (``fp32``, ``fp16``, ``mixed``)."""

ENCODER_ARCHIVE_SHA256 = "encoder.archive.sha256"
"""SHA-256 of the ``….mlmodelc.zip`` the audited encoder was unpacked from (parameter
``encoder.path`` naming a zip); absent for a folder."""

ENCODER_PARITY_POLICY = "encoder.parity_policy"
"""The policy ``parity.program`` is judged under, chosen before measuring."""

POLICY_PAIR_SHA256 = "policy.pair.sha256"
"""SHA-256 of the packaged ``pair-v1`` policy."""

MODEL_SOURCE_DIGEST = "model.source_digest"
"""Content digest of the source model the run audited."""

POLICY_WER_ID = "policy.wer.id"
"""Id of the WER policy (``wer-v1``)."""

POLICY_WER_SHA256 = "policy.wer.sha256"
"""SHA-256 of the packaged WER policy."""


def policy_id(policy: str) -> str:
    """Return the identity key of a parity policy's id.

    Parameters
    ----------
    policy : str
        The policy's short name as the parity stage records it (``fp32``, ``fp16``).

    Returns
    -------
    str
        ``policy.<policy>.id``.
    """
    return f"policy.{policy}.id"


def policy_sha256(policy: str) -> str:
    """Return the identity key of a parity policy's digest.

    Parameters
    ----------
    policy : str
        The policy's short name as the parity stage records it (``fp32``, ``fp16``).

    Returns
    -------
    str
        ``policy.<policy>.sha256``.
    """
    return f"policy.{policy}.sha256"


def artifact_tree_digest(variant: str, fmt: str) -> str:
    """Return the identity key of a published encoder's tree digest.

    Parameters
    ----------
    variant : str
        Its variant folder (``fp32``, ``fp16``).
    fmt : str
        ``mlpackage`` or ``mlmodelc``.

    Returns
    -------
    str
        ``artifact.<variant>.<fmt>.tree_digest``.
    """
    return f"artifact.{variant}.{fmt}.tree_digest"
