"""The gate registry: the gate table, status semantics and the verdict (docs/gates.md).

Ids are stable API. Reports, the receipt, the verdict and the exit code are all derived
from :data:`GATES`; nothing else in the package lists gates. The pass rule of each gate
lives in :mod:`verifylib.evidence.registry` (gate id -> pure judge), which judges
the evidence at run time and again inside ``verifylib verify``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Iterable, Mapping


class Status(str, enum.Enum):
    """How a gate ended."""

    PASS = "PASS"
    FAIL = "FAIL"
    NOT_RUN = "NOT_RUN"
    ERROR = "ERROR"


class Verdict(str, enum.Enum):
    """The run's overall standing."""

    ADMISSIBLE = "ADMISSIBLE"
    INCOMPLETE = "INCOMPLETE"
    REJECTED = "REJECTED"


class NotRunKind(str, enum.Enum):
    """The fixed set of reasons a gate may not run."""

    PLATFORM = "platform"
    PREREQUISITE = "prerequisite"
    DISABLED = "disabled"
    NOT_IMPLEMENTED = "not-implemented"


class Capability(str, enum.Enum):
    """What a host must offer for a gate to run physically."""

    ANY = "any"
    MACOS = "macos"
    MACOS_XCODE = "macos+xcode"
    MACOS_14_4 = "macos-14.4"


STAGES: tuple[str, ...] = ("01_build", "02_export", "03_canary", "04_parity", "05_wer",
                           "06_placement")


@dataclass(frozen=True)
class Gate:
    """One row of the gate table.

    Attributes
    ----------
    id : str
        Stable identifier, e.g. ``"build.ggml"``.
    stage : str
        Notebook stage that judges it.
    required : bool
        Whether ADMISSIBLE needs it to PASS.
    capability : Capability
        Host capability needed to run it physically.
    prerequisites : tuple of str
        Gates that must PASS before this one can run.
    pass_rule : str
        The rule in words, as shown in the report.
    implemented : bool
        False while this version has no code for the gate; only such a gate may be
        NOT_RUN(not-implemented).
    disabled_by : tuple of (str, object)
        Dotted parameter keys and the value that switches the gate off; only these may
        justify NOT_RUN(disabled).
    proves : str
        One plain-language sentence saying what the gate's PASS proves, for readers who do
        not know the rule's terms (the report's gate table shows it beside the rule).
    """

    id: str
    stage: str
    required: bool
    capability: Capability
    prerequisites: tuple[str, ...]
    pass_rule: str
    implemented: bool = True
    disabled_by: tuple[tuple[str, Any], ...] = ()
    proves: str = ""


# The gate ids, each written once, here: code names a gate by its constant, never by a
# literal (docs and tests may spell the ids out).
BUILD_SOURCE_IDENTITY = "build.source_identity"
BUILD_PATCH_EXACT = "build.patch_exact"
BUILD_GGML = "build.ggml"
BUILD_COREML = "build.coreml"
EXPORT_GGML_MODEL = "export.ggml_model"
EXPORT_CONTRACT = "export.contract"
EXPORT_COMPILE = "export.compile"
EXPORT_PAIR = "export.pair"
CANARY_LIFECYCLE_AB = "canary.lifecycle_ab"
CANARY_COREML_NEGATIVE = "canary.coreml_negative"
CANARY_COREML_POSITIVE = "canary.coreml_positive"
PARITY_PROGRAM = "parity.program"
PARITY_RUNTIME = "parity.runtime"
WER_GGML_VS_SOURCE = "wer.ggml_vs_source"
WER_HYBRID = "wer.hybrid"
PLACEMENT_PLAN = "placement.plan"
PARITY_PROGRAM_FP16 = "parity.program_fp16"
PARITY_RUNTIME_FP16 = "parity.runtime_fp16"
CANARY_SANITIZER = "canary.sanitizer"
CANARY_SEAM_NEGATIVE = "canary.seam_negative"
CANARY_SEAM_POSITIVE = "canary.seam_positive"
WER_SEAM = "wer.seam"


_CANARY_SWITCH = (("canary.enabled", False),)
_FP16_SWITCH = (("export.fp16", False),)
_SEAM_SWITCH = (("seam.enabled", False),)


