"""Typed facts of stage 01 (build): its notebook's table, with named fields."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from verifylib.evidence.canary.schema import SIDES
from verifylib.evidence.gates import BUILD_COREML, BUILD_GGML, BUILD_SOURCE_IDENTITY
from verifylib.evidence.identities import RUNTIME_MANIFEST
from verifylib.evidence.layout import USER_MANIFEST_EVIDENCE
from verifylib.evidence.reading import has_rows, judged_evidence

if TYPE_CHECKING:
    from verifylib.evidence.records import EvidenceRef, GateRecord


def _system_info_line(text: str) -> str | None:
    from verifylib.runtime.contracts import SYSTEM_INFO_PREFIX

    return next((line.strip() for line in text.splitlines() if SYSTEM_INFO_PREFIX in line), None)


def backend_text(pinned: str | None, logged: str | None, probe: str) -> str:
    """Describe a build's ggml backend for the facts table.

    Parameters
    ----------
    pinned : str or None
        The backend its options pin (None: not recorded).
    logged : str or None
        The backends its probe launch logged choosing.
    probe : str
        The probe's name (``the probe``, ``whisper-bench``).

    Returns
    -------
    str
        E.g. ``cpu (pinned; the probe chose cpu)``, or that a run from before the pins
        records none.
    """
    if pinned is None:
        return "not recorded (a run from before ggml backends were pinned)"
    if logged is None:
        return f"{pinned} (pinned)"
    return f"{pinned} (pinned; {probe} chose {logged})"


@dataclass(frozen=True)
class SourceFacts:
    """The source folder ``build.source_identity`` judged, and where its pin comes from.

    Attributes
    ----------
    path : str or None
        The folder (None when the evidence names none).
    pin : str or None
        The pin's name.
    user_manifest : str or None
        For a user-declared pin: the run-relative path of the manifest the run carries
        (None: a pin packaged with verifylib).
    user_manifest_sha256 : str or None
        That manifest's SHA-256, the identity ``runtime.manifest.sha256``.
    """

    path: str | None
    pin: str | None = None
    user_manifest: str | None = None
    user_manifest_sha256: str | None = None

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of the source, in display order.

        Returns
        -------
        list of (str, object)
            The folder, and for a user-declared pin a row that says so.
        """
        out: list[tuple[str, Any]] = [("source", self.path)]
        if self.user_manifest is not None:
            out.append(("pin", user_pin_text(self.pin, self.user_manifest,
                                             self.user_manifest_sha256)))
        return out


def user_pin_text(pin: str | None, manifest: str, sha256: str | None) -> str:
    """Say plainly that a pin is user-declared, and which manifest declares it.

    Parameters
    ----------
    pin : str or None
        The pin's name.
    manifest : str
        The manifest the run carries (run-relative path).
    sha256 : str or None
        Its SHA-256.

    Returns
    -------
    str
        One sentence for the facts table.
    """
    return (f"{pin}: USER-DECLARED pin, not one packaged with verifylib; declared by the "
            f"manifest the run carries, {manifest} (sha256 {sha256}), and judged against it")


