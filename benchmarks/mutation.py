"""Mutation testing of the decision code with mutmut (a developer tool, not run by CI).

What it answers: would the fast unit tests notice if the code that decides a gate's status
were wrong? mutmut rewrites one operator, constant or call at a time in the decision
functions and runs the tests that cover the mutated function; a mutant the tests still
pass on (a survivor) is a change of behaviour nobody would see.

The decision code, per module (``--modules``):

=========  ===================================================================================
contracts  the run classifiers (``classify_*``, ``record_problems``) and every helper they call
gates      ``verdict``, ``worst``, ``exit_code``
scoring    the wer-v1 judges (``judge_ggml_vs_source``, ``judge_hybrid``) and their helpers
parity     ``judge_parity``, ``recheck_measurement``, ``snr_from_energies``, ``cosine_from_sums``
           and their helpers
placement  ``judge_plan``
receipt    ``verify`` and its helpers
=========  ===================================================================================

"Helpers" are found, not listed: the module-level functions (and classes) of the same file
that a named function calls, transitively, read from the file's syntax tree at run time,
so a helper added later is mutated too.

The work happens in a snapshot: the package, the tests and the data they read are copied
into a scratch folder (other people may be editing the working tree while this runs, and
mutmut writes its ``mutants/`` folder beside the code it mutates). Before mutating, the
selected tests run once on the unmutated snapshot; a test that already fails there cannot
kill anything and would stop mutmut, so it is deselected and named in the report (a test
file that does not even import is dropped whole).

Usage::

    .venv/bin/pip install -e '.[mutation]'
    .venv/bin/python benchmarks/mutation.py                      # every module
    .venv/bin/python benchmarks/mutation.py --modules gates scoring
    .venv/bin/python benchmarks/mutation.py --exclude-tests tests/unit/test_boundaries.py

Prints, per module: mutants, killed, survived, timeout, no tests, score, then each
surviving mutant (``file:line`` and its diff); last, one JSON line per module. The score is
``(killed + timeout) / mutants``: a mutant that makes a test hang is detected too; a
mutant no selected test reaches counts as not killed.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MARKER_FILTER = "not physical and not notebook"
"""The physical whisper.cpp builds and the notebook runs take minutes; never mutation-tested."""

COPIED = ("verifylib", "tests", "parameters", "patches")
"""Folders the snapshot holds: the package, the tests, and the files the tests read."""

CLASS_SEP = "ǁ"
"""mutmut's separator in the mangled name of a method (``xǁClassǁmethod``)."""


@dataclass(frozen=True)
class ModuleSpec:
    """What to mutate in one module and which tests may kill it.

    Attributes
    ----------
    path : str
        The source file, relative to the project root.
    roots : tuple of str
        Decision functions (``name`` or ``Class.method``); their same-module callees are
        added by :func:`decision_functions`.
    tests : tuple of str
        Test files (relative to the project root) that exercise them.
    deselect : tuple of str
        Node ids never run here, e.g. a non-physical test that still loads a real model.
    """

    path: str
    roots: tuple[str, ...]
    tests: tuple[str, ...]
    deselect: tuple[str, ...] = ()


NEW_TESTS = ("tests/unit/test_boundaries.py", "tests/unit/test_mutants.py")

