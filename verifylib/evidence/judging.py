"""Checks shared by the judges of several stages.

Pins against the shipped manifest, stored streams against their run records, cited
policies against the packaged ones.
"""

from __future__ import annotations

from typing import Any, Mapping

from verifylib.canonical import sha256_bytes as canonical_sha
from verifylib.evidence.records import EvidenceView
from verifylib.numerics.scoring import load_policy
from verifylib.whispercpp import source as _source


def pin_problems(doc: Any) -> list[str]:
    """Check the pin fields of a build sidecar against the pin manifest this version ships.

    Parameters
    ----------
    doc : object
        The sidecar document (``source``, ``patch`` or a build record).

    Returns
    -------
    list of str
        One problem per field that is not the manifest's; empty when the pin is known and
        every pin field it states agrees.
    """
    if not isinstance(doc, Mapping):
        return ["evidence is not a mapping"]
    name = doc["pin"] if "pin" in doc else None
    pin = _source.load_pins().get(name) if isinstance(name, str) else None
    if pin is None:
        return [f"pin {name!r} is not in the shipped manifest"]
    shipped = _source.pin_fields(pin)
    return [f"{k} {doc[k]!r} is not the manifest's {v!r} for pin {pin.name}"
            for k, v in shipped.items() if k in doc and doc[k] != v]


def stream_problems(ev: EvidenceView, record: Any, names: Mapping[str, str]) -> list[str]:
    """Each stored stream must be its run record's (SHA-256 of the stored bytes)."""
    if not isinstance(record, Mapping):
        return ["run record missing"]
    out = []
    for key, name in names.items():
        if canonical_sha(ev.bytes(name)) != record.get(key):
            out.append(f"stored {name} is not the run's stream ({key} differs)")
    return out


def policy_file_problems(ev: EvidenceView, name: str, policy_id: str) -> list[str]:
    """List why a cited policy record is not the packaged resource (id, digest, rules)."""
    packaged = load_policy(policy_id)
    stored = ev.json(name)
    want = {"id": packaged.id, "sha256": packaged.sha256, "rules": packaged.rules}
    if stored != want:
        return [f"the stored {policy_id} record is not the packaged resource"]
    return []


def read_from_text(source: Any) -> bool:
    """Tell whether a candidate record says its program was read from a ``model.mil``.

    Parameters
    ----------
    source : object
        The record's ``program_source`` (a mapping, or None when absent).

    Returns
    -------
    bool
    """
    return isinstance(source, Mapping) and source.get("read_from") == "model.mil"


def program_source_problems(ev: EvidenceView, source: Any, encoder: str | None) -> list[str]:
    """Check a compiled model's program source record against the run's published files.

    A given ``.mlmodelc`` executed from its ``model.mil`` records that file's digest and
    its weight file's; both must be those of the compiled model the record names, in this
    run (the receipt covers those files, so the validator can know them).

    Parameters
    ----------
    ev : EvidenceView
        The gate's evidence (its run directory locates the compiled model).
    source : object
        The ``program_source`` record.
    encoder : str or None
        The run-relative path of the compiled model the gate measured.

    Returns
    -------
    list of str
        Problems; empty when the record is well formed and its digests are the files'.
    """
    from pathlib import Path

    from verifylib.canonical import is_sha256, sha256_file

    if not read_from_text(source):
        return ["the program source does not name the model.mil it was read from"]
    if not (isinstance(encoder, str) and encoder.endswith(".mlmodelc")):
        return [f"a program read from a model.mil, but the measured encoder {encoder!r} is "
                "not a compiled model"]
    if Path(encoder).is_absolute() or ".." in Path(encoder).parts:
        return [f"the measured encoder {encoder!r} is not a path inside the run"]
    mil, blob = source.get("model_mil_sha256"), source.get("weight_bin_sha256")
    if not is_sha256(mil) or not (blob is None or is_sha256(blob)):
        return ["malformed digest in the program source"]
    folder = Path(ev.run_dir) / encoder
    problems = []
    for rel, want in (("model.mil", mil), ("weights/weight.bin", blob)):
        path = folder / rel
        got = sha256_file(path) if path.is_file() else None
        if got != want:
            problems.append(f"the recorded {rel} digest {str(want)[:12]}… is not that of "
                            f"{encoder}/{rel} ({str(got)[:12]}…)")
    return problems
