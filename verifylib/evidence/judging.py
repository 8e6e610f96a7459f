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