MODULES: dict[str, ModuleSpec] = {
    "contracts": ModuleSpec(
        "verifylib/runtime/contracts/classify.py",
        ("classify_negative", "classify_positive", "classify_lifecycle", "classify_ggml_positive",
         "record_problems", "termination"),
        # The checks of the contract against the upstream whisper.cpp sources (a 7 s tree
        # extraction per run) are in tests/physical/test_contracts.py, not selected here.
        ("tests/unit/test_contracts.py", "tests/fake/test_fake_runtime.py", *NEW_TESTS)),
    "contracts-argv": ModuleSpec(
        "verifylib/runtime/contracts/argv.py", ("check_cli_argv",),
        ("tests/unit/test_contracts.py", "tests/fake/test_fake_runtime.py", *NEW_TESTS)),
    "contracts-signals": ModuleSpec(
        "verifylib/runtime/contracts/signals.py", ("decode_signal",),
        ("tests/unit/test_contracts.py", "tests/unit/test_signals.py", *NEW_TESTS)),
    "gates": ModuleSpec(
        "verifylib/evidence/gates.py", ("verdict", "worst", "exit_code"),
        ("tests/unit/test_gates.py", *NEW_TESTS)),
    "scoring": ModuleSpec(
        "verifylib/evidence/wer/rules.py", ("judge_ggml_vs_source", "judge_hybrid"),
        ("tests/unit/test_scoring.py", *NEW_TESTS)),
    "parity": ModuleSpec(
        "verifylib/evidence/parity/rules.py", ("judge_parity", "recheck_measurement"),
        ("tests/unit/test_parity.py", *NEW_TESTS),
        # Each runs an export stage (the tests with the real tiny.en model are in
        # tests/physical/test_parity.py, not selected here).
        deselect=("tests/unit/test_parity.py::test_export_rule_fails_closed_on_edited_evidence",
                  "tests/unit/test_parity.py::test_compile_rule_requires_the_derived_path")),
    "placement": ModuleSpec(
        "verifylib/evidence/placement/rules.py", ("judge_plan",), ("tests/unit/test_placement.py", *NEW_TESTS)),
    "parity_numbers": ModuleSpec(
        "verifylib/numerics/parity.py", ("snr_from_energies", "cosine_from_sums"),
        ("tests/unit/test_parity.py", *NEW_TESTS)),
    "receipt": ModuleSpec(
        "verifylib/evidence/receipt.py", ("verify",),
        ("tests/unit/test_receipt.py", "tests/unit/test_receipt_units.py",
         "tests/unit/test_receipt_golden.py", "tests/unit/test_forgeries.py", *NEW_TESTS)),
}


# ----------------------------------------------------------------------------- what to mutate

def decision_functions(source: str, roots: tuple[str, ...]) -> list[str]:
    """The functions to mutate: ``roots`` and the module-level code they call, transitively.

    Parameters
    ----------
    source : str
        The module's source text.
    roots : tuple of str
        ``name`` for a function, ``Class.method`` for a method.

    Returns
    -------
    list of str
        Sorted qualified names (``name`` or ``Class.method``) that exist in the module. A
        class named in a body (e.g. constructed) brings all its methods.
    """
    tree = ast.parse(source)
    funcs: dict[str, ast.AST] = {}
    classes: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs[node.name] = node
        elif isinstance(node, ast.ClassDef):
            classes[node.name] = []
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    funcs[f"{node.name}.{item.name}"] = item
                    classes[node.name].append(f"{node.name}.{item.name}")
    todo = [r for r in roots if r in funcs]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for sub in ast.walk(funcs[name]):
            if isinstance(sub, ast.Name):
                if sub.id in funcs:
                    todo.append(sub.id)
                elif sub.id in classes:
                    todo.extend(classes[sub.id])
    return sorted(seen)


def mangled(module: str, qualname: str) -> str:
    """mutmut's key prefix of a function: ``pkg.mod.x_name`` or ``pkg.mod.xǁClassǁname``."""
    if "." in qualname:
        cls, name = qualname.split(".", 1)
        return f"{module}.x{CLASS_SEP}{cls}{CLASS_SEP}{name}"
    return f"{module}.x_{qualname}"


def module_name(path: str) -> str:
    return path[:-3].replace("/", ".")


# ----------------------------------------------------------------------------- the snapshot

def make_snapshot(dest: Path, rev: str | None) -> None:
    """Copy the package, tests and test data into ``dest`` (from the work tree or a commit)."""
    if rev:
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, *COPIED],
                             check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(dest, filter="data")
        return
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPIED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=ignore)