@dataclass(frozen=True)
class GgmlBuildFacts:
    """The GGML whisper-cli of ``build.ggml``, as the facts table shows it.

    Attributes
    ----------
    binary, sha256 : str
        The published binary and its digest.
    cached : bool
        Reused from the build cache.
    build_seconds : float
        Time spent building (or checking the cache).
    system_info : str or None
        The probe's ``system_info:`` line (None: absent).
    compiler : dict
        The compiler identity.
    ggml_backend : str or None
        The ggml backend its options pin (None: not recorded, a run from before the pins).
    probe_backend : str or None
        The backends the probe launch logged choosing (None: not recorded).
    """

    binary: str
    sha256: str
    cached: bool
    build_seconds: float
    system_info: str | None
    compiler: dict[str, Any]
    ggml_backend: str | None = None
    probe_backend: str | None = None

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of this build, in display order.

        Returns
        -------
        list of (str, object)
        """
        return [("binary", self.binary), ("sha256", self.sha256), ("cached", self.cached),
                ("build_seconds", self.build_seconds),
                ("system_info", self.system_info or "(absent)"),
                ("ggml backend", backend_text(self.ggml_backend, self.probe_backend,
                                              "the probe")),
                ("compiler", self.compiler)]


@dataclass(frozen=True)
class SidecarBuildFacts:
    """A build no gate judges (the unpatched and AddressSanitizer whisper-cli): built or not.

    Attributes
    ----------
    built : bool
        Whether it built.
    binary, sha256 : str or None
        The binary and its digest (None when it did not build).
    cached : bool or None
        Reused from the build cache.
    build_seconds : float or None
        Time spent.
    error : str or None
        Why it did not build (None when it built).
    ggml_backend : str or None
        The ggml backend its options pin (None: not built, or not recorded).
    """

    built: bool
    binary: str | None = None
    sha256: str | None = None
    cached: bool | None = None
    build_seconds: float | None = None
    error: str | None = None
    ggml_backend: str | None = None

    @classmethod
    def from_record(cls, ev: Mapping[str, Any]) -> "SidecarBuildFacts":
        """Read a sidecar build record (``{"built": True, ...}`` or ``{"built": False, "error"}``).

        Parameters
        ----------
        ev : mapping
            The record.

        Returns
        -------
        SidecarBuildFacts
        """
        if ev["built"]:
            return cls(True, ev["binary"], ev["sha256"], ev["cached"], ev["seconds"],
                       ggml_backend=ev.get("ggml_backend"))
        return cls(False, error=ev["error"])


@dataclass(frozen=True)
class CoremlBuildFacts:
    """The Core ML whisper-cli of ``build.coreml``, as the facts table shows it.

    Attributes
    ----------
    binary, sha256 : str
        The published binary and its digest.
    build_seconds : float
        Time spent.
    bench_system_info : str or None
        The ``system_info:`` line of the ``whisper-bench`` built alike (None: absent).
    ggml_backend : str or None
        The ggml backend its options pin, the hybrid decoder's (None: not recorded).
    bench_backend : str or None
        The backends the ``whisper-bench`` launch logged choosing (None: not recorded).
    """

    binary: str
    sha256: str
    build_seconds: float
    bench_system_info: str | None
    ggml_backend: str | None = None
    bench_backend: str | None = None

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of this build, in display order.

        Returns
        -------
        list of (str, object)
        """
        return [("Core ML binary", self.binary), ("Core ML sha256", self.sha256),
                ("Core ML build_seconds", self.build_seconds),
                ("whisper-bench system_info", self.bench_system_info or "(absent)"),
                ("Core ML ggml backend (hybrid decoder)",
                 backend_text(self.ggml_backend, self.bench_backend, "whisper-bench"))]


@dataclass(frozen=True)
class BuildFacts:
    """Stage 01's facts: what was built, from the evidence its gates cite and two sidecars.

    Each part is None (or, for ``asan``, absent) when its gate or sidecar gave nothing.
    :meth:`rows` gives the table the view and the report show.

    Attributes
    ----------
    source : SourceFacts or None
        The source folder (``build.source_identity``).
    ggml : GgmlBuildFacts or None
        The GGML build (``build.ggml``, when it built).
    unpatched : SidecarBuildFacts or None
        The unpatched build of the lifecycle A/B (``unpatched_build.json``).
    asan : dict of str to SidecarBuildFacts
        Side (``unpatched``, ``patched``) -> its AddressSanitizer build (``asan_builds.json``).
    coreml : CoremlBuildFacts or None
        The Core ML build (``build.coreml``, when it built).
    """

    source: SourceFacts | None = None
    ggml: GgmlBuildFacts | None = None
    unpatched: SidecarBuildFacts | None = None
    asan: dict[str, SidecarBuildFacts] = field(default_factory=dict)
    coreml: CoremlBuildFacts | None = None

    def rows(self) -> list[tuple[str, Any]]:
        """Return the (label, value) rows of the facts table, in display order.

        Returns
        -------
        list of (str, object)
            The source folder, the GGML build, the unpatched and AddressSanitizer builds,
            the Core ML build (each when there is one).
        """
        out: list[tuple[str, Any]] = []
        if self.source is not None:
            out += self.source.rows()
        if self.ggml is not None:
            out += self.ggml.rows()
        u = self.unpatched
        if u is not None and u.built:
            out += [("unpatched binary (lifecycle A/B only)", u.binary),
                    ("unpatched sha256", u.sha256), ("unpatched cached", u.cached),
                    ("unpatched build_seconds", u.build_seconds)]
            if u.ggml_backend is not None:
                out.append(("unpatched ggml backend", f"{u.ggml_backend} (pinned)"))
        elif u is not None:
            out.append(("unpatched build", f"failed: {u.error}"))
        for name in SIDES:
            if name not in self.asan:
                continue
            a, label = self.asan[name], f"{name} ASan (canary.sanitizer only)"
            if a.built:
                out += [(f"{label} sha256", a.sha256),
                        (f"{label} build_seconds", a.build_seconds),
                        (f"{label} cached", a.cached)]
                if a.ggml_backend is not None:
                    out.append((f"{label} ggml backend", f"{a.ggml_backend} (pinned)"))
            else:
                out.append((f"{label} build", f"failed: {a.error}"))
        if self.coreml is not None:
            out += self.coreml.rows()
        return out

    __bool__ = has_rows


