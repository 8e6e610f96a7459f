"""The suite's session settings, tier markers and shared fixtures.

The session cache. Before anything imports verifylib, ``VERIFYLIB_CACHE`` is pointed at a
cache this test suite owns, never the user's ``~/.cache/verifylib``: ``$VERIFYLIB_TEST_CACHE``
when the developer sets it, else ``<repo>/.test-cache/`` (git-ignored). The folder is
stable, so CI and repeated local runs reuse one whisper.cpp build and one imported model
across the physical, simmac and notebooks tiers; child processes (``verifylib run``,
stage kernels, workers) inherit it. The unit tier does not even use that cache
(tests/unit/conftest.py gives each unit test a fresh one).

The tiers are the folders below ``tests/``; each test gets its tier's marker from its
folder (``unit``, ``fake``, ``simmac``, ``physical``, ``notebook`` for tests/notebooks), in
addition to the marks it carries itself.

The fixtures here are the ones several tiers share: the pinned whisper.cpp v1.8.5 source,
its patched work tree and builds, and the README's default audit, each made once per
session in the session cache; and the published run of the simulated Mac (``published``)
with its forged clones (``runs``), for the simmac and notebooks tiers.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import ROOT  # imports nothing from verifylib

os.environ["VERIFYLIB_CACHE"] = str(
    Path(os.environ.get("VERIFYLIB_TEST_CACHE") or ROOT / ".test-cache").expanduser().resolve())

# Under pytest-xdist the workers already fill the cores: a worker and the kernels and
# audits it starts use one math thread each (torch, numpy's BLAS), not one per core per
# process, which on these 2-core machines cost a fifth of the suite's CPU time in idle
# spinning. A developer's own setting wins.
# whisper-cli's own two threads (``-t 2``, OpenMP in ggml) wait at their barriers asleep
# rather than spinning while the other worker holds a core: measured on a jfk
# transcription with the other core busy, 2.1-2.3 CPU-s spinning, 1.8 passive, the same
# wall time.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Every process the session starts (pytest-xdist's workers, which run stages in-process,
# the audits and the kernels) gets its allocator's huge pages as ``verifylib run``'s stage
# kernels do: a fifth of the suite's CPU time was system time, most of it page faults of
# the executed encoders' activations.
from verifylib.numerics.memory import allocator_environment  # noqa: E402

os.environ.update(allocator_environment(os.environ))

import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402

from verifylib.whispercpp import build, source  # noqa: E402

TIERS = {"unit": "unit", "fake": "fake", "simmac": "simmac", "physical": "physical",
         "notebooks": "notebook"}
"""Tier folder -> the marker its tests get."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier (before ``-m`` selects), and refuse a test outside one."""
    here = Path(__file__).resolve().parent
    outside = []
    for item in items:
        try:
            rel = Path(item.path).resolve().relative_to(here)
        except ValueError:
            continue
        tier = TIERS.get(rel.parts[0]) if len(rel.parts) > 1 else None
        if tier is None:
            outside.append(item.nodeid)
        else:
            item.add_marker(tier)
    if outside:
        raise pytest.UsageError("tests outside a tier folder (tests/" + "|".join(TIERS)
                                + "/): " + ", ".join(sorted(outside)[:5]))
    _order_for_workers(items)


SHARED_FIXTURES = {"published": "simulated-mac", "runs": "simulated-mac",
                   "default_audit": "default-audit", "upstream_encoders": "upstream",
                   "whisper_quantize": "upstream", "tiny_en_export": "tiny-export"}
"""A session fixture that costs whole audits or conversions -> the worker group of its tests."""

MODULE_GROUPS = {
    "tests/notebooks/test_compare_notebook.py": "simulated-mac",
    "tests/notebooks/test_notebooks_explore.py": "simulated-mac",
    "tests/simmac/test_compare.py": "simulated-mac",
    "tests/simmac/test_runs.py": "simulated-mac",
    "tests/simmac/test_scenarios.py": "simulated-mac",
    "tests/notebooks/test_e2e.py": "default-audit",
    "tests/notebooks/test_forgeries_physical.py": "default-audit",
    "tests/notebooks/test_packaging.py": "default-audit",
    "tests/notebooks/test_replay.py": "default-audit",
    "tests/notebooks/test_report_document.py": "default-audit",
    "tests/notebooks/test_lab.py": "default-audit",
    "tests/notebooks/test_third_party.py": "upstream",
    "tests/physical/test_ggml_file.py": "upstream",
    "tests/physical/test_upstream_encoders.py": "upstream",
    "tests/physical/test_coreml_export.py": "tiny-export",
    "tests/physical/test_encoder_card.py": "tiny-export",
    "tests/physical/test_mil_compression.py": "tiny-export",
    "tests/physical/test_mil_exec.py": "tiny-export",
    "tests/physical/test_pair.py": "tiny-export",
    "tests/physical/test_seam.py": "tiny-export",
}
"""Test module -> its pytest-xdist worker group, for the modules that share a costly session
fixture (:data:`SHARED_FIXTURES`; collection refuses a module missing here); every other
module is a group of its own."""

