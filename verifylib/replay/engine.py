"""``verifylib verify RUN --replay``: verify, re-derive, compare, write the claim table.

:func:`replay` first verifies the run exactly as ``verifylib verify`` does (a run that does
not verify is not replayed). It then re-derives the run's Linux-physical work on this host
(:mod:`verifylib.replay.rederive`: the source, the builds, the ggml writer, the export, the
canary, the transcripts, from the run's recorded parameters and this host's cache),
re-executes the run's published packages (:mod:`verifylib.replay.parity`) and compares each
claim (:mod:`verifylib.replay.compare`). Everything is written under the output folder:
``replay.json``, ``replay.html``, the scratch run under ``work/`` and the copies of the
run's packages that replay opens under ``published/``. Nothing is ever written into the
replayed run.
"""

from __future__ import annotations

import platform
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from verifylib import canonical
from verifylib.errors import ParametersInvalid
from verifylib.params import Params
from verifylib.replay.claims import REPLAY_JSON, ReplayResult
from verifylib.replay.rederive import Rederived

WORK_DIR = "work"
"""The scratch run's folder inside the output folder."""

PUBLISHED_DIR = "published"
"""Copies of the run's packages, the ones replay opens, inside the output folder."""


def default_output_dir(run_id: str, now: datetime | None = None) -> Path:
    """Return where a replay writes without ``-o``: ``./reports/replay-<run id>-<UTC time>/``.

    Parameters
    ----------
    run_id : str
        The replayed run's id.
    now : datetime, optional
        The time to name the folder after (default: now).

    Returns
    -------
    Path
    """
    from verifylib.evidence.layout import stamped_dir
    from verifylib.resources import reports_dir

    return stamped_dir(reports_dir(), f"replay-{run_id}", now)


def host_facts() -> dict[str, str]:
    """Return this host as the replay records it (the verifier of a verification summary)."""
    import verifylib

    return {"system": platform.system(), "machine": platform.machine(),
            "node": platform.node(), "python": platform.python_version(),
            "verifylib": verifylib.__version__}


def copy_packages(run_dir: Path, dest: Path) -> Path:
    """Copy the run's ``.mlpackage`` folders to ``dest`` and return ``dest``.

    coremltools rewrites a package's ``Manifest.json`` when it opens one (same bytes, new
    file), so the run's own packages are never opened: their copies are, once each copy's
    tree digest is checked against the original's.

    Raises
    ------
    verifylib.errors.EvidenceInvalid
        If a copy differs from its original.
    """
    from verifylib.errors import EvidenceInvalid

    for pkg in sorted(run_dir.glob("*/*.mlpackage")):
        rel = pkg.relative_to(run_dir)
        target = dest / rel
        shutil.copytree(pkg, target)
        if canonical.tree_digest(target) != canonical.tree_digest(pkg):
            raise EvidenceInvalid(f"{target}: the copy of {pkg} differs from it")
    return dest


def check_output_dir(out_dir: Path, run_dir: Path) -> None:
    """Refuse an output folder inside the run, or one that already holds a replay.

    Raises
    ------
    verifylib.errors.ParametersInvalid
    """
    from verifylib.evidence.layout import inside_a_run

    out = out_dir.expanduser().resolve()
    inside = inside_a_run(out, [run_dir])
    if inside is not None:
        raise ParametersInvalid(f"{out_dir}: inside the run {inside}; replay never writes "
                                f"into a run, name a folder outside it")
    if any((out / name).exists() for name in (REPLAY_JSON, WORK_DIR, PUBLISHED_DIR)):
        raise ParametersInvalid(f"{out_dir}: already holds a replay; name a new folder")