def _g(id: str, stage: str, required: bool, cap: Capability, prereq: Iterable[str],
       rule_text: str, *, implemented: bool = True,
       disabled_by: Iterable[tuple[str, Any]] = ()) -> Gate:
    return Gate(id, stage, required, cap, tuple(prereq), rule_text, implemented,
                tuple(disabled_by), PROVES[id])


PROVES = {
    BUILD_SOURCE_IDENTITY: "The whisper.cpp source that was built is exactly the pinned "
                             "release.",
    BUILD_PATCH_EXACT: "The only change made to that source is the declared patch.",
    BUILD_GGML: "A whisper-cli without Core ML was built from it; its digest identifies every "
                  "GGML run below.",
    BUILD_COREML: "A whisper-cli with Core ML, and no silent fallback to GGML, was built from "
                    "the same source.",
    EXPORT_GGML_MODEL: "The model file whisper.cpp reads was written from this model and "
                         "loads in the built binary.",
    EXPORT_CONTRACT: "The Core ML encoder takes and returns exactly the tensors whisper.cpp "
                       "hands it.",
    EXPORT_COMPILE: "The encoder was compiled to the .mlmodelc at the path whisper.cpp "
                      "derives from its -m argument.",
    EXPORT_PAIR: "The Core ML encoder and the ggml file hold the same model, not merely "
                   "models of the same shape.",
    CANARY_LIFECYCLE_AB: "The patched build exits cleanly through the code path that "
                           "crashes unpatched builds.",
    CANARY_COREML_NEGATIVE: "Without its encoder the Core ML build fails loudly instead of "
                              "falling back to GGML.",
    CANARY_COREML_POSITIVE: "whisper.cpp loaded and ran the Core ML encoder in the measured "
                              "run.",
    PARITY_PROGRAM: "The converted encoder computes what the Hugging Face encoder computes, "
                      "within the fp32 policy.",
    PARITY_RUNTIME: "Core ML's own execution of the compiled encoder stays within the fp32 "
                      "policy.",
    WER_GGML_VS_SOURCE: "Converting the model to whisper.cpp's format costs no accuracy "
                          "beyond the policy.",
    WER_HYBRID: "Transcripts made with the Core ML encoder are as accurate as GGML's, and "
                  "never silently empty.",
    PLACEMENT_PLAN: "Core ML's plan says where each operation of the encoder runs (Neural "
                      "Engine, GPU or CPU) and what it costs.",
    PARITY_PROGRAM_FP16: "What fp16 precision costs the converted encoder, measured "
                           "(informational).",
    PARITY_RUNTIME_FP16: "What fp16 precision costs under Core ML's own execution, measured "
                           "(informational).",
    CANARY_SANITIZER: "AddressSanitizer sees the unpatched defect and no memory error in "
                        "the patched build (informational).",
    CANARY_SEAM_NEGATIVE: "whisper.cpp's own Core ML load-failure path, run on Linux through "
                            "verifylib's seam, fails closed in the patched build and crashes "
                            "unpatched (informational; never a Core ML result).",
    CANARY_SEAM_POSITIVE: "whisper.cpp's own Core ML path ran the exact encoder program, "
                            "executed by verifylib in Apple's place (informational; never a "
                            "Core ML result).",
    WER_SEAM: "What the encoder program costs in words through whisper.cpp's own decoder, "
                "fp32 and fp16, beside GGML's (informational; never a Core ML result).",
}
"""What each gate's PASS proves, in one sentence: :attr:`Gate.proves`, written once here."""