def build_facts_from_evidence(run_dir: str | os.PathLike[str],
                              records: Mapping[str, GateRecord],
                              sidecars: Mapping[str, EvidenceRef | None] | None = None
                              ) -> BuildFacts:
    """Stage 01's facts, read from the evidence its gates cite (digest-checked).

    Parameters
    ----------
    run_dir : path-like
        The run directory.
    records : mapping
        Gate id -> :class:`verifylib.evidence.records.GateRecord` (at least the build gates).
    sidecars : mapping, optional
        ``"unpatched"`` / ``"asan"`` -> the :class:`verifylib.evidence.records.EvidenceRef` of the
        stage's two sidecars (``unpatched_build.json``, ``asan_builds.json`` of
        :mod:`verifylib.stages.artifacts`). No gate cites them; the stage passes the references
        it wrote, a published run the digests its receipt lists.

    Returns
    -------
    BuildFacts
        The source folder, the GGML build, the unpatched and AddressSanitizer builds, the
        Core ML build (each when it was built); :meth:`BuildFacts.rows` is the table.
    """
    from pathlib import Path

    from verifylib.evidence.records import EvidenceView

    source = ggml = unpatched = coreml = None
    asan: dict[str, SidecarBuildFacts] = {}
    v = judged_evidence(run_dir, records, BUILD_SOURCE_IDENTITY, "source")
    if v is not None:
        doc = v.json("source")
        carried = v.has(USER_MANIFEST_EVIDENCE)
        source = SourceFacts(doc["path"], doc.get("pin"),
                             v.path_of(USER_MANIFEST_EVIDENCE) if carried else None,
                             v.identities.get(RUNTIME_MANIFEST) if carried else None)
    v = judged_evidence(run_dir, records, BUILD_GGML, "build")
    if v is not None:
        ev = v.json("build")
        if ev.get("built"):
            ggml = GgmlBuildFacts(ev["binary"], ev["sha256"], ev["cached"], ev["seconds"],
                                  ev["probe"]["system_info_line"], ev["compiler"],
                                  ev.get("ggml_backend"), ev["probe"].get("backend"))
    refs = {k: r for k, r in (sidecars or {}).items() if r is not None}
    side = EvidenceView(Path(run_dir), list(refs.values())) if refs else None
    if side is not None and "unpatched" in refs:
        unpatched = SidecarBuildFacts.from_record(side.json(refs["unpatched"].name))
    if side is not None and "asan" in refs:
        builds = side.json(refs["asan"].name)
        asan = {name: SidecarBuildFacts.from_record(builds[name]) for name in SIDES
                if name in builds}
    v = judged_evidence(run_dir, records, BUILD_COREML, "coreml_build")
    if v is not None:
        ev = v.json("coreml_build")
        if ev.get("built"):
            coreml = CoremlBuildFacts(ev["binary"], ev["sha256"], ev["seconds"],
                                      _system_info_line(v.text("bench_stderr")),
                                      ev.get("ggml_backend"), ev["bench"].get("backend"))
    return BuildFacts(source, ggml, unpatched, asan, coreml)