GROUP_ORDER = ("simulated-mac", "default-audit", "upstream", "tiny-export", "notebooks",
               "simmac", "physical", "fake", "unit")
"""The order groups are handed to workers: the long ones first, the short ones to fill in."""


def worker_group(nodeid: str) -> str:
    """The pytest-xdist group of a test: its module's shared group, else its module."""
    module = nodeid.split("::", 1)[0]
    return MODULE_GROUPS.get(module, module)


def pytest_xdist_make_scheduler(config, log):
    """Schedule the README's two workers (``-n 2``) by :func:`worker_group`.

    Each worker makes the session fixtures of the tests it is given, so the tests of one
    costly session fixture (a published run, the default audit, upstream's encoders, the
    exported tiny.en) go to one worker together, and every other module is a group of its
    own (its module fixtures made once). Groups are handed out in collection order as
    workers free up (``--no-loadscope-reorder`` in pyproject.toml), and collection puts the
    long ones first (:func:`_order_for_workers`). The module table is used rather than
    xdist's ``xdist_group`` marks, which pytest 9.2's node ids no longer carry to the
    scheduler.
    """
    from xdist.scheduler import LoadScopeScheduling

    class _ByWorkerGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return _ByWorkerGroup(config, log)


def _order_for_workers(items) -> None:
    """Check :data:`MODULE_GROUPS` against the fixtures used, and put the long groups first.

    Without ``-n`` only the order changes.
    """
    wrong = []
    for item in items:
        for name, shared in SHARED_FIXTURES.items():
            defs = item._fixtureinfo.name2fixturedefs.get(name, ())
            if defs and defs[-1].scope == "session" and worker_group(item.nodeid) != shared:
                wrong.append(f"{item.nodeid.split('::', 1)[0]} uses {name}: "
                             f"MODULE_GROUPS must place it in {shared!r}")

    if wrong:
        raise pytest.UsageError("tests/conftest.py: " + "; ".join(sorted(set(wrong))))

    def rank(nodeid: str) -> int:
        group = worker_group(nodeid)
        folder = group if group in GROUP_ORDER else group.split("/")[1]
        return GROUP_ORDER.index(folder) if folder in GROUP_ORDER else len(GROUP_ORDER)

    order = sorted(range(len(items)), key=lambda i: (rank(items[i].nodeid), i))
    items[:] = [items[i] for i in order]


@pytest.fixture(autouse=True)
def _unbind_launch_ledger():
    """A StageContext binds its run directory's launch ledger for the whole process; a
    test must not leave it bound, or a later test's launches land in its run."""
    from verifylib.runtime import ledger
    ledger.bind(None)
    yield
    ledger.bind(None)


@dataclass(frozen=True)
class GgmlBuild:
    """The patched v1.8.5 work tree, its checks around the build, and the build."""

    patched: source.PatchedTree
    before: source.PatchCheck
    after: source.PatchCheck
    result: build.BuildResult


@pytest.fixture(scope="session")
def verifylib_cache() -> Path:
    """The session cache (``$VERIFYLIB_CACHE`` as set above)."""
    return Path(os.environ["VERIFYLIB_CACHE"])


@pytest.fixture(scope="session")
def v185_pin() -> source.Pin:
    """The repository's v1.8.5 pin."""
    return source.load_pins()["v1.8.5"]


@pytest.fixture(scope="session")
def v185_source(verifylib_cache) -> source.SourceTree:
    """whisper.cpp v1.8.5 from the pywhispercpp 1.5.1 sdist (downloaded once, then cached)."""
    return source.obtain_source(source.PYWHISPERCPP_V185, verifylib_cache)