GATES: tuple[Gate, ...] = (
    _g(BUILD_SOURCE_IDENTITY, "01_build", True, Capability.ANY, [],
       "source tree's git tree id (git add -A -f) equals the pin's"),
    _g(BUILD_PATCH_EXACT, "01_build", True, Capability.ANY, [BUILD_SOURCE_IDENTITY],
       "before and after the build the tree differs from the pin by exactly the declared "
       "patch bytes, nothing else, ignored files included"),
    _g(BUILD_GGML, "01_build", True, Capability.ANY, [BUILD_PATCH_EXACT],
       "patched non-Core-ML whisper-cli built statically, SHA-256 recorded, system_info "
       "shows COREML = 0"),
    _g(BUILD_COREML, "01_build", True, Capability.MACOS_XCODE, [BUILD_PATCH_EXACT],
       "Core ML build, fallback OFF, own dir, SHA-256, COREML = 1"),
    _g(EXPORT_GGML_MODEL, "02_export", True, Capability.ANY, [BUILD_GGML],
       "ggml-model.bin written from the HF model and loaded by build.ggml's binary"),
    _g(EXPORT_CONTRACT, "02_export", True, Capability.ANY, [],
       "saved fp32 .mlpackage has logmel_data/output, float32, contract shapes from config"),
    _g(EXPORT_COMPILE, "02_export", True, Capability.MACOS_XCODE, [EXPORT_CONTRACT],
       ".mlmodelc compiled, placed at coreml_encoder_path(-m), tree digest recorded"),
    _g(EXPORT_PAIR, "02_export", True, Capability.ANY,
       [EXPORT_GGML_MODEL, EXPORT_CONTRACT],
       "pair-v1: the encoder (its ML program; a .mlmodelc through CompiledMLModel on macOS, "
       "elsewhere its program read from its model.mil) "
       "and the encoder rebuilt from the .bin's own weights agree on the real and on a seeded "
       "random log-mel, each above the floor for the .bin's ftype and the encoder's declared "
       "precision"),
    _g(CANARY_LIFECYCLE_AB, "03_canary", True, Capability.ANY, [BUILD_GGML],
       "patched build: N/N exit 3 + both markers, no signal (unpatched outcomes recorded, "
       "not gated)", disabled_by=_CANARY_SWITCH),
    _g(CANARY_COREML_NEGATIVE, "03_canary", True, Capability.MACOS,
       [BUILD_COREML, EXPORT_GGML_MODEL],
       "exit exactly 3 + load-failure + init-failure markers, no signal, first run only",
       disabled_by=_CANARY_SWITCH),
    _g(CANARY_COREML_POSITIVE, "03_canary", True, Capability.MACOS,
       [BUILD_COREML, EXPORT_COMPILE, CANARY_COREML_NEGATIVE],
       "the four load conditions (docs/runtime-contract.md §2.3) from the measured run; a "
       "warm-up that crashed, timed out, exited non-zero or fell back fails the gate",
       disabled_by=_CANARY_SWITCH),
    _g(PARITY_PROGRAM, "04_parity", True, Capability.ANY, [EXPORT_CONTRACT],
       "MIL program executed in float32 vs HF reference meets the fp32 policy (float64 "
       "shown beside)"),
    _g(PARITY_RUNTIME, "04_parity", True, Capability.MACOS, [EXPORT_COMPILE],
       "CompiledMLModel(.mlmodelc, ALL) vs HF reference meets the fp32 policy"),
    _g(WER_GGML_VS_SOURCE, "05_wer", True, Capability.ANY, [EXPORT_GGML_MODEL],
       "wer-v3 (wer-v1 and wer-v2 runs still verify): every run under the policy's decoding "
       "pin; per unit (WER in words, CER for languages written without spaces), corpus rate "
       "of the reference run on the ggml file's weights vs reference texts <= HF source's + "
       "0.05, each fixture normalized for its language; no GGML transcript empty where the "
       "source's is not"),
    _g(WER_HYBRID, "05_wer", True, Capability.MACOS,
       [CANARY_COREML_POSITIVE, WER_GGML_VS_SOURCE],
       "wer-v3 (wer-v1 and wer-v2 runs still verify): hybrid transcripts non-empty under the "
       "decoding pin, four load conditions "
       "per run, corpus rate per unit vs references <= min(GGML, source) + 0.05, no clip with "
       "hybrid-vs-GGML rate > 0.5"),
    _g(PLACEMENT_PLAN, "06_placement", True, Capability.MACOS_14_4, [EXPORT_COMPILE],
       "MLComputePlan loaded for the published .mlmodelc; per-op devices + costs recorded; "
       "cost shares sum to 1 +/- 0.01"),
    _g(PARITY_PROGRAM_FP16, "04_parity", False, Capability.ANY, [EXPORT_CONTRACT],
       "the fp16 variant's MIL program against policy fp16-v1 (informational)",
       disabled_by=_FP16_SWITCH),
    _g(PARITY_RUNTIME_FP16, "04_parity", False, Capability.MACOS, [EXPORT_COMPILE],
       "the fp16 variant's .mlmodelc against policy fp16-v1 (informational)",
       disabled_by=_FP16_SWITCH),
    _g(CANARY_SANITIZER, "03_canary", False, Capability.ANY, [BUILD_PATCH_EXACT],
       "AddressSanitizer builds (patched, unpatched) under the lifecycle trigger, 3 runs each: "
       "every unpatched run prints a sanitizer report (kind recorded), every patched run exits "
       "3 with both markers and none (informational; supports, never replaces, "
       "canary.lifecycle_ab)", disabled_by=_CANARY_SWITCH),
    _g(CANARY_SEAM_NEGATIVE, "03_canary", False, Capability.ANY,
       [BUILD_PATCH_EXACT, EXPORT_GGML_MODEL],
       "seam builds (whisper.cpp with WHISPER_USE_COREML against verifylib's three Core ML "
       "functions), the .mlmodelc absent: patched N/N exit 3 with the load-failure and "
       "init-failure markers, no signal (unpatched and its AddressSanitizer build recorded, "
       "not gated; informational, never canary.coreml_negative)",
       disabled_by=_CANARY_SWITCH + _SEAM_SWITCH),
    _g(CANARY_SEAM_POSITIVE, "03_canary", False, Capability.ANY,
       [EXPORT_CONTRACT, EXPORT_GGML_MODEL, CANARY_SEAM_NEGATIVE],
       "patched seam build with the audited encoder's program at the derived path: exit 0, "
       "COREML = 1, the load marker, no failure line, and every encode call executed by the "
       "seam's executor on the mel whisper.cpp handed over (counts and digests agree between "
       "the seam's lines, the executor's record and whisper.cpp's encode count; "
       "informational, never canary.coreml_positive)",
       disabled_by=_CANARY_SWITCH + _SEAM_SWITCH),
    _g(WER_SEAM, "05_wer", False, Capability.ANY, [CANARY_SEAM_POSITIVE, WER_GGML_VS_SOURCE],
       "every fixture transcribed by the patched seam build with the fp32 program (and the "
       "fp16 one when exported) under the WER policy's decoding pin, language and unit: each "
       "run exits 0 with the load marker and its encode calls executed and agreeing; rates "
       "vs references and vs GGML recorded per clip (informational, never wer.hybrid)",
       disabled_by=_SEAM_SWITCH),
)