def replay(run_dir: str | Path, out_dir: str | Path | None = None, *,
           allow_simulated: bool = False, log: Callable[[str], None] = print,
           rederived: Rederived | None = None) -> ReplayResult:
    """Verify a published run, re-derive its physical claims here and compare each.

    Parameters
    ----------
    run_dir : path-like
        The published run (read only).
    out_dir : path-like, optional
        Where ``replay.json``, ``replay.html`` and ``work/`` go (default
        :func:`default_output_dir`).
    allow_simulated : bool
        Accept a run recorded on the test suite's simulated Mac (as ``verify`` does).
    log : callable
        Progress lines.
    rederived : Rederived, optional
        A re-derivation already made here for the same parameters (another run of the
        same model and fixtures; :func:`verifylib.replay.rederive.load`): compared against
        instead of re-running the stages. The published packages are still re-executed.

    Returns
    -------
    ReplayResult
        The claim table; ``exit_code`` is 1 when the run does not verify or a claim DIFFERS.

    Raises
    ------
    verifylib.errors.ParametersInvalid
        If the output folder lies inside the run or already holds a replay, or
        ``rederived`` was made with other parameters.
    """
    from verifylib.evidence.receipt import verify
    from verifylib.evidence.runs import open_run
    from verifylib.replay.compare import all_claims
    from verifylib.replay.parity import replay_parity
    from verifylib.replay.rederive import available_fixtures, carried_manifest, rederive

    t0 = time.perf_counter()
    run_dir = Path(run_dir).resolve()
    checked = verify(run_dir, allow_simulated=allow_simulated)
    run_id = None
    try:
        run = open_run(run_dir)
        run_id = run.run_id
    except Exception:  # noqa: BLE001 - a run that does not open is reported by verify's problems
        run = None
    out = Path(out_dir) if out_dir is not None else default_output_dir(run_id or "run")
    check_output_dir(out, run_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = ReplayResult(run_dir=str(run_dir), run_id=run_id, verified=checked.ok,
                          verify_problems=list(checked.problems), verdict=checked.verdict,
                          host=host_facts(), output_dir=str(out))
    if checked.ok and run is not None:
        log(f"replay: {run_dir} verifies (verdict {checked.verdict}); re-deriving its "
            f"physical claims on this host")
        recorded_fixtures = {k.split(".")[1]: v for k, v in run.identities.items()
                             if k.startswith("fixture.") and k.endswith(".sha256")}
        params, missing = available_fixtures(carried_manifest(run.params, run_dir),
                                             recorded_fixtures)
        if rederived is None:
            rd = rederive(params, out / WORK_DIR, missing, log=log)
        else:
            rd = _reusable(rederived, params)
            log(f"replay: comparing against the re-derivation in {rd.run_dir}")
        published = copy_packages(run.path, out / PUBLISHED_DIR)
        parity = replay_parity(run, rd.run_dir, params, log=log, packages=published)
        result.claims = all_claims(run, rd, parity, packages=published)
        result.work_dir = str(rd.run_dir)
    else:
        log(f"replay: {run_dir} does not verify; nothing is replayed")
    result.seconds = time.perf_counter() - t0
    write(result, out)
    return result


def _reusable(rd: Rederived, params: Params) -> Rederived:
    if canonical.dumps(rd.params.data) != canonical.dumps(params.data):
        raise ParametersInvalid(f"{rd.run_dir} was re-derived from other parameters than "
                                f"the run's; replay it without reuse")
    return rd


def write(result: ReplayResult, out_dir: Path) -> tuple[Path, Path]:
    """Write ``replay.json`` and ``replay.html`` (each staged and renamed into place).

    Parameters
    ----------
    result : ReplayResult
        The replay.
    out_dir : Path
        The output folder.

    Returns
    -------
    (json_path, html_path)
    """
    from verifylib.views import replay as view

    js = out_dir / REPLAY_JSON
    canonical.atomic_write_bytes(js, canonical.dumps(result.to_json()))
    return js, view.write(result, out_dir)


def discard_work(result: ReplayResult) -> None:
    """Remove the scratch run of a replay (its evidence is not needed after the table)."""
    if result.work_dir:
        shutil.rmtree(result.work_dir, ignore_errors=True)