def _toml_list(values) -> str:
    return "[" + ", ".join(json.dumps(str(v)) for v in values) + "]"


def write_config(dest: Path, mutate: list[str], tests: list[str], deselect: list[str]) -> None:
    """Write the snapshot's ``pyproject.toml``: the project's pytest settings and mutmut's.

    mutmut 3 reads ``[tool.mutmut]`` from the ``pyproject.toml`` of the folder it runs in
    (keys checked against mutmut 3.8's ``configuration.py``): ``source_paths`` is copied
    into ``mutants/``, ``only_mutate`` restricts mutation to the named files,
    ``pytest_add_cli_args_test_selection`` is the test selection of the clean and stats
    runs, ``pytest_add_cli_args`` is added to every pytest run (the marker filter and the
    deselected node ids), and ``also_copy`` brings the data the tests read.
    """
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    ini = project.get("tool", {}).get("pytest", {}).get("ini_options", {})
    lines = ["[tool.pytest.ini_options]"]
    if "markers" in ini:
        lines.append(f"markers = {_toml_list(ini['markers'])}")
    lines.append('testpaths = ["tests"]')
    args = ["-m", MARKER_FILTER, "-p", "no:cacheprovider"]
    for node in deselect:
        args += ["--deselect", node]
    lines += ["", "[tool.mutmut]",
              'source_paths = ["verifylib"]',
              f"only_mutate = {_toml_list(mutate)}",
              f"also_copy = {_toml_list(['parameters', 'patches'])}",
              f"pytest_add_cli_args_test_selection = {_toml_list(tests)}",
              f"pytest_add_cli_args = {_toml_list(args)}",
              # The snapshot is no git checkout; mutmut's change detection has nothing to read.
              "use_git_change_detection = false",
              ""]
    (dest / "pyproject.toml").write_text("\n".join(lines), encoding="utf-8")


PREFLIGHT = textwrap.dedent("""
    import json, sys
    import pytest

    class Failed:
        def __init__(self):
            self.tests, self.files = [], []

        def pytest_collectreport(self, report):
            if report.failed:
                self.files.append(report.nodeid)

        def pytest_runtest_logreport(self, report):
            if report.failed and report.nodeid not in self.tests:
                self.tests.append(report.nodeid)

    failed = Failed()
    code = pytest.main(sys.argv[2:], plugins=[failed])
    with open(sys.argv[1], "w") as fh:
        json.dump({"exit": int(code), "tests": failed.tests, "files": failed.files}, fh)
""")