BY_ID: dict[str, Gate] = {g.id: g for g in GATES}

GATE_TABLE = 3
"""The version of :data:`GATES`. It moves (with the package's minor version) whenever a gate
is added or removed or a row's stage, requirement, capability, prerequisites or switches
change; every version stays in ``gate_tables.json``, so ``verify`` judges a run under the
table it was made with. 1: the release at 5d1a7a1; 2: the one at 8ffc2c4 (``export.pair``);
3: the Core ML seam's three informational gates."""

_TABLES_FILE = "gate_tables.json"


def _table_rows() -> dict[int, list[dict[str, Any]]]:
    import json
    from pathlib import Path
    doc = json.loads((Path(__file__).with_name(_TABLES_FILE)).read_text(encoding="utf-8"))
    return {int(v): list(t["gates"]) for v, t in doc["tables"].items()}


def row_of(g: Gate) -> dict[str, Any]:
    """Return a gate's row as ``gate_tables.json`` keeps it (what a table version fixes).

    Parameters
    ----------
    g : Gate
        A row of a table.

    Returns
    -------
    dict
        ``id``, ``stage``, ``required``, ``capability``, ``prerequisites``, ``disabled_by``.
    """
    return {"id": g.id, "stage": g.stage, "required": g.required,
            "capability": g.capability.value, "prerequisites": list(g.prerequisites),
            "disabled_by": [list(d) for d in g.disabled_by]}


