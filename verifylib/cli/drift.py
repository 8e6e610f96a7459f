"""``verifylib drift``: attribute any saved package's drift against a parameter file's model.

The analysis is :mod:`verifylib.numerics.drift`; this module only obtains what it needs without a
run (the model and, for a whisper.cpp sample, the pinned source, both from the cache as
an audit would obtain them), and prints or writes the result. Kept apart from
:mod:`verifylib.numerics.drift` so that the views, which display attributions, reach nothing that
fetches or builds.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from verifylib.errors import ParametersInvalid
from verifylib.numerics.attribution import Attribution, empty_ranking_sentence, mapping_sentence
from verifylib.numerics.drift import TOP_N, attribute


@dataclass
class PackageAttribution:
    """What ``verifylib drift`` computed: the attribution and what it was computed on."""

    attribution: Attribution
    package: str
    model: str
    fixture: str
    compute: str
    notes: list[str] = field(default_factory=list)


def attribute_package(package: str | os.PathLike, params_path, *,
                      fixture: str | None = None, compute: str = "float32",
                      log=print) -> PackageAttribution:
    """Attribute any saved package's drift against the model of a parameter file.

    Touches no run: the model comes from the cache (fetched and imported as an audit
    would), the fixture from the parameter file (a whisper.cpp sample from the pinned
    source in the cache).

    Parameters
    ----------
    package : path-like
        A saved ``.mlpackage``.
    params_path : path-like or verifylib.params.Params
        A parameter file, or parameters already loaded (a notebook's ``params``).
    fixture : str, optional
        Fixture id (default: the first).
    compute : {"float32", "float64"}
        Arithmetic of the package's execution.
    log : callable
        Receives progress lines (model intake).

    Returns
    -------
    PackageAttribution

    Raises
    ------
    verifylib.errors.ParametersInvalid
        On a missing package, an unknown fixture, or a package whose input shape is not
        the model's.
    """
    from verifylib.models.coreml_contract import contract_of
    from verifylib.models.hf import load_hf_encoder
    from verifylib.models.intake import obtain_model
    from verifylib.numerics.mil_exec import MilExecError, load_program
    from verifylib.numerics.reference import fixture_logmel
    from verifylib.params import Params
    from verifylib.params import load as load_params
    from verifylib.resources import cache_dir
    from verifylib.runtime.audio_intake import to_pcm16k
    from verifylib.stages import artifacts

    pkg = os.fspath(package)
    if not os.path.isdir(pkg):
        raise ParametersInvalid(f"{pkg}: no such .mlpackage folder")
    params = params_path if isinstance(params_path, Params) else load_params(params_path)
    fixtures = params.fixtures
    if not fixtures:
        raise ParametersInvalid(f"{params_path}: no fixtures")
    if fixture is None:
        fx = fixtures[0]
    else:
        by_id = {f.id: f for f in fixtures}
        if fixture not in by_id:
            raise ParametersInvalid(f"no fixture {fixture!r} in {params_path} (has "
                                    f"{', '.join(by_id)})")
        fx = by_id[fixture]
    try:
        program = load_program(pkg)
    except MilExecError as exc:
        raise ParametersInvalid(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - coremltools' loaders raise anything on junk
        raise ParametersInvalid(f"{pkg}: not a readable .mlpackage: {exc}") from None
    info = obtain_model(params.model.spec, cache_dir(), log=log,
                        base_dir=params.base_dir)
    encoder, fe = load_hf_encoder(info.hf_dir)
    contract = contract_of(encoder)
    audio_path = artifacts.standalone_fixture_audio(params, fx, log=log)
    pcm, _ = to_pcm16k(audio_path)  # the samples an audit's intake gives both legs
    mel = fixture_logmel(fe, pcm.astype("float32") / 32768.0, contract)
    att = attribute(program, encoder, mel, compute=compute, fixture=fx.id)
    return PackageAttribution(att, pkg, str(params_path), fx.id, compute)


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.2f}"


def format_top(att: Attribution, n: int = TOP_N) -> str:
    """Format the worst ops as a plain-text table (conversion drift, then precision drift).

    Parameters
    ----------
    att : Attribution
        The attribution; its ``top`` and ``precision_top`` are listed.
    n : int
        At most this many ops per table.

    Returns
    -------
    str
        Both tables, one line per op. An empty one says what it covers
        (:func:`~verifylib.numerics.attribution.empty_ranking_sentence`): ``no op loses anything``
        only when every op was compared, else how many were and that the others were not.
    """
    lines = []
    for kind, title, ops, snr, delta in (
            ("conversion", "conversion drift (against the Hugging Face modules)", att.top,
             "snr_db", "delta_snr_db"),
            ("precision", "precision drift (against the program in float64)",
             att.precision_top, "precision_snr_db", "precision_delta_snr_db")):
        lines.append(f"{title}: worst ops by ΔSNR")
        if kind == "conversion" and att.mapped < att.executed:
            lines.append(f"  ({mapping_sentence(att)})")
        if not ops:
            lines.append(f"  none: {empty_ranking_sentence(att, kind)}")
            continue
        lines.append(f"  {'#':>4}  {'op':<28} {'type':<11} {'module / scope':<34} "
                     f"{'SNR dB':>8} {'ΔSNR dB':>8}")
        for o in ops[:n]:
            lines.append(f"  {o.index:>4}  {o.name[:28]:<28} {o.type:<11} "
                         f"{(o.module or o.scope)[:34]:<34} {_fmt(getattr(o, snr)):>8} "
                         f"{_fmt(getattr(o, delta)):>8}")
    return "\n".join(lines)


def cli_main(args) -> int:
    """Run ``verifylib drift``: print the worst ops, and write the document with ``--json``.

    Parameters
    ----------
    args : argparse.Namespace
        ``package``, ``model``, ``fixture``, ``compute``, ``top`` and ``json``.

    Returns
    -------
    int
        0, or 2 on bad input (parameters, a missing file or any verifylib error).
    """
    import sys

    from verifylib import canonical
    from verifylib.errors import VerifylibError

    def log(msg: str) -> None:
        print(msg, file=sys.stderr)

    try:
        res = attribute_package(args.package, args.model, fixture=args.fixture,
                                compute=args.compute, log=log)
    except (ParametersInvalid, FileNotFoundError) as exc:
        print(f"verifylib drift: {exc}", file=sys.stderr)
        return 2
    except VerifylibError as exc:
        print(f"verifylib drift: {exc}", file=sys.stderr)
        return 2
    att = res.attribution
    print(f"{res.package}: {mapping_sentence(att)}; fixture {res.fixture}, {res.compute}, "
          f"{att.seconds:.1f} s")
    print(format_top(att, args.top))
    if args.json:
        canonical.write_json(args.json, att.as_dict())
        print(f"wrote {args.json}")
    return 0
