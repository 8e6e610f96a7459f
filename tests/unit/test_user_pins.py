"""A pin the user brings: ``runtime.manifest`` read and refused, a carried copy judged, the
entry pin-check writes, the report's words. End to end (pin-check, stage 01, verify) in
tests/fake/test_user_pin.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT
from verifylib import canonical, params
from verifylib.errors import ParametersInvalid
from verifylib.evidence import identities
from verifylib.evidence.build.facts import BuildFacts, SourceFacts
from verifylib.evidence.judging import cited_pins, pin_problems
from verifylib.evidence.layout import USER_MANIFEST_EVIDENCE, USER_PATCH_EVIDENCE
from verifylib.evidence.records import EvidenceRef, EvidenceView
from verifylib.whispercpp import pin_entry
from verifylib.whispercpp.source import available_pins, load_user_pins

PATCH = b"diff --git a/src/whisper.cpp b/src/whisper.cpp\n"
TREE = "b" * 40


def user_manifest(folder: Path, name: str = "mine", patch: bytes = PATCH, *,
                  sha: str | None = None, patch_file: str = "mine.patch",
                  extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / patch_file).parent.mkdir(parents=True, exist_ok=True)
    (folder / patch_file).write_bytes(patch)
    manifest = folder / "user.yaml"
    manifest.write_text(
        f"pins:\n  {name}:\n    commit: '{'a' * 40}'\n    tree: '{TREE}'\n"
        f"    patch: {patch_file}\n    patch_sha256: '{sha or canonical.sha256_bytes(patch)}'\n"
        f"    touches: [src/whisper.cpp]\n{extra}")
    return manifest


def parameter_file(folder: Path, manifest: str, pin: str = "mine") -> Path:
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["runtime"]["pin"] = pin
    data["runtime"]["manifest"] = manifest
    data["fixtures"] = data["fixtures"][:1]  # jfk, from the runtime tree: no path to resolve
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ----------------------------------------------------------------------------- loading

def test_a_user_manifest_adds_its_pins_to_the_packaged_ones(tmp_path):
    manifest = user_manifest(tmp_path / "pins", extra="    not_run_here: ['Core ML: NOT_RUN']\n")
    pins = load_user_pins(manifest)
    assert list(pins) == ["mine"] and pins["mine"].not_run_here == ("Core ML: NOT_RUN",)
    assert list(available_pins(manifest)) == ["v1.8.5", "97c56f1", "v1.9.3", "mine"]
    assert list(available_pins(None)) == ["v1.8.5", "97c56f1", "v1.9.3"]
    # Relative to the parameter file; stored resolved, like every path of the parameters.
    p = params.load(parameter_file(tmp_path / "params", "../pins/user.yaml"))
    assert p.runtime.pin == "mine" and p.runtime.manifest == str(manifest.resolve())
    assert p["runtime"]["manifest"] == str(manifest.resolve())
    # Parameters recorded before the key existed read it as absent: the packaged pins only.
    old = params.load(ROOT / "parameters" / "tiny-en.yaml")
    assert old.runtime.manifest is None and "manifest" not in old["runtime"]


def test_the_packaged_loader_accepts_not_run_here_and_refuses_a_bad_one(tmp_path):
    good = user_manifest(tmp_path / "a", extra="    not_run_here: []\n")
    assert load_user_pins(good)["mine"].not_run_here == ()
    bad = user_manifest(tmp_path / "b", extra="    not_run_here: [1]\n")
    with pytest.raises(ParametersInvalid, match="not_run_here must be a list of non-empty"):
        load_user_pins(bad)


def _unparsable(folder: Path) -> Path:
    m = user_manifest(folder)
    m.write_text("pins:\n  mine: {commit: [\n")
    return m


def _wrong_digest(folder: Path) -> Path:
    return user_manifest(folder, sha="0" * 64)


def _clash(folder: Path) -> Path:
    return user_manifest(folder, name="V1.8.5")


def _missing_patch(folder: Path) -> Path:
    m = user_manifest(folder)
    (folder / "mine.patch").unlink()
    return m


def _missing_manifest(folder: Path) -> Path:
    m = user_manifest(folder)
    m.unlink()
    return m


def _patch_is_the_manifest(folder: Path) -> Path:
    folder.mkdir(parents=True)
    m = folder / "user.yaml"
    m.write_text(f"pins:\n  mine:\n    commit: '{'a' * 40}'\n    tree: '{TREE}'\n"
                 f"    patch: user.yaml\n    patch_sha256: '{'0' * 64}'\n"
                 "    touches: [src/whisper.cpp]\n")
    return m


REFUSALS = [
    (_unparsable, "not valid YAML"),
    (_wrong_digest, f"pin 'mine': patch_sha256 {'0' * 64} differs from the SHA-256 of patch "
                    "file"),
    (_clash, "pin 'V1.8.5': the name clashes with verifylib's packaged pin 'v1.8.5'"),
    (_missing_patch, "pin 'mine': patch file"),
    (_missing_manifest, "cannot read manifest"),
    (_patch_is_the_manifest, "pin 'mine': patch names the manifest itself"),
]


@pytest.mark.parametrize("make,message", REFUSALS, ids=[m.__name__ for m, _ in REFUSALS])
def test_a_bad_user_manifest_is_refused_in_one_line_naming_file_and_key(tmp_path, make,
                                                                        message, capsys):
    manifest = make(tmp_path / "pins")
    with pytest.raises(ParametersInvalid) as direct:
        load_user_pins(manifest)
    assert str(direct.value).startswith(f"{manifest}: ") and message in str(direct.value)
    f = parameter_file(tmp_path / "params", "../pins/user.yaml")
    with pytest.raises(ParametersInvalid) as exc:
        params.load(f)
    text = str(exc.value)
    assert text.startswith(f"{f}: key runtime.manifest: {manifest}"), text
    assert message in text and "\n" not in text
    # `verifylib run` exits 2 with that one line, before any work.
    from verifylib.cli import main as cli
    reports = tmp_path / "reports"
    assert cli.main(["run", str(f), "--reports", str(reports)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{f}: key runtime.manifest: " in err
    assert message in err
    assert not reports.exists()


def test_an_unknown_pin_names_both_manifests(tmp_path):
    manifest = user_manifest(tmp_path / "pins")
    f = parameter_file(tmp_path / "params", "../pins/user.yaml", pin="theirs")
    with pytest.raises(ParametersInvalid, match="key runtime.pin: unknown pin 'theirs'") as exc:
        params.load(f)
    assert str(manifest) in str(exc.value) and "mine" in str(exc.value)


# ----------------------------------------------------------------------------- judging the copy

def carried_run(tmp_path: Path, *, pin: str = "mine", bind: str | None = None,
                drop_patch: bool = False) -> EvidenceView:
    """A run directory holding a source document and the carried manifest, as stage 01 cites
    them (the copy at evidence/01_build/user-pins/)."""
    run = tmp_path / "run"
    folder = run / "evidence" / "01_build" / "user-pins"
    manifest = user_manifest(folder)
    p = available_pins(manifest)[pin]
    doc = {"pin": p.name, "pin_commit": p.commit, "pin_tree": p.tree, "computed_tree": p.tree,
           "origin": None, "path": None, "cached": None}
    src = run / "evidence" / "01_build" / "source.json"
    refs = [EvidenceRef("source", "evidence/01_build/source.json",
                        canonical.write_json(src, doc)),
            EvidenceRef(USER_MANIFEST_EVIDENCE, "evidence/01_build/user-pins/user.yaml",
                        canonical.sha256_file(manifest))]
    if not drop_patch:
        refs.append(EvidenceRef(USER_PATCH_EVIDENCE + "mine.patch",
                                "evidence/01_build/user-pins/mine.patch",
                                canonical.sha256_bytes(PATCH)))
    ids = {identities.RUNTIME_MANIFEST: bind or canonical.sha256_file(manifest)}
    return EvidenceView(run, refs, ids)


def test_a_carried_manifest_is_what_the_pin_is_judged_against(tmp_path):
    ev = carried_run(tmp_path)
    cited = cited_pins(ev)
    assert cited.user == {"mine"} and cited.problems == []
    assert pin_problems(ev.json("source"), ev) == []
    assert ev.unread() == []  # every carried file is read
    from verifylib.evidence import registry
    j = registry.RULES["build.source_identity"](ev)
    assert j.status.value == "PASS", j.detail
    # Without the copy the name means nothing to this version.
    assert pin_problems(ev.json("source")) == ["pin 'mine' is not in the shipped manifest"]


def test_a_carried_manifest_that_is_not_the_bound_one_fails(tmp_path):
    ev = carried_run(tmp_path, bind="0" * 64)
    problems = pin_problems(ev.json("source"), ev)
    assert len(problems) == 1 and "not the runtime.manifest.sha256 the gate binds" in problems[0]


def test_a_patch_the_carried_manifest_names_must_be_carried(tmp_path):
    ev = carried_run(tmp_path, drop_patch=True)
    assert pin_problems(ev.json("source"), ev) == [
        "the user manifest's patch mine.patch is not carried beside it"]


def test_a_packaged_pin_beside_a_carried_manifest_fails(tmp_path):
    ev = carried_run(tmp_path, pin="v1.8.5")
    assert pin_problems(ev.json("source"), ev) == [
        "pin v1.8.5 is a packaged pin, yet the gate carries a user manifest"]


def test_a_bound_manifest_that_is_not_carried_fails(tmp_path):
    ev = EvidenceView(tmp_path, [], {identities.RUNTIME_MANIFEST: "0" * 64})
    assert cited_pins(ev).problems == [
        "the gate binds runtime.manifest.sha256 but carries no user manifest"]


def test_a_replay_reads_the_manifest_the_run_carries(tmp_path):
    from verifylib.replay.rederive import carried_manifest
    user_manifest(tmp_path / "pins")
    p = params.load(parameter_file(tmp_path / "params", "../pins/user.yaml"))
    run = tmp_path / "run"
    assert carried_manifest(p, run) is p  # nothing carried: the parameters as recorded
    copy = user_manifest(run / "evidence" / "01_build" / "user-pins")
    again = carried_manifest(p, run)
    assert again.runtime.manifest == str(copy) and p.runtime.manifest != str(copy)
    packaged = params.load(ROOT / "parameters" / "tiny-en.yaml")
    assert carried_manifest(packaged, run) is packaged


# ----------------------------------------------------------------------------- what the report says

def test_the_build_facts_say_the_pin_is_user_declared():
    packaged = BuildFacts(source=SourceFacts("/src", "v1.8.5")).rows()
    assert packaged == [("source", "/src")]
    user = dict(BuildFacts(source=SourceFacts("/src", "mine", "evidence/01_build/user-pins/u.yaml",
                                              "d" * 64)).rows())
    assert user["pin"] == (
        "mine: USER-DECLARED pin, not one packaged with verifylib; declared by the manifest the "
        f"run carries, evidence/01_build/user-pins/u.yaml (sha256 {'d' * 64}), and judged "
        "against it")


def test_the_first_screen_says_the_pin_is_user_declared():
    from verifylib.views.gates import _card
    ids = {"runtime.pin": "mine", "runtime.commit": "a" * 40}
    assert _card({"identities": ids}, None, [])["pin"] == f"mine, commit {'a' * 12}"
    card = _card({"identities": {**ids, identities.RUNTIME_MANIFEST: "d" * 64}}, None, [])
    assert card["pin"].startswith(f"mine, commit {'a' * 12}; USER-DECLARED pin, not one "
                                  "packaged with verifylib")


# ----------------------------------------------------------------------------- pin-check's entry

def test_the_written_entry_reads_back_and_nothing_is_replaced(tmp_path):
    entry = pin_entry.PinEntry("mine", "a" * 40, TREE, PATCH, ("src/whisper.cpp",),
                               ("Core ML positive path: NOT_RUN(platform: needs macOS)",))
    manifest = tmp_path / "pins" / "user.yaml"
    pin_entry.check_destination(manifest, "mine")
    patch = pin_entry.write_manifest(entry, manifest, ["a header", "", "with: colons # too"])
    assert patch == tmp_path / "pins" / "mine.patch" and patch.read_bytes() == PATCH
    assert manifest.read_text().startswith("# a header\n#\n# with: colons # too\npins:\n")
    pin = load_user_pins(manifest)["mine"]
    assert (pin.commit, pin.tree, pin.patch_sha256, pin.not_run_here) == (
        "a" * 40, TREE, canonical.sha256_bytes(PATCH), entry.not_run_here)
    assert sorted(p.name for p in manifest.parent.iterdir()) == ["mine.patch", "user.yaml"]
    with pytest.raises(ParametersInvalid, match="exists already"):
        pin_entry.check_destination(manifest, "mine")
    with pytest.raises(ParametersInvalid, match="mine.patch: exists already"):
        pin_entry.check_destination(tmp_path / "pins" / "other.yaml", "mine")
    other = pin_entry.PinEntry("other", "a" * 40, TREE, PATCH, ("src/whisper.cpp",), ())
    (tmp_path / "pins" / "other.patch").write_bytes(b"theirs")
    with pytest.raises(ParametersInvalid, match="other.patch: exists already"):
        pin_entry.write_manifest(other, tmp_path / "pins" / "other.yaml", [])
    assert (tmp_path / "pins" / "other.patch").read_bytes() == b"theirs"
    assert not (tmp_path / "pins" / "other.yaml").exists()


@pytest.mark.parametrize("name,message", [
    ("v1.8.5", "clashes with verifylib's packaged pin 'v1.8.5'"),
    ("97C56F1", "clashes with verifylib's packaged pin '97c56f1'"),
    ("-bad", "name must be a string of letters"),
])
def test_a_name_pin_check_cannot_write_is_refused_first(tmp_path, name, message):
    with pytest.raises(ParametersInvalid, match=message):
        pin_entry.check_destination(tmp_path / "user.yaml", name)


def test_pin_check_refuses_a_write_it_cannot_complete_before_any_work(tmp_path):
    from verifylib.whispercpp.pincheck import ManifestRequest, PinCheckError, assess
    req = ManifestRequest(tmp_path / "user.yaml", "mine", "a" * 40)
    with pytest.raises(PinCheckError, match="drop --no-build"):
        assess(str(tmp_path), build=False, write=req)
    with pytest.raises(PinCheckError, match="name the upstream commit .* with --commit"):
        assess(str(tmp_path), write=ManifestRequest(tmp_path / "user.yaml"))
    with pytest.raises(PinCheckError, match="--commit 'abc' must be 40 lower-case hex"):
        assess(str(tmp_path), write=ManifestRequest(tmp_path / "user.yaml", commit="abc"))
    with pytest.raises(PinCheckError, match=f"--commit '{'b' * 40}' is not the candidate commit"):
        assess("a" * 40, write=ManifestRequest(tmp_path / "user.yaml", commit="b" * 40))