def table(version: int) -> tuple[Gate, ...]:
    """Return the gate table of a version, as a run made under it was judged.

    Parameters
    ----------
    version : int
        A gate-table version, 1 to :data:`GATE_TABLE`.

    Returns
    -------
    tuple of Gate
        Its rows in its order; each with today's rule text and proof sentence for its id
        (the words, not the judgement, which the rules registry gives).

    Raises
    ------
    KeyError
        For a version this package does not know.
    """
    if version == GATE_TABLE:
        return GATES
    rows = _table_rows()[version]
    return tuple(Gate(r["id"], r["stage"], r["required"], Capability(r["capability"]),
                      tuple(r["prerequisites"]), BY_ID[r["id"]].pass_rule,
                      disabled_by=tuple((k, v) for k, v in r["disabled_by"]),
                      proves=BY_ID[r["id"]].proves)
                 for r in rows)


def table_of_ids(gate_ids: Iterable[str]) -> int | None:
    """Return the gate-table version whose gates are exactly ``gate_ids`` (None: no table).

    A receipt made before receipts named their table (``verifylib-receipt/1``) is matched
    to its table this way: each version has a different set of gates.

    Parameters
    ----------
    gate_ids : iterable of str
        A receipt's gate ids.

    Returns
    -------
    int or None
    """
    want = set(gate_ids)
    found = [v for v, rows in _table_rows().items() if {r["id"] for r in rows} == want]
    return found[0] if len(found) == 1 else None

SEAM_GATES: frozenset[str] = frozenset({CANARY_SEAM_NEGATIVE, CANARY_SEAM_POSITIVE, WER_SEAM})
"""Gates whose launches run verifylib's Core ML seam (docs/runtime-contract.md §11): their
evidence may cite a seam binary, and no other gate's may."""

COREML_GATES: frozenset[str] = frozenset({BUILD_COREML, CANARY_COREML_NEGATIVE,
                                          CANARY_COREML_POSITIVE, WER_HYBRID})
"""Gates whose claims are about Apple's Core ML runtime in whisper.cpp: a seam binary or a
seam line in their evidence refuses them."""

PROGRAM_GATES: frozenset[str] = frozenset({EXPORT_PAIR, PARITY_PROGRAM})
"""Gates that execute the audited encoder's ML program. For a prebuilt ``.mlmodelc``
(parameter ``encoder.path``) these gates need macOS, where Core ML itself runs the compiled
model, unless the program was read from the folder's ``model.mil`` and executed by
verifylib's executor, which any OS can do (:func:`capability_of`'s ``program_from_text``)."""


def given_compiled_encoder(params: Mapping[str, Any]) -> str | None:
    """Return ``encoder.path`` when it names a compiled Core ML encoder, else None.

    Parameters
    ----------
    params : mapping
        A parameter tree (``Params.data``, or a receipt's bound parameters).

    Returns
    -------
    str or None
        The path of a given ``….mlmodelc``, or of upstream's download of one
        (``….mlmodelc.zip``, unpacked into the run); None for an ``.mlpackage`` or an
        exported encoder.
    """
    enc = params.get("encoder") if isinstance(params, Mapping) else None
    path = enc.get("path") if isinstance(enc, Mapping) else None
    if isinstance(path, str) and path.endswith((".mlmodelc", ".mlmodelc.zip")):
        return path
    return None


def capability_of(g: Gate, params: Mapping[str, Any], *,
                  program_from_text: bool = False) -> Capability:
    """Return the capability ``g`` needs under the bound parameters.

    Parameters
    ----------
    g : Gate
        A registry row.
    params : mapping
        The run's parameter tree (``Params.data``, or the receipt's bound parameters).
    program_from_text : bool
        The gate executes a compiled model's program read from its ``model.mil`` (the stage
        could read it; for a judged gate, its evidence says so): no Core ML is needed.

    Returns
    -------
    Capability
        ``g.capability``, raised to :attr:`Capability.MACOS` for a program gate when the
        audited encoder is a prebuilt ``.mlmodelc`` (or upstream's zip of one) whose program
        is not read from its text (and ``export.compile``, which then compiles nothing, needs
        macOS but no Xcode).
    """
    compiled = given_compiled_encoder(params) is not None
    if compiled and g.id in PROGRAM_GATES and g.capability is Capability.ANY \
            and not program_from_text:
        return Capability.MACOS
    if compiled and g.id == EXPORT_COMPILE:
        # Already compiled: placing it needs no compiler, and checking it needs Core ML.
        return Capability.MACOS
    return g.capability


