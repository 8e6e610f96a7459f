"""Checks shared by the judges of several stages.

Pins against the shipped manifest (and a user's manifest the gate carries), stored streams
against their run records, cited policies against the packaged ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Mapping

from verifylib.canonical import sha256_bytes as canonical_sha
from verifylib.errors import ParametersInvalid
from verifylib.evidence import identities
from verifylib.evidence.layout import USER_MANIFEST_EVIDENCE, USER_PATCH_EVIDENCE
from verifylib.evidence.records import EvidenceView
from verifylib.evidence.run_record import SeamExecutorRecord
from verifylib.numerics.scoring import load_policy
from verifylib.runtime import contracts
from verifylib.runtime.contracts import seam as _seam
from verifylib.whispercpp import source as _source


@dataclass(frozen=True)
class CitedPins:
    """The pins a gate is judged against.

    Attributes
    ----------
    pins : dict of str to Pin
        The packaged pins, then those of the user manifest the gate carries (if any).
    user : frozenset of str
        The names that come from the carried user manifest (empty without one).
    problems : list of str
        Why the carried manifest does not stand: not the one the gate binds, unreadable,
        a patch it names not carried beside it.
    """

    pins: dict[str, _source.Pin]
    user: frozenset[str] = frozenset()
    problems: list[str] = field(default_factory=list)


def cited_pins(ev: EvidenceView) -> CitedPins:
    """Read the pins a gate's evidence is judged against, with a user manifest it carries.

    A run on a user-declared pin carries the user's manifest and its patches as evidence
    (``user_manifest``, ``user_patch:<path>``) and binds the manifest's SHA-256
    (:data:`verifylib.evidence.identities.RUNTIME_MANIFEST`). The copy is loaded as the
    parameters' manifest was (:func:`verifylib.whispercpp.source.load_user_pins`: its patch
    digests, no clash with a packaged name), so the pin is judged against what the run
    carries, never against a file outside it. Every carried file is read.

    Parameters
    ----------
    ev : EvidenceView
        The gate's evidence and identities.

    Returns
    -------
    CitedPins
        The packaged pins alone when the gate carries no manifest.
    """
    packaged = _source.load_pins()
    bound = ev.identities.get(identities.RUNTIME_MANIFEST)
    if not ev.has(USER_MANIFEST_EVIDENCE):
        if bound is not None:
            return CitedPins(packaged, problems=[
                f"the gate binds {identities.RUNTIME_MANIFEST} but carries no user manifest"])
        return CitedPins(packaged)
    data = ev.bytes(USER_MANIFEST_EVIDENCE)
    where = ev.path_of(USER_MANIFEST_EVIDENCE)
    carried = {n[len(USER_PATCH_EVIDENCE):]: ev.path_of(n) for n in ev.names()
               if n.startswith(USER_PATCH_EVIDENCE)}
    for rel in carried:
        ev.bytes(USER_PATCH_EVIDENCE + rel)
    problems = []
    if bound != canonical_sha(data):
        problems.append(f"the carried user manifest {where} hashes to {canonical_sha(data)}, "
                        f"not the {identities.RUNTIME_MANIFEST} the gate binds ({bound!r})")
    manifest = ev.run_dir / where
    try:
        user = _source.load_user_pins(manifest, packaged)
    except ParametersInvalid as exc:
        return CitedPins(packaged, problems=problems + [f"the carried user manifest does not "
                                                        f"load: {exc}"])
    named = {_source.patch_rel_path(manifest, p) for p in user.values()}
    folder = PurePosixPath(where).parent
    for rel in sorted(named | set(carried)):
        if rel not in carried or carried[rel] != (folder / rel).as_posix():
            problems.append(f"the user manifest's patch {rel} is not carried beside it")
        elif rel not in named:
            problems.append(f"the carried patch {carried[rel]} is named by no user pin")
    return CitedPins({**packaged, **user}, frozenset(user), problems)


def pin_problems(doc: Any, ev: EvidenceView | None = None) -> list[str]:
    """Check the pin fields of a build sidecar against the pin manifest this version ships.

    With ``ev``, a user manifest the gate carries counts as well (:func:`cited_pins`).

    Parameters
    ----------
    doc : object
        The sidecar document (``source``, ``patch`` or a build record).
    ev : EvidenceView, optional
        The gate's evidence, for a carried user manifest.

    Returns
    -------
    list of str
        One problem per field that is not the manifest's; empty when the pin is known and
        every pin field it states agrees, and any carried manifest stands.
    """
    if not isinstance(doc, Mapping):
        return ["evidence is not a mapping"]
    cited = cited_pins(ev) if ev is not None else CitedPins(_source.load_pins())
    name = doc["pin"] if "pin" in doc else None
    pin = cited.pins.get(name) if isinstance(name, str) else None
    if pin is None:
        return cited.problems + [f"pin {name!r} is not in the shipped manifest"
                                 + (" nor in the run's user manifest" if cited.user else "")]
    problems = list(cited.problems)
    if cited.user and name not in cited.user:
        problems.append(f"pin {name} is a packaged pin, yet the gate carries a user manifest")
    shipped = _source.pin_fields(pin)
    return problems + [f"{k} {doc[k]!r} is not the manifest's {v!r} for pin {pin.name}"
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


def seam_launch_problems(stderr: bytes, executor: SeamExecutorRecord | None, *,
                         folder: str, program_digest: str | None) -> list[str]:
    """List why a seam launch's evidence does not show the program executed for every encode.

    The seam prints one line per ``encode`` call with the digests it computed
    (:func:`verifylib.runtime.contracts.seam.seam_encode_lines`); the executor recorded
    the calls it served with the digests it computed; whisper.cpp counts its own encoder
    runs (``encode time … / N runs``). All three must agree, the executor must have loaded
    the named program from the derived folder, no call may be refused, and each output
    must be ``[1, n_ctx/2, n_state]``: so an edited count or output digest shows.

    Parameters
    ----------
    stderr : bytes
        The launch's stored standard error.
    executor : SeamExecutorRecord or None
        The executor's record of the launch (None: the launch never reached it).
    folder : str
        The ``.mlmodelc`` path whisper.cpp derived from the launch's ``-m``.
    program_digest : str or None
        The tree digest of the program the evidence says was loaded (None: not checked).

    Returns
    -------
    list of str
        Empty when the launch ran the program for every encode.
    """
    text = stderr.decode("utf-8", "replace")
    out: list[str] = []
    if _seam.SEAM_BANNER not in text:
        out.append("no seam banner on stderr: not a seam launch")
    if executor is None:
        return out + ["the launch never reached the seam's executor"]
    if not executor.loaded or executor.program is None:
        return out + [f"the executor loaded no program ({executor.refusal})"]
    if executor.folder != folder:
        out.append(f"the executor loaded {executor.folder!r}, not the derived {folder!r}")
    if program_digest is not None and executor.program.digest != program_digest:
        out.append(f"the executor loaded program {executor.program.digest[:12]}..., not the "
                   f"audited {program_digest[:12]}...")
    lines = _seam.seam_encode_lines(text)
    calls = executor.calls
    if not calls:
        out.append("no encode call reached the executor")
    refused = [c for c in calls if c.refused is not None or c.output_sha256 is None]
    if refused:
        out.append(f"encode #{refused[0].index} refused: {refused[0].refused}")
    if len(lines) != len(calls):
        out.append(f"the seam printed {len(lines)} encode line(s), the executor served "
                   f"{len(calls)}")
    for line, call in zip(lines, calls):
        seen = (line.index, line.n_ctx, line.n_mel, line.input_sha256, line.output_sha256)
        served = (call.index, call.n_ctx, call.n_mel, call.input_sha256, call.output_sha256)
        if seen != served:
            out.append(f"encode #{call.index}: the seam's line and the executor's record "
                       "disagree (shape or digests)")
        shape = call.output_shape
        n = 1
        for d in shape:
            n *= d
        if len(shape) != 3 or shape[0] != 1 or 2 * shape[1] != call.n_ctx or n != line.count:
            out.append(f"encode #{call.index}: output {list(shape)} ({line.count} values "
                       f"copied) is not [1, n_ctx/2, n_state] for n_ctx {call.n_ctx}")
    timing = contracts.parse_encode_time(text)
    if timing is None or timing[1] != len(calls):
        out.append(f"whisper.cpp counted {None if timing is None else timing[1]} encoder "
                   f"run(s), the executor served {len(calls)}")
    if not executor.freed:
        out.append("the seam never freed its context")
    return out
