"""What the published files declare, read again by ``verify`` and held against the evidence.

The policy of ``parity.program`` and the floor of ``export.pair`` are chosen from two
declarations, before anything is measured: the audited encoder's compute precision (its
card) and the model file's tensor type (its header). A forger who edits the evidence to
claim an fp16 encoder (a looser policy) or a quantized file (a lower floor), and refreshes
every digest, leaves the published files saying otherwise. So the validator reads the
declarations from the published bytes, never from the evidence, chooses the policy again
with the same pure function, and names every record that disagrees.

An encoder unpacked from a zip is also held against what the zip's central directory
declared (recorded in ``export.contract``): the published folder must hold exactly those
files, with those sizes and CRC-32s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from verifylib.errors import VerifylibError
from verifylib.evidence.gates import (
    EXPORT_CONTRACT,
    EXPORT_GGML_MODEL,
    EXPORT_PAIR,
    PARITY_PROGRAM,
)
from verifylib.evidence.reading import judged_evidence
from verifylib.evidence.records import GateRecord


def _doc(run_dir: Path, records: Mapping[str, GateRecord], gate_id: str, name: str) -> Any:
    view = judged_evidence(run_dir, records, gate_id, name)
    return None if view is None else view.json(name)


def declaration_problems(run_dir: str | Path, records: Mapping[str, GateRecord],
                         params: Mapping[str, Any] | None) -> list[str]:
    """Check the recorded precision, ftype and policy choices against the published files.

    Parameters
    ----------
    run_dir : path-like
        The published run.
    records : mapping
        Gate id to its record, as the receipt lists them.
    params : mapping or None
        The bound parameters (``model.kind``, ``encoder.path``).

    Returns
    -------
    list of str
        Problems; empty when every recorded declaration is the published files' own.
    """
    run_dir = Path(run_dir)
    params = params or {}
    problems: list[str] = []
    try:
        ggml = _doc(run_dir, records, EXPORT_GGML_MODEL, "ggml")
        contract = _doc(run_dir, records, EXPORT_CONTRACT, "contract")
        pair = _doc(run_dir, records, EXPORT_PAIR, "pair")
        parity = _doc(run_dir, records, PARITY_PROGRAM, "parity")
    except (OSError, ValueError, VerifylibError) as exc:
        return [f"declarations: evidence unreadable: {exc}"]

    ftype = _published_ftype(run_dir, ggml, problems)
    source_ftype = ftype if (params.get("model") or {}).get("kind") == "ggml" else None
    precision = "fp32"
    pre = contract.get("prebuilt") if isinstance(contract, Mapping) else None
    if isinstance(pre, Mapping):
        precision = _prebuilt_precision(run_dir, contract, pre, source_ftype, problems)
        problems += _archive_problems(run_dir, contract, pre)
    if isinstance(parity, Mapping):
        problems += _choice_problems(parity, isinstance(pre, Mapping), precision, source_ftype)
    if isinstance(pair, Mapping):
        problems += _pair_problems(pair, ftype, precision)
    return problems


def _published_ftype(run_dir: Path, ggml: Any, problems: list[str]) -> str | None:
    """Read the published model file's tensor type, noting where ``export.ggml_model`` differs.

    None when the evidence names no published model file or it cannot be read.
    """
    if not (isinstance(ggml, Mapping) and isinstance(ggml.get("path"), str)):
        return None
    model_file = run_dir / ggml["path"]
    if not model_file.is_file():
        return None
    from verifylib.models.ggml_file import open_ggml
    try:
        ftype: str = open_ggml(model_file).ftype_name
    except VerifylibError as exc:
        problems.append(f"{ggml['path']}: the published model file is unreadable: {exc}")
        return None
    if ggml.get("ftype", "f16") != ftype:
        problems.append(f"export.ggml_model records ftype {ggml.get('ftype')!r}, "
                        f"the published {ggml['path']} says {ftype}")
    return ftype


def _prebuilt_precision(run_dir: Path, contract: Mapping[str, Any], pre: Mapping[str, Any],
                        source_ftype: str | None, problems: list[str]) -> str:
    """Read a given encoder's declared precision from its published bytes (``fp32`` failing that).

    Notes where ``export.contract``'s record of the encoder (its precision, its card, the
    parity policy chosen) is not what the published encoder declares.
    """
    from verifylib.numerics.parity import choose_parity_policy

    precision = "fp32"
    variants = contract.get("variants") or [{}]
    placed = run_dir / str(variants[0].get("path", ""))
    if placed.is_dir():
        from verifylib.models.encoder_reader import describe_encoder
        try:
            card = describe_encoder(placed)
        except VerifylibError as exc:
            problems.append(f"{placed.name}: the published encoder is unreadable: {exc}")
        else:
            precision = card.precision
            if pre.get("precision") != card.precision:
                problems.append(f"export.contract records a {pre.get('precision')} "
                                f"encoder; the published encoder declares "
                                f"{card.precision}")
            if pre.get("card") != card.to_json():
                problems.append("export.contract's card is not what the published "
                                "encoder says about itself")
    try:
        want = choose_parity_policy(precision, source_ftype).policy_id
    except VerifylibError as exc:
        problems.append(f"declarations: {exc}")
    else:
        if pre.get("parity_policy") != want:
            problems.append(f"export.contract chose {pre.get('parity_policy')}; the "
                            f"published declarations choose {want}")
    return precision


def _archive_problems(run_dir: Path, contract: Mapping[str, Any],
                      pre: Mapping[str, Any]) -> list[str]:
    """Hold a published encoder unpacked from a zip against the files the zip declared."""
    archive = pre.get("archive")
    if archive is None:
        return []
    from verifylib.models.encoder_zip import ArchiveMember, tree_problems

    variants = contract.get("variants") or [{}]
    placed = run_dir / str(variants[0].get("path", ""))
    if not (variants[0].get("placed") and placed.is_dir()):
        return []  # nothing published: export.contract's rule says why
    try:
        files = [ArchiveMember(f["path"], f["bytes"], int(f["crc32"], 16))
                 for f in archive["files"]]
    except (KeyError, TypeError, ValueError) as exc:
        return [f"export.contract's archive record is malformed: {exc!r}"]
    return [f"the published encoder is not what {Path(str(pre.get('given'))).name} held: {p}"
            for p in tree_problems(placed, files)]


def _choice_problems(parity: Mapping[str, Any], prebuilt: bool, precision: str,
                     source_ftype: str | None) -> list[str]:
    """Hold ``parity.program``'s recorded policy choice against the published declarations."""
    from verifylib.numerics.parity import choose_parity_policy

    problems = []
    choice = parity.get("choice")
    needed = prebuilt or source_ftype is not None
    if needed and not isinstance(choice, Mapping):
        problems.append("parity.program records no policy choice, but the run audits a "
                        "given encoder or a ggml-file source")
    elif isinstance(choice, Mapping):
        want_choice = choose_parity_policy(precision, source_ftype)
        got = (choice.get("precision"), choice.get("source_ftype"), choice.get("policy_id"))
        if got != (want_choice.precision, want_choice.source_ftype, want_choice.policy_id):
            problems.append(f"parity.program's policy choice {got} is not what the "
                            f"published files declare ({want_choice.precision}, "
                            f"{want_choice.source_ftype}, {want_choice.policy_id})")
        if not needed:
            problems.append("parity.program records a policy choice for the suite's own "
                            "export from a full-precision model")
    return problems


def _pair_problems(pair: Mapping[str, Any], ftype: str | None, precision: str) -> list[str]:
    """Hold the floor and policy ``export.pair`` was judged at against the published files."""
    from verifylib.numerics.parity import PAIR_POLICY

    problems = []
    floor = pair.get("floor") or {}
    if ftype is not None and floor.get("ftype") != ftype:
        problems.append(f"export.pair was judged at the {floor.get('ftype')} floor; the "
                        f"published model file is {ftype}")
    if floor.get("precision") != precision:
        problems.append(f"export.pair was judged for a {floor.get('precision')} encoder; "
                        f"the published encoder declares {precision}")
    if (pair.get("policy") or {}).get("id") != PAIR_POLICY:
        problems.append(f"export.pair was not measured under {PAIR_POLICY}")
    return problems
