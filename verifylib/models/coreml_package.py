"""A converted Core ML encoder's package: staged, checked, published, compiled and run.

coremltools saves the ``.mlpackage``, its protobuf loader reads the saved file back for
validation, ``xcrun coremlc compile`` (macOS + Xcode) makes the ``.mlmodelc`` and
``coremltools.models.CompiledMLModel`` runs it. What is written here is the order of
publishing: a package is saved to a staging folder, read back from disk, checked against
the contract (:mod:`verifylib.models.coreml_contract`), and only then renamed into place;
a mismatch places nothing (whisper.cpp ``memcpy``s ``count * sizeof(float)`` without a
shape or type check, so a wrong artifact would fail silently at run time). A compiled
model is published the same way, and a prediction through it is checked against the
contract before its output is used.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from verifylib.canonical import publish_dir, tree_digest
from verifylib.errors import ContractBroken, ExportFailure
from verifylib.models.coreml_contract import (
    EncoderContract,
    EncoderContractBroken,
    contract_problems,
    describe_mlpackage,
)
from verifylib.runtime.runner import RunResult

MLPACKAGE_SUFFIX = ".mlpackage"
MLMODELC_SUFFIX = ".mlmodelc"


class CompileError(ExportFailure):
    """``xcrun coremlc compile`` failed or produced no ``.mlmodelc``."""


# ----------------------------------------------------------------------------- placing

@dataclass
class StagedPackage:
    """A package saved to a staging folder beside its destination, read back and checked.

    Attributes
    ----------
    precision : str
        The variant.
    final : Path
        Where it goes when published.
    path : Path
        The staged package.
    description : dict
        :func:`~verifylib.models.coreml_contract.describe_mlpackage` of the staged files.
    problems : list of str
        :func:`~verifylib.models.coreml_contract.contract_problems`; empty when the
        contract holds.
    tree_digest : str or None
        Tree digest once published.
    """

    precision: str
    final: Path
    path: Path
    description: dict
    problems: list[str]
    tree_digest: str | None = None
    _root: Path | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """True when the staged package meets the contract (no problems)."""
        return not self.problems


def stage_mlpackage(model, final: str | os.PathLike, contract: EncoderContract,
                    precision: str) -> StagedPackage:
    """Save ``model`` next to ``final`` under a staging name and check the saved files.

    Nothing is placed at ``final`` here; see :func:`publish_staged`.

    Parameters
    ----------
    model : coremltools.models.MLModel
        The converted model (``Conversion.model``).
    final : path-like
        Where the package goes when published; it must end in ``.mlpackage``.
    contract : EncoderContract
        The contract the saved files are checked against.
    precision : {"fp32", "fp16"}
        The variant.

    Returns
    -------
    StagedPackage
        The staged package, its description and its contract problems.

    Raises
    ------
    verifylib.errors.ContractBroken
        If ``final`` does not end in ``.mlpackage``.
    """
    final = Path(final)
    if final.suffix != MLPACKAGE_SUFFIX:
        raise ContractBroken(f"{final}: an ML program package must end in {MLPACKAGE_SUFFIX}")
    final.parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f".staging-{final.stem}-", dir=final.parent))
    try:
        pkg = root / final.name
        model.save(str(pkg))
        desc = describe_mlpackage(pkg)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return StagedPackage(precision, final, pkg, desc, contract_problems(desc, contract, precision),
                         _root=root)


def discard_staged(staged: StagedPackage) -> None:
    """Remove a staged package that will not be published.

    Parameters
    ----------
    staged : StagedPackage
        The package; its staging folder is removed (a published one has none left).
    """
    if staged._root is not None:
        shutil.rmtree(staged._root, ignore_errors=True)


def publish_staged(staged: StagedPackage) -> StagedPackage:
    """Rename a checked staged package into place and digest it.

    Parameters
    ----------
    staged : StagedPackage
        From :func:`stage_mlpackage`.

    Returns
    -------
    StagedPackage
        The same object, its ``path`` now ``final`` and its ``tree_digest`` set.

    Raises
    ------
    EncoderContractBroken
        If the package broke the contract (the staging folder is removed, nothing placed).
    """
    try:
        if not staged.ok:
            raise EncoderContractBroken(staged.problems, staged.description)
        publish_dir(staged.path, staged.final)
        staged.path = staged.final
        staged.tree_digest = tree_digest(staged.final)
        return staged
    finally:
        discard_staged(staged)


def place_mlpackage(model, final: str | os.PathLike, contract: EncoderContract,
                    precision: str) -> StagedPackage:
    """Save, read back, check and (only if the contract holds) publish one package.

    Parameters
    ----------
    model : coremltools.models.MLModel
        The converted model.
    final : path-like
        Where the package goes; it must end in ``.mlpackage``.
    contract : EncoderContract
        The contract the saved files are checked against.
    precision : {"fp32", "fp16"}
        The variant.

    Returns
    -------
    StagedPackage
        The published package (see :func:`publish_staged`).

    Raises
    ------
    EncoderContractBroken
        On any mismatch; nothing exists at ``final`` afterwards that was not there before.
    """
    return publish_staged(stage_mlpackage(model, final, contract, precision))


def link_or_copy(src: str | os.PathLike, dest: str | os.PathLike) -> str:
    """Publish ``dest`` as a hard link to ``src`` (a copy across file systems).

    The link (or copy) is made under a temporary name beside ``dest`` and renamed over it.

    Parameters
    ----------
    src : path-like
        The file to publish.
    dest : path-like
        Where it is published (its folder is created; an existing file is replaced).

    Returns
    -------
    str
        ``"hardlink"`` or ``"copy"``.
    """
    src, dest = Path(src), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.staging-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        how = "hardlink"
    except OSError:
        shutil.copyfile(src, tmp)
        how = "copy"
    try:
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return how


# ----------------------------------------------------------------------------- macOS only

@dataclass(frozen=True)
class CompileResult:
    """One ``xcrun coremlc compile`` run and the ``.mlmodelc`` it published.

    Attributes
    ----------
    run : RunResult
        The compiler run (argv, exit, streams, wall time).
    path : Path
        The published ``.mlmodelc``.
    tree_digest : str
        Its tree digest.
    """

    run: RunResult
    path: Path
    tree_digest: str


def compile_mlpackage(package: str | os.PathLike, dest: str | os.PathLike, *,
                      runner: Callable | None = None, timeout: float = 1800) -> CompileResult:
    """Compile a package with ``xcrun coremlc compile`` and publish the ``.mlmodelc``.

    coremlc names its output after the input (``X.mlpackage`` -> ``X.mlmodelc``), so
    ``dest`` must be the package's name with the ``.mlmodelc`` suffix
    (docs/runtime-contract.md §4.3). The compiler writes into a staging folder beside
    ``dest``; only a complete output is renamed into place.

    Parameters
    ----------
    package : path-like
        The validated ``.mlpackage``.
    dest : path-like
        The ``.mlmodelc`` to publish.
    runner : callable, optional
        :func:`verifylib.runtime.runner.run` by default (tests pass a fake).
    timeout : float
        Seconds before the compiler is killed.

    Returns
    -------
    CompileResult
        The compiler run, the published path and its tree digest.

    Raises
    ------
    verifylib.errors.ContractBroken
        If ``dest`` is not named after the package (nothing is run).
    CompileError
        If coremlc fails, is killed, times out, or produces no ``.mlmodelc``.
    """
    from verifylib.runtime.runner import run
    runner = runner or run
    package, dest = Path(package), Path(dest)
    if dest.name != package.stem + MLMODELC_SUFFIX:
        raise ContractBroken(f"coremlc names its output {package.stem + MLMODELC_SUFFIX}, not "
                             f"{dest.name}: name the .mlpackage after the .mlmodelc")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{dest.stem}-", dir=dest.parent))
    try:
        argv = ["xcrun", "coremlc", "compile", str(package), str(staging)]
        res = runner(argv, timeout=timeout)
        produced = staging / dest.name
        if not res.ok:
            tail = res.stderr.decode("utf-8", "replace").strip().splitlines()[-10:]
            raise CompileError(f"coremlc failed ({res.describe()}): {' '.join(argv)}\n"
                               + "\n".join(tail))
        if not produced.is_dir():
            found = sorted(p.name for p in staging.iterdir())
            raise CompileError(f"coremlc exited 0 but wrote no {dest.name} (found {found})")
        digest = tree_digest(produced)
        publish_dir(produced, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return CompileResult(run=res, path=dest, tree_digest=digest)


def load_compiled(mlmodelc: str | os.PathLike, *, loader: Callable | None = None):
    """Load a published ``.mlmodelc`` the way whisper.cpp does: ``ComputeUnit.ALL``.

    Parameters
    ----------
    mlmodelc : path-like
        The compiled model directory (the published bytes, docs/runtime-contract.md §7.1).
    loader : callable, optional
        ``coremltools.models.CompiledMLModel`` by default (macOS only); tests pass a fake.

    Returns
    -------
    coremltools.models.CompiledMLModel
        What ``loader`` returns for the path with ``compute_units=ComputeUnit.ALL``.
    """
    import coremltools as ct
    loader = loader or ct.models.CompiledMLModel
    return loader(str(mlmodelc), compute_units=ct.ComputeUnit.ALL)


def predict_compiled(model, mel: np.ndarray, contract: EncoderContract) -> np.ndarray:
    """Run one prediction through a loaded compiled model, checked against the contract.

    Parameters
    ----------
    model : coremltools.models.CompiledMLModel
        The loaded model (:func:`load_compiled`).
    mel : numpy.ndarray
        The log-mel input (converted to contiguous float32).
    contract : EncoderContract
        Gives the feature names and shapes.

    Returns
    -------
    numpy.ndarray
        The output feature, float32 of the contract's output shape.

    Raises
    ------
    verifylib.errors.ContractBroken
        If ``mel`` does not have the contract's input shape.
    EncoderContractBroken
        If the output feature is missing, not float32, or not the contract's shape
        (whisper.cpp would copy it blindly).
    """
    x = np.ascontiguousarray(np.asarray(mel, dtype=np.float32))
    if tuple(x.shape) != contract.input_shape:
        raise ContractBroken(f"log-mel shape {x.shape}, the contract is {contract.input_shape}")
    out = model.predict({contract.input_name: x})
    if contract.output_name not in out:
        raise EncoderContractBroken([f"prediction has outputs {sorted(out)}, not "
                                     f"{contract.output_name!r}"])
    y = np.asarray(out[contract.output_name])
    problems = []
    if y.dtype != np.float32:
        problems.append(f"output dtype {y.dtype}, the runtime copies float32")
    if tuple(y.shape) != contract.output_shape:
        problems.append(f"output shape {tuple(y.shape)}, the contract is {contract.output_shape}")
    if problems:
        raise EncoderContractBroken(problems)
    return y