@pytest.fixture(scope="session")
def v185_patched(v185_source, v185_pin, tmp_path_factory) -> source.PatchedTree:
    """A fresh patched work tree of v1.8.5 (private to this session)."""
    return source.prepare_patched_tree(v185_source.path, v185_pin, tmp_path_factory.mktemp("work"))


@dataclass(frozen=True)
class V185Builds:
    """The v1.8.5 whisper-cli variants, started together (two at a time) on first use."""

    pool: object
    patch_before: source.PatchCheck
    tree_before: str

    def result(self, variant: str) -> build.BuildResult:
        """The finished build of ``variant`` (waits for it)."""
        return self.pool.result(variant, _not_started, variant)


def _not_started(variant):
    raise AssertionError(f"variant {variant} was not started by v185_builds")


V185_VARIANTS = ("ggml", "ggml-asan", "ggml-unpatched-asan", "ggml-unpatched")
"""What ``verifylib run`` builds for the default parameters, in the order it starts them."""


@pytest.fixture(scope="session")
def v185_builds(v185_source, v185_patched, v185_pin, verifylib_cache):
    """Every whisper-cli variant of the default audit, built as stage 01 builds them.

    The four builds start together in a :class:`verifylib.whispercpp.pool.BuildPool` (two
    at a time, one shared ggml), with the options ``verifylib run`` uses for the default
    parameters, so the audits of the physical, simmac and notebooks tiers find them cached.
    The patched tree's exact diff and the pristine tree id are taken before they start.
    """
    from verifylib.whispercpp.pool import BuildPool
    before = source.check_patch_exact(v185_patched.path, v185_pin)
    tree_before = source.git_tree_id(v185_source.path)
    pool = BuildPool()
    sides = {"ggml": (v185_patched.path, v185_pin.patch_sha256),
             "ggml-unpatched": (v185_source.path, None),
             "ggml-unpatched-asan": (v185_source.path, None),
             "ggml-asan": (v185_patched.path, v185_pin.patch_sha256)}
    for variant in V185_VARIANTS:
        src, patch = sides[variant]
        pool.start(variant, build.build_whisper_cli, src, tree_id=v185_pin.tree,
                   patch_sha256=patch, variant=variant, options={"GGML_NATIVE": "ON"},
                   cache_dir=verifylib_cache, log=lambda _msg: None)
    yield V185Builds(pool=pool, patch_before=before, tree_before=tree_before)
    pool.close()


@pytest.fixture(scope="session")
def v185_ggml_build(v185_patched, v185_pin, v185_builds) -> GgmlBuild:
    """The static patched GGML whisper-cli, with exactness checks before and after."""
    before = v185_builds.patch_before
    assert before.ok, before.problems
    result = v185_builds.result("ggml")
    after = source.check_patch_exact(v185_patched.path, v185_pin)
    return GgmlBuild(patched=v185_patched, before=before, after=after, result=result)


@dataclass(frozen=True)
class UnpatchedBuild:
    """The unpatched static v1.8.5 whisper-cli, built from the pristine cached source."""

    source: source.SourceTree
    tree_before: str
    tree_after: str
    result: build.BuildResult


