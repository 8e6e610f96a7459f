"""Stages 03 and 05: the seam's launches (docs/runtime-contract.md §11).

What the seam gates share: the seam builds stage 01 left (:func:`seam_build`), the encoder
folder a seam launch loads for a variant (:func:`seam_encoder`: the run's compiled model
where one is placed, else a stand-in for the exported package in a scratch folder outside
the run), and one launch with its executor record (:func:`seam_launch`). The executor is
served from the stage's own process (:class:`verifylib.numerics.seam_executor.SeamExecutor`),
so a launch imports nothing.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from verifylib.errors import PrerequisiteBroken
from verifylib.evidence.layout import SEAM_SIDECAR
from verifylib.runtime import contracts
from verifylib.runtime.contracts.seam import SEAM_OUTPUT_FLOATS_ENV, SEAM_SIDES
from verifylib.runtime.runner import RunResult, run_whisper_cli
from verifylib.stages.artifacts import (
    audited_encoder,
    exported_variant,
    published_mlmodelc,
    published_model,
    sidecar_build,
)
from verifylib.stages.context import StageContext

if TYPE_CHECKING:
    from verifylib.numerics.seam_executor import SeamExecutor, SeamLaunch

__all__ = ["SeamEncoder", "executor_record", "seam_build", "seam_encoder", "seam_launch",
           "seam_variants"]


def seam_build(ctx: StageContext, side: str) -> dict[str, Any]:
    """Return the seam build stage 01 recorded for one side, re-hashed before use.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    side : str
        ``patched``, ``unpatched`` or ``unpatched_asan``
        (:data:`verifylib.runtime.contracts.seam.SEAM_SIDES`).

    Returns
    -------
    dict
        The side's record from ``seam_builds.json`` (``binary``, ``sha256``, ``variant``,
        ``options``, ``key``, ``static`` …).

    Raises
    ------
    PrerequisiteBroken
        If stage 01 recorded no such build, it failed, or its bytes or identity differ.
    """
    variant, identity = SEAM_SIDES[side]
    return sidecar_build(ctx, SEAM_SIDECAR, side, variant, identity, "seam",
                         " (parameter seam.enabled)")


def seam_variants(ctx: StageContext) -> list[str]:
    """Return the encoder variants a seam gate runs: ``fp32``, and ``fp16`` when exported.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.

    Returns
    -------
    list of str
    """
    out = ["fp32"]
    try:
        exported_variant(ctx, "fp16")
    except PrerequisiteBroken:
        return out
    return out + ["fp16"]


@dataclass(frozen=True)
class SeamEncoder:
    """The encoder folder a seam launch loads for one variant, and the ``-m`` that derives it.

    Attributes
    ----------
    variant : str
        ``fp32`` or ``fp16``.
    model_arg : str
        The ``-m`` string of the seam launches.
    folder : str
        ``coreml_encoder_path(model_arg)``: what the seam's ``init`` receives.
    kind : str
        ``mlmodelc`` (a compiled model placed in the run) or ``standin`` (the exported
        package, named by a stand-in in a scratch folder).
    artifact : str
        The run-relative path of the audited artifact the program comes from.
    tree_digest : str
        That artifact's tree digest as ``export.contract`` (or ``export.compile``) bound it.
    identity_key : str
        The identity its digest is bound to.
    output_floats : int
        ``n_audio_ctx * n_audio_state`` of the model file: whisper.cpp's encoder output
        buffer, which the seam refuses to overrun (not part of the evidence record).
    """

    variant: str
    model_arg: str
    folder: str
    kind: str
    artifact: str
    tree_digest: str
    identity_key: str
    output_floats: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the evidence record of the encoder.

        Returns
        -------
        dict
        """
        return {"variant": self.variant, "model_arg": self.model_arg, "folder": self.folder,
                "kind": self.kind, "artifact": self.artifact, "tree_digest": self.tree_digest,
                "identity_key": self.identity_key}


