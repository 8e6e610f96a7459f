"""The run's Linux-physical work done again on this host, into a scratch run.

The replay runs the same stage modules the audit runs (``01_build``, ``02_export``,
``03_canary``, ``05_wer``), in process, with the run's own recorded parameters, into a
scratch run directory inside the replay's output folder. Stage 04 is not re-run here: its
claim is about the *published* packages, which :mod:`verifylib.replay.parity` executes.
Stage 06 needs a Core ML runtime and is never replayed. A fixture whose audio (or text
file) is not on this host, or no longer has the recorded digest, is left out of the
parameters and reported NOT_REPLAYABLE. A user-declared pin is rebuilt from the copy of
its manifest the run carries (:func:`carried_manifest`), not from the user's file.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from verifylib import canonical
from verifylib.evidence.layout import EVIDENCE_DIR, USER_PINS_FOLDER
from verifylib.params import Params

STAGES = ("01_build", "02_export", "03_canary", "05_wer")
"""The stages re-run by replay, in order."""

RECORD_FILE = "replay-rederive.json"
"""What the re-derivation left out and how long it took, beside the scratch run's files."""


@dataclass(frozen=True)
class MissingFixture:
    """A fixture left out of the replay, and why."""

    id: str
    reason: str


@dataclass
class Rederived:
    """The scratch run a replay made.

    Attributes
    ----------
    run_dir : Path
        The scratch run directory (never published; no receipt).
    params : Params
        The parameters it was made with (the run's, minus the missing fixtures).
    missing : list of MissingFixture
        Fixtures not on this host.
    seconds : dict
        Stage -> wall seconds.
    errors : dict
        Stage -> the exception text of a stage that raised (its gates are then missing).
    """

    run_dir: Path
    params: Params
    missing: list[MissingFixture] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def available_fixtures(params: Params, recorded_sha256: dict[str, str]
                       ) -> tuple[Params, list[MissingFixture]]:
    """Drop the fixtures whose files are not on this host (or not the recorded bytes).

    Parameters
    ----------
    params : Params
        The run's recorded parameters (paths are stored absolute).
    recorded_sha256 : dict
        Fixture id -> the audio SHA-256 the run recorded (``fixture.<id>.sha256``).

    Returns
    -------
    params : Params
        The same parameters with only the fixtures at hand.
    missing : list of MissingFixture
    """
    from verifylib.runtime.audio import audio_sha256

    data = copy.deepcopy(params.data)
    kept, missing = [], []
    for fx in data["fixtures"]:
        fid = fx["id"]
        if fx.get("runtime_file"):
            kept.append(fx)  # a file of the pinned tree: obtained with the source
            continue
        path = Path(fx.get("path") or "")
        if not path.is_file():
            missing.append(MissingFixture(fid, f"fixture {fid}: {path} is not on this host"))
            continue
        want = recorded_sha256.get(fid)
        try:
            got = audio_sha256(path)
        except (OSError, ValueError) as exc:
            missing.append(MissingFixture(fid, f"fixture {fid}: {path} unreadable ({exc})"))
            continue
        if want is not None and got != want:
            missing.append(MissingFixture(fid, f"fixture {fid}: {path} is not the recorded "
                                               f"audio (sha256 {got[:12]}… vs {want[:12]}…)"))
            continue
        if fx.get("text_file") and not Path(fx["text_file"]).is_file():
            missing.append(MissingFixture(fid, f"fixture {fid}: its text file "
                                               f"{fx['text_file']} is not on this host"))
            continue
        kept.append(fx)
    data["fixtures"] = kept
    return (Params(name=params.name, data=data, origin=f"replay of {params.origin}",
                   base_dir=params.base_dir), missing)


def carried_manifest(params: Params, run_dir: Path) -> Params:
    """Point a user-declared pin's ``runtime.manifest`` at the copy the run carries.

    The user's file may be gone or edited since the run; the copy in
    ``evidence/01_build/user-pins/`` is what the pin was built from and is verified with the
    run. Parameters of a packaged pin (no copy) are returned unchanged.

    Parameters
    ----------
    params : Params
        The run's recorded parameters.
    run_dir : Path
        The published run (only read).

    Returns
    -------
    Params
        The parameters, ``runtime.manifest`` naming the carried copy when there is one.
    """
    recorded = params.data["runtime"].get("manifest")
    if recorded is None:
        return params
    carried = Path(run_dir) / EVIDENCE_DIR / "01_build" / USER_PINS_FOLDER / Path(recorded).name
    if not carried.is_file():
        return params
    data = copy.deepcopy(params.data)
    data["runtime"]["manifest"] = str(carried)
    return Params(name=params.name, data=data, origin=params.origin, base_dir=params.base_dir)


def rederive(params: Params, run_dir: Path, missing: list[MissingFixture] | None = None, *,
             log: Callable[[str], None] = print) -> Rederived:
    """Run the replayed stages into a new scratch run directory.

    Parameters
    ----------
    params : Params
        The parameters to replay (:func:`available_fixtures` output).
    run_dir : Path
        The scratch run directory to create (must not exist).
    missing : list of MissingFixture, optional
        The fixtures :func:`available_fixtures` left out (recorded with the run).
    log : callable
        Progress lines.

    Returns
    -------
    Rederived
        Where the evidence is, the time per stage, and any stage that raised.
    """
    import importlib

    from verifylib.stages.context import init_run_dir

    out = Rederived(run_dir=Path(run_dir), params=params, missing=list(missing or []))
    init_run_dir(out.run_dir, params)
    for stage in STAGES:
        module = importlib.import_module(f"verifylib.stages.{stage.split('_', 1)[1]}")
        log(f"replay: stage {stage} again …")
        t0 = time.perf_counter()
        try:
            module.run(params, out.run_dir)
        except Exception as exc:  # noqa: BLE001 - recorded; its claims become NOT_REPLAYABLE
            out.errors[stage] = f"{type(exc).__name__}: {exc}"
            log(f"replay: stage {stage} raised {type(exc).__name__}: {exc}")
        out.seconds[stage] = round(time.perf_counter() - t0, 3)
    canonical.atomic_write_bytes(out.run_dir / RECORD_FILE, canonical.dumps({
        "missing": [{"id": m.id, "reason": m.reason} for m in out.missing],
        "seconds": out.seconds, "errors": out.errors}))
    return out


def load(run_dir: str | Path) -> Rederived:
    """Read back a scratch run :func:`rederive` made (to compare further runs against it).

    Parameters
    ----------
    run_dir : path-like
        The scratch run directory.

    Returns
    -------
    Rederived

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If the folder is not a finished scratch run.
    """
    from verifylib.errors import ParametersInvalid
    from verifylib.evidence.layout import RUN_FILE

    run_dir = Path(run_dir)
    if not (run_dir / RECORD_FILE).is_file() or not (run_dir / RUN_FILE).is_file():
        raise ParametersInvalid(f"{run_dir}: not a finished replay scratch run")
    rec = canonical.read_json(run_dir / RECORD_FILE)
    run = canonical.read_json(run_dir / RUN_FILE)
    params = Params(name=run["name"], data=run["params"], origin=str(run_dir / RUN_FILE),
                    base_dir=run_dir)
    return Rederived(run_dir=run_dir, params=params,
                     missing=[MissingFixture(m["id"], m["reason"]) for m in rec["missing"]],
                     seconds=dict(rec["seconds"]), errors=dict(rec["errors"]))