def preflight(work: Path, tests: list[str], deselect: list[str], env: dict) -> tuple[list, list, dict]:
    """Run the selection once, unmutated; return (tests kept, node ids to deselect, report).

    A test that fails on unmutated code is no evidence about a mutant and would make
    mutmut refuse to start: it is deselected and reported. A file that fails to import is
    dropped.
    """
    out = work / "preflight.json"
    argv = [sys.executable, "-c", PREFLIGHT, str(out), "-q",
            "-m", MARKER_FILTER, "-p", "no:cacheprovider", *tests]
    for node in deselect:
        argv += ["--deselect", node]
    subprocess.run(argv, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = json.loads(out.read_text())
    broken_files = {f for f in report["files"] if f}
    kept = [t for t in tests if t not in broken_files]
    failing = [t for t in report["tests"] if t.split("::")[0] in kept]
    return kept, failing, report


def check_import_target(work: Path, env: dict) -> None:
    """Refuse to go on if ``import verifylib`` would not load the snapshot's copy.

    The venv's editable install points at the working tree; the snapshot must win, or
    every mutant would look killed-by-nothing (no test reaches the mutated copy).
    """
    got = subprocess.run([sys.executable, "-c", "import verifylib; print(verifylib.__file__)"],
                         cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    if not Path(got.strip()).resolve().is_relative_to(work.resolve()):
        raise SystemExit(f"import verifylib loads {got.strip()}, not the snapshot in {work}")


# ----------------------------------------------------------------------------- results

@dataclass
class ModuleResult:
    """Outcome of one module's mutants."""

    module: str
    functions: list[str]
    counts: dict = field(default_factory=dict)
    survivors: list[dict] = field(default_factory=list)
    dropped_files: list[str] = field(default_factory=list)
    deselected_failing: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def score(self) -> float | None:
        if not self.total:
            return None
        return (self.counts.get("killed", 0) + self.counts.get("timeout", 0)) / self.total

    def as_json(self) -> dict:
        c = self.counts
        return {"module": self.module, "mutants": self.total, "killed": c.get("killed", 0),
                "survived": c.get("survived", 0), "timeout": c.get("timeout", 0),
                "no_tests": c.get("no tests", 0),
                "other": sum(v for k, v in c.items()
                             if k not in ("killed", "survived", "timeout", "no tests")),
                "score": None if self.score is None else round(self.score, 4),
                "functions": self.functions,
                "survivors": [s["where"] + " " + s["name"] for s in self.survivors],
                "dropped_test_files": self.dropped_files,
                "deselected_failing_tests": self.deselected_failing,
                # One mutmut run serves every module asked for: this is its wall time.
                "run_seconds": round(self.seconds, 1), "error": self.error}


def _source_line(work: Path, path: str, qualname: str, diff: str) -> str:
    """``file:line`` of the first line a mutant changes, in the snapshot's source."""
    src = (work / path).read_text(encoding="utf-8")
    tree = ast.parse(src)
    start = None
    cls, _, name = qualname.rpartition(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and cls and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    start = item.lineno
        elif (not cls and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
              and node.name == name and node in tree.body):
            start = node.lineno
    if start is None:
        return f"{path}:?"
    old = None
    for line in diff.splitlines():
        m = re.match(r"@@ -(\d+)", line)
        if m:
            old = int(m.group(1))
            continue
        if old is None or line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            return f"{path}:{start + old - 1}"
        if line.startswith("+"):
            continue
        old += 1
    return f"{path}:{start}"


def collect(work: Path, name: str, spec: ModuleSpec, functions: list[str],
            result: ModuleResult) -> None:
    """Read mutmut's per-file results for ``spec`` and fill ``result`` (counts, survivors)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    meta = json.loads((work / "mutants" / (spec.path + ".meta")).read_text())
    prefixes = {mangled(module_name(spec.path), f): f for f in functions}
    here = os.getcwd()
    os.chdir(work)   # mutmut's readers resolve mutants/ against the working directory
    try:
        for key, code in sorted(meta["exit_code_by_key"].items(),
                                key=lambda kv: (kv[0].rpartition("__mutmut_")[0],
                                                int(kv[0].rpartition("__mutmut_")[2]))):
            fn = prefixes.get(key.rpartition("__mutmut_")[0])
            if fn is None:
                continue
            status = status_by_exit_code[code]
            result.counts[status] = result.counts.get(status, 0) + 1
            if status in ("survived", "no tests"):
                diff = get_diff_for_mutant(key, path=spec.path)
                result.survivors.append({"name": key, "status": status, "diff": diff,
                                         "where": _source_line(work, spec.path, fn, diff)})
    finally:
        os.chdir(here)


def run_modules(names: list[str], args) -> list[ModuleResult]:
    """Mutate ``names`` in one snapshot and one mutmut run; return a result per module."""
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="verifylib-mutation-"))
    work.mkdir(parents=True, exist_ok=True)
    if any(work.iterdir()):
        raise SystemExit(f"{work} is not empty")
    results: list[ModuleResult] = []
    started = time.monotonic()
    try:
        make_snapshot(work, args.rev)
        env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1")
        check_import_target(work, env)
        excluded = set(args.exclude_tests or ())
        tests: list[str] = []
        deselect: list[str] = []
        globs: list[str] = []
        for name in names:
            spec = MODULES[name]
            source = (work / spec.path).read_text(encoding="utf-8")
            functions = decision_functions(source, spec.roots)
            results.append(ModuleResult(name, functions))
            globs += [mangled(module_name(spec.path), f) + "__mutmut_*" for f in functions]
            tests += [t for t in spec.tests if t not in tests and t not in excluded
                      and (work / t).is_file()]
            deselect += [d for d in spec.deselect if d not in deselect]
        print(f"snapshot {work} ({'commit ' + args.rev if args.rev else 'working tree'}); "
              f"tests: {' '.join(tests)}", flush=True)
        kept, failing, report = preflight(work, tests, deselect, env)
        dropped = sorted(set(tests) - set(kept))
        for r in results:
            r.dropped_files, r.deselected_failing = dropped, failing
        if dropped or failing:
            print(f"WARNING: failing on the unmutated snapshot, left out: files {dropped}, "
                  f"tests {failing}", flush=True)
        if not kept:
            raise RuntimeError("no test file of the selection imports")
        write_config(work, [MODULES[n].path for n in names], kept, deselect + failing)
        log = work / "mutmut.log"
        with open(log, "w") as fh:
            cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children),
                   *globs]
            proc = subprocess.run(cmd, cwd=work, env=env, stdout=fh, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"mutmut exited {proc.returncode}; end of {log}:\n{tail}")
        for name, r in zip(names, results):
            collect(work, name, MODULES[name], r.functions, r)
    except Exception as exc:  # noqa: BLE001 - reported per module, the other modules still print
        for r in results:
            r.error = f"{type(exc).__name__}: {exc}"
        if not results:
            raise
    finally:
        elapsed = time.monotonic() - started
        for r in results:
            r.seconds = elapsed
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    return results


def print_report(results: list[ModuleResult]) -> None:
    """The human-readable table and survivors, then one JSON line per module."""
    print()
    print(f"{'module':<11}{'mutants':>8}{'killed':>8}{'survived':>9}{'timeout':>8}"
          f"{'no tests':>9}{'score':>8}")
    for r in results:
        c = r.counts
        score = "-" if r.score is None else f"{100 * r.score:.1f}%"
        print(f"{r.module:<11}{r.total:>8}{c.get('killed', 0):>8}{c.get('survived', 0):>9}"
              f"{c.get('timeout', 0):>8}{c.get('no tests', 0):>9}{score:>8}")
    for r in results:
        if r.error:
            print(f"\n{r.module}: ERROR {r.error}")
        if r.survivors:
            print(f"\n{r.module}: {len(r.survivors)} mutant(s) not killed")
            for s in r.survivors:
                print(f"\n  {s['where']}  {s['name']} ({s['status']})")
                print(textwrap.indent(s["diff"], "    "))
    print()
    for r in results:
        print(json.dumps(r.as_json(), sort_keys=True))


def main(argv=None) -> int:
    """Parse the command line, run mutmut on each chosen module, print the report.

    Returns
    -------
    int
        0, or 1 when a module could not be mutation-tested.
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="+", choices=sorted(MODULES),
                    default=["contracts", "gates", "scoring", "parity", "receipt"],
                    help="modules to mutate (default: all but placement)")
    ap.add_argument("--exclude-tests", nargs="*", metavar="PATH",
                    help="test files to leave out of the selection (e.g. to score without "
                         "the newest tests)")
    ap.add_argument("--rev", help="snapshot this git commit instead of the working tree")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--workdir", help="empty folder for the snapshot (kept); default: a "
                                      "temporary folder, removed afterwards")
    ap.add_argument("--keep", action="store_true", help="keep the temporary snapshot")
    args = ap.parse_args(argv)
    # One snapshot and one mutmut run for all modules: the stats run (which tests reach
    # which function) is shared, and each mutant still runs only the tests that reach it.
    results = run_modules(list(dict.fromkeys(args.modules)), args)
    print_report(results)
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