@pytest.fixture(scope="session")
def v185_unpatched_build(v185_source, v185_builds) -> UnpatchedBuild:
    """The "A" side of the lifecycle A/B: same cache and options as ``verifylib run``, so it
    is built once per machine (about 2 minutes). The pristine source folder is a cache
    entry: its tree id is taken before and after to prove the build wrote nothing into it."""
    before = v185_builds.tree_before
    result = v185_builds.result("ggml-unpatched")
    after = source.git_tree_id(v185_source.path)
    return UnpatchedBuild(source=v185_source, tree_before=before, tree_after=after, result=result)


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout installed into a folder of its own (tests/helpers/wheel.py)."""
    from tests.helpers.wheel import build_wheel, install_wheel
    return install_wheel(build_wheel(tmp_path_factory.mktemp("wheel")))


@pytest.fixture(scope="session")
def default_audit(tmp_path_factory, installed_wheel, v185_ggml_build, v185_asan_builds):
    """The README's default audit, run once per session as a user runs it.

    ``verifylib run`` with no argument, from the installed wheel (its own notebooks,
    patches, parameters and fixtures), in a folder that is not the checkout, so one audit
    serves the tests of the audit and of the installed package.

    Returns
    -------
    (subprocess.CompletedProcess, Path)
        The CLI's result and the published run directory (``./reports/tiny-en/<run id>``
        of that folder). Tests must not modify it (copy it with ``tests.helpers.forge.clone``
        first).
    """
    from tests.helpers.wheel import run_outside
    where = tmp_path_factory.mktemp("default-audit")
    res = run_outside(installed_wheel, where, "-m", "verifylib", "run", "--no-progress",
                      timeout=3600)
    assert res.returncode == 0, res.stdout + res.stderr
    reports = where / "reports"
    (run_dir,) = [p for p in (reports / "tiny-en").iterdir() if not p.name.startswith(".")]
    return res, run_dir


@dataclass(frozen=True)
class AsanBuilds:
    """Both AddressSanitizer builds of v1.8.5 (``canary.sanitizer``'s sides)."""

    unpatched: build.BuildResult
    patched: build.BuildResult


@pytest.fixture(scope="session")
def v185_asan_builds(v185_source, v185_patched, v185_pin, v185_builds) -> AsanBuilds:
    """The ``ggml-unpatched-asan`` and ``ggml-asan`` whisper-cli, with the options
    ``verifylib run`` uses for the default parameters (so shared with it through the cache;
    about 70 to 80 s each on 2 cores the first time). Both source folders are checked
    afterwards: the pristine tree id, the patched tree's exact diff."""
    unpatched = v185_builds.result("ggml-unpatched-asan")
    patched = v185_builds.result("ggml-asan")
    assert source.git_tree_id(v185_source.path) == v185_pin.tree
    assert source.check_patch_exact(v185_patched.path, v185_pin).ok
    return AsanBuilds(unpatched=unpatched, patched=patched)


@pytest.fixture(scope="session")
def published(tmp_path_factory):
    """The session's published run of the simulated Mac (:mod:`tests.helpers.published_runs`)."""
    from tests.helpers.published_runs import simulated_published_run
    return simulated_published_run(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def runs(published, tmp_path_factory):
    """The published run and its forged variants (one clone each per session: read only)."""
    from tests.helpers.forged_runs import checkpoint2, parity_not_run, three_blocks
    base = tmp_path_factory.mktemp("compare-runs")
    a = published.run_dir
    return {"a": a, "b": checkpoint2(a, base / "ckpt2"), "short": three_blocks(a, base / "short"),
            "not_run": parity_not_run(a, base / "not-run")}


@pytest.fixture(scope="session")
def upstream_encoders(verifylib_cache, v185_source):
    """whisper.cpp's own Core ML encoders of the default model (:mod:`tests.helpers.upstream`).

    ``plain`` (``convert-whisper-to-coreml.py``), ``ane`` (its ``--optimize-ane``) and ``h5``
    (``convert-h5-to-coreml.py`` on the Hugging Face folder), each converted by the pinned
    tree's own script functions in a child Python process with the pinned openai-whisper and
    ane_transformers sdists, and cached in the session cache by content key (cold: a pip
    download and about 15 s per package on 2 cores; warm: re-hashed only).

    Returns
    -------
    tests.helpers.upstream.UpstreamEncoders
        ``.paths[<path>]`` the packages, ``.made[<path>]`` what made each.
    """
    from tests.helpers.model_data import default_model_spec
    from tests.helpers.upstream import upstream_encoders as build
    from verifylib.models.intake import obtain_model

    info = obtain_model(default_model_spec(), verifylib_cache, log=lambda _msg: None)
    return build(verifylib_cache, v185_source, info)


@pytest.fixture(scope="session")
def quantize_build(v185_source, verifylib_cache, v185_unpatched_build):
    """whisper-quantize and ggml's static libraries and headers from the pristine v1.8.5
    source, built once per machine into the session cache (tests/helpers/quantize.py).

    After the unpatched whisper-cli: the quantizer links its ggml and its compiler cache
    holds libwhisper and ``common``, so only the quantizer's own file compiles."""
    from tests.helpers.quantize import build_quantize
    return build_quantize(v185_source.path, v185_source.tree_id, verifylib_cache,
                          log=lambda _msg: None)


@pytest.fixture(scope="session")
def whisper_quantize(quantize_build) -> Path:
    """The pinned tree's ``whisper-quantize`` binary (``IN OUT q5_0`` quantizes a model)."""
    return quantize_build.binary