def gate(gate_id: str) -> Gate:
    """Return the registry row for ``gate_id``.

    Raises
    ------
    KeyError
        If the id is not in the table.
    """
    try:
        return BY_ID[gate_id]
    except KeyError:
        raise KeyError(f"unknown gate id {gate_id!r}") from None


def stage_gates(stage: str) -> tuple[Gate, ...]:
    """Return the gates a stage judges, in table order."""
    if stage not in STAGES:
        raise KeyError(f"unknown stage {stage!r}")
    return tuple(g for g in GATES if g.stage == stage)


@dataclass(frozen=True)
class Judgement:
    """What a pass rule concluded from evidence: PASS or FAIL, and why."""

    status: Status
    detail: str

    def __post_init__(self) -> None:
        if self.status not in (Status.PASS, Status.FAIL):
            raise ValueError("a pass rule can only PASS or FAIL")

    @classmethod
    def of(cls, ok: bool, detail: str) -> "Judgement":
        """Build a judgement from a yes/no decision.

        Parameters
        ----------
        ok : bool
            Whether the rule held.
        detail : str
            Why, in words.

        Returns
        -------
        Judgement
            PASS if ``ok``, otherwise FAIL, with ``detail``.
        """
        return cls(Status.PASS if ok else Status.FAIL, detail)

    @classmethod
    def passed(cls, detail: str) -> "Judgement":
        """Return a PASS judgement with ``detail``."""
        return cls(Status.PASS, detail)

    @classmethod
    def failed(cls, detail: str) -> "Judgement":
        """Return a FAIL judgement with ``detail``."""
        return cls(Status.FAIL, detail)

    @property
    def ok(self) -> bool:
        """True iff the rule held (status PASS)."""
        return self.status is Status.PASS


def verdict(statuses: Mapping[str, Status | str], table: Iterable[Gate] | None = None
            ) -> Verdict:
    """Combine gate statuses into the verdict.

    Parameters
    ----------
    statuses : mapping
        Gate id to status; every gate of the table must be present.
    table : iterable of Gate, optional
        The gate table the statuses are of (default :data:`GATES`; see :func:`table`).

    Returns
    -------
    Verdict
        Over the required gates only: REJECTED if any FAILed or ERRORed, ADMISSIBLE if
        every one PASSed, otherwise INCOMPLETE. An informational gate is shown and
        verified but never moves the verdict.
    """
    rows = tuple(GATES if table is None else table)
    missing = [g.id for g in rows if g.id not in statuses]
    if missing:
        raise ValueError(f"statuses missing for gates: {', '.join(missing)}")
    st = {g.id: Status(statuses[g.id]) for g in rows if g.required}
    if any(s in (Status.FAIL, Status.ERROR) for s in st.values()):
        return Verdict.REJECTED
    if all(s is Status.PASS for s in st.values()):
        return Verdict.ADMISSIBLE
    return Verdict.INCOMPLETE


_SEVERITY = {Verdict.ADMISSIBLE: 0, Verdict.INCOMPLETE: 1, Verdict.REJECTED: 2}


def worst(verdicts: Iterable[Verdict | str]) -> Verdict:
    """Return the worst of several verdicts (a batch's overall standing)."""
    vs = [Verdict(v) for v in verdicts]
    if not vs:
        raise ValueError("no verdicts")
    return max(vs, key=_SEVERITY.__getitem__)


def exit_code(v: Verdict | str, require_admissible: bool = False) -> int:
    """Map a verdict to the CLI exit code (0 ADMISSIBLE/INCOMPLETE, 1 REJECTED).

    Parameters
    ----------
    v : Verdict
        The (worst) verdict.
    require_admissible : bool
        With ``--require admissible``, INCOMPLETE exits 1 too.
    """
    v = Verdict(v)
    if v is Verdict.REJECTED:
        return 1
    if v is Verdict.INCOMPLETE and require_admissible:
        return 1
    return 0


def disabling_key(g: Gate, params: Mapping[str, Any]) -> str | None:
    """Return the parameter key that switches ``g`` off in ``params``, or None.

    Only the keys the registry lists for the gate count, so a NOT_RUN(disabled) can be
    re-justified from the bound parameters alone.
    """
    for key, value in g.disabled_by:
        node: Any = params
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if type(node) is type(value) and node == value:
            return key
    return None