def seam_encoder(ctx: StageContext, variant: str, scratch: Path) -> SeamEncoder:
    """Lay out what a seam launch of ``variant`` reads, in ``scratch`` unless the run has it.

    A compiled model placed in the run (a given ``.mlmodelc``, or one ``coremlc`` compiled)
    is loaded where it sits, beside the published model file: the seam reads its
    ``model.mil``. Otherwise the model file is linked into ``scratch/<variant>/`` and a
    stand-in for the exported package is written at the derived path
    (:func:`verifylib.models.seam_encoder.write_standin`): the run itself is never written.

    Parameters
    ----------
    ctx : StageContext
        The asking stage.
    variant : str
        ``fp32`` or ``fp16``.
    scratch : Path
        A folder of the stage's, outside the run.

    Returns
    -------
    SeamEncoder

    Raises
    ------
    PrerequisiteBroken
        If the variant was not exported, or its artifact's bytes changed since.
    """
    from dataclasses import replace

    from verifylib.models.ggml_file import open_ggml

    model, model_arg = published_model(ctx)
    hp = open_ggml(model).hparams
    enc = _seam_encoder(ctx, variant, scratch, model, model_arg)
    return replace(enc, output_floats=int(hp["n_audio_ctx"]) * int(hp["n_audio_state"]))


def _seam_encoder(ctx: StageContext, variant: str, scratch: Path, model: Path,
                  model_arg: str) -> SeamEncoder:
    from verifylib.canonical import tree_digest
    from verifylib.models.seam_encoder import write_standin

    exported = exported_variant(ctx, variant)
    compiled = published_mlmodelc(ctx, variant)
    if variant == "fp32":
        placed = audited_encoder(ctx)  # its digest checked again
        if placed.format == "mlmodelc":
            compiled = placed.path
    if compiled is not None:
        # A compiled model (given, or compiled by coremlc on a Mac): the seam reads its
        # model.mil, where it sits beside the model, else through a link in the scratch.
        rel, digest = str(compiled.relative_to(ctx.run_dir)), tree_digest(compiled)
        key = f"artifact.{variant}.mlmodelc.tree_digest"
        if Path(contracts.coreml_encoder_path(model_arg)) == compiled:
            return SeamEncoder(variant, model_arg, str(compiled), "mlmodelc", rel, digest, key)
        source, kind = compiled, "mlmodelc"
    else:
        source, kind = ctx.run_dir / exported["path"], "standin"
        rel, digest = exported["path"], exported["tree_digest"]
        key = f"artifact.{variant}.mlpackage.tree_digest"
        if not source.is_dir() or tree_digest(source) != digest:
            raise PrerequisiteBroken(f"{source} is not the {variant} encoder export.contract "
                                     "placed")
    folder = scratch / variant
    folder.mkdir(parents=True, exist_ok=True)
    arg = folder / model.name
    try:
        os.link(model, arg)
    except OSError:
        shutil.copyfile(model, arg)
    derived = contracts.coreml_encoder_path(str(arg))
    if kind == "mlmodelc":
        os.symlink(source, derived)
    else:
        write_standin(source, derived)
    return SeamEncoder(variant, str(arg), derived, kind, rel, digest, key)


def seam_launch(executor: SeamExecutor, argv: Sequence[str], *, timeout: float,
                output_floats: int = 0) -> tuple[RunResult, SeamLaunch | None]:
    """Launch a seam whisper-cli once under the runtime contract, with its executor.

    Parameters
    ----------
    executor : SeamExecutor
        The running executor (its socket and a fresh launch token go into the child's
        environment).
    argv : sequence of str
        The whisper-cli command line (checked by :func:`run_whisper_cli`).
    timeout : float
        Seconds before the launch is killed.
    output_floats : int
        whisper.cpp's encoder output size for the launch's model (0: not told).

    Returns
    -------
    (RunResult, SeamLaunch or None)
        The launch, and what the executor recorded for it (None: the launch never reached
        the executor, e.g. its ``init`` found no folder).
    """
    token, env = executor.launch_env()
    if output_floats:
        env[SEAM_OUTPUT_FLOATS_ENV] = str(output_floats)
    res = run_whisper_cli(list(argv), timeout=timeout, env_extra=env)
    return res, executor.launch(token)


def executor_record(launch: SeamLaunch | None) -> Mapping[str, Any] | None:
    """Return the evidence record of an executor launch (None when there was none).

    Parameters
    ----------
    launch : SeamLaunch or None
        What the executor recorded for one launch.

    Returns
    -------
    dict or None
    """
    return None if launch is None else launch.to_json()

