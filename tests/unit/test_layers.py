"""The layering rules of docs/architecture.md, checked on the source (no imports run).

A module's *load-time* imports are the import statements executed when it is imported:
module level, including ``if``/``try`` blocks, but not function bodies (which the stages use
to load torch, coremltools or transformers only when a gate needs them). Its *imports* are
every import statement it holds, lazy ones included.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "verifylib"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
HEAVY = ("torch", "coremltools", "transformers", "matplotlib", "jsonschema")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}

# The layers of docs/architecture.md#layers, lowest first: a module imports only modules of
# its own layer or a lower one (lazy imports included).
LAYERS = (
    ("foundation", r"verifylib\.(errors|canonical|resources|locks|user_yaml|evidence\.gates"
                   r"|evidence\.identities)|verifylib\.evidence"),
    ("runtime", r"verifylib\.runtime(\..+)?"),
    ("domain", r"verifylib\.(numerics|models)(\..+)?|verifylib\.whispercpp(?!\.pincheck)(\..+)?"),
    ("parameters", r"verifylib\.(params|param_files)"),
    ("records", r"verifylib\.evidence\.(records|layout|failures)"),
    # Each stage's evidence folder (documents, rules, facts or result) and the kernel they
    # share: fields, the judging helpers, reading helpers, the receipt's schema, the registry.
    ("judges", r"verifylib\.evidence\.(build|export|canary|parity|wer|placement)(\..+)?"
               r"|verifylib\.evidence\.(fields|judging|reading|receipt_schema|registry|run_record"
               r"|stage_report)"),
    ("validator", r"verifylib\.evidence\.(receipt|attest|runs|accounting|declarations)"),
    ("stages", r"verifylib\.stages(\..+)?"),
    ("views", r"verifylib\.views(\..+)?"),
    # The package root is the front door: its lazy ``open_run`` reaches the run reader.
    ("driver", r"verifylib|verifylib\.(batch|compare|cli|replay)(\..+)?"
               r"|verifylib\.(notebook|__main__)"
               r"|verifylib\.whispercpp\.pincheck"),
)
def _layer(module: str) -> int:
    found = [i for i, (_, pat) in enumerate(LAYERS) if re.fullmatch(pat, module)]
    assert len(found) == 1, f"{module} is in layers {found}; docs/architecture.md places each once"
    return found[0]


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        is_pkg = MODULES[module].name == "__init__.py"
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_pkg else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    # ``from . import x`` and ``from .pkg import mod`` import submodules too. Naming only
    # submodules of a package uses none of the package's own names: its module-level code
    # runs (the load-time closure follows it), its functions' lazy imports do not.
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return subs if subs and len(subs) == len(node.names) else [base] + subs


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _imports(module: str, *, load_time: bool) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                found.update(_resolve(module, node))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if not load_time:
                    visit(ast.iter_child_nodes(node))
            elif isinstance(node, ast.If) and load_time and _is_type_checking(node.test):
                continue
            else:
                visit(ast.iter_child_nodes(node))

    visit(tree.body)
    return found


def _direct(module: str) -> set[str]:
    """The verifylib modules a module names in its import statements (lazy ones too)."""
    out = set()
    for imp in _imports(module, load_time=False):
        # ``from verifylib.x import name`` names verifylib.x; a submodule when it is one.
        while imp and imp not in MODULES and "." in imp:
            imp = imp.rsplit(".", 1)[0]
        if imp in MODULES and imp != module:
            out.add(imp)
    return out


def _closure(module: str, *, load_time: bool) -> set[str]:
    # A module named in an import is followed as asked (lazy imports too unless load_time);
    # the parent packages that importing it runs first are followed at load time only:
    # importing a.b.c executes a's and a.b's module-level code, not their functions.
    seen: set[str] = set()
    todo = [(module, load_time)]
    followed: set[tuple[str, bool]] = set()
    while todo:
        m, lt = todo.pop()
        if (m, lt) in followed:
            continue
        followed.add((m, lt))
        seen.add(m)
        for imp in _imports(m, load_time=lt):
            parts = imp.split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                if name not in MODULES:
                    seen.add(name)
                    continue
                named = name == imp or (i == len(parts) - 1 and imp not in MODULES)
                todo.append((name, lt if named else True))
    return seen


STAGE_NAMES = ["build", "canary", "export", "parity", "placement", "wer"]
STAGES = [f"verifylib.stages.{s}" for s in STAGE_NAMES]
PLUMBING = ["verifylib.stages.artifacts", "verifylib.stages.context",
            "verifylib.stages.prebuilt", "verifylib.stages.pair", "verifylib.stages.seam"]


def test_the_six_stage_modules_and_their_plumbing_are_found():
    found = sorted(m for m in MODULES if m.startswith("verifylib.stages."))
    assert found == sorted(STAGES + PLUMBING)


def test_at_most_ten_modules_at_the_top_of_the_package():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= 10, top


def test_no_top_level_module_shares_its_name_with_a_package():
    modules = {m.rsplit(".", 1)[1] for m in MODULES if m.count(".") == 1
               and MODULES[m].name != "__init__.py"}
    packages = {Path(*m.split(".")).name for m, p in MODULES.items() if p.name == "__init__.py"}
    nested = {m.rsplit(".", 1)[1] for m in MODULES if m.count(".") >= 2}
    assert not modules & packages
    assert not modules & nested, "a top-level module and a module of a package share a name"


def test_every_module_has_one_layer():
    for m in MODULES:
        _layer(m)


def test_imports_point_down_the_layers():
    upward = sorted((m, imp) for m in MODULES for imp in _direct(m)
                    if _layer(imp) > _layer(m))
    assert upward == []


def test_no_import_cycle_counting_lazy_imports():
    graph = {m: _direct(m) for m in MODULES}
    state: dict[str, int] = {}
    cycles = []

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_no_module_imports_another_modules_private_name():
    taken = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                    "verifylib")):
                taken += [(m, a.name) for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert taken == []


RULE_MODULES = re.compile(r"verifylib\.evidence\.(\w+\.rules|judging|registry)")


def test_every_judge_lives_in_a_rules_module():
    outside = []
    for m, path in MODULES.items():
        if RULE_MODULES.fullmatch(m):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    node.name.startswith(("judge_", "_judge_", "_rule_"))):
                outside.append(f"{m}.{node.name}")
    assert outside == []


def test_the_run_id_format_has_one_owner():
    owners = sorted(m for m, p in MODULES.items()
                    if re.search(r"\\d\{8\}T\\d\{6\}Z|%Y%m%dT%H%M%SZ", p.read_text(encoding="utf-8")))
    assert owners == ["verifylib.evidence.layout"]


def test_executors_come_from_the_registry_and_ray_loads_only_when_chosen():
    reg = "verifylib.batch.executors"
    assert not {"verifylib.batch.local", "verifylib.batch.ray"} & _direct(reg)
    assert "ray" not in {m.split(".")[0] for m in _closure(reg, load_time=False)}
    text = MODULES[reg].read_text(encoding="utf-8")
    assert '"verifylib.batch.local:' in text and '"verifylib.batch.ray:' in text


@pytest.mark.parametrize("stage", STAGES)
def test_no_stage_imports_another(stage):
    others = {m for m in STAGES if m != stage}
    direct = _imports(stage, load_time=False)
    assert not direct & others, f"{stage} imports {sorted(direct & others)}"
    assert "verifylib.stages" not in direct - {stage}


# Replay re-runs the stages' own code in process (docs/architecture.md, "How a run flows"):
# the one driver besides the notebooks that calls into a stage module.
STAGE_CALLERS = ("verifylib.replay.",)


def test_only_notebooks_and_replay_import_the_stages():
    importers = sorted(m for m in MODULES if not m.startswith("verifylib.stages")
                       and not m.startswith(STAGE_CALLERS)
                       for imp in _imports(m, load_time=False)
                       if imp in STAGES)
    assert importers == []


@pytest.mark.parametrize("validator", ["verifylib.evidence.receipt",
                                       "verifylib.evidence.registry",
                                       "verifylib.evidence.attest"])
def test_the_validator_reaches_no_stage_even_indirectly(validator):
    reached = _closure(validator, load_time=False)
    assert not {m for m in reached if m.startswith("verifylib.stages")}


@pytest.mark.parametrize("stage", STAGES + ["verifylib.notebook"])
def test_a_stage_kernel_loads_no_heavy_library_at_import(stage):
    reached = _closure(stage, load_time=True)
    heavy = sorted({m.split(".")[0] for m in reached} & set(HEAVY))
    assert heavy == [], f"importing {stage} loads {heavy}; import them where they are used"


def test_views_only_display():
    views = [m for m in MODULES if m.startswith("verifylib.views")]
    assert views, "verifylib/views/ holds the display code"
    for v in views:
        reached = _closure(v, load_time=False)
        banned = {"verifylib.runtime.runner", "verifylib.runtime.ledger", "subprocess"}
        assert not reached & banned, f"{v} reaches {sorted(reached & banned)}"
        assert not any(RULE_MODULES.fullmatch(m) for m in reached), v
        assert not any(m.startswith("verifylib.stages") for m in reached), v


def _documented_tree() -> set[str]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split('<a id="tree"></a>', 1)[1].split("```", 2)[1]
    names, stack = set(), []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        entry = line.split("#", 1)[0].split()
        if not entry:
            continue
        name = entry[0]
        stack[depth:] = [name.rstrip("/").removesuffix(".py")]
        if name != "__init__.py":
            names.add(".".join(stack))
    return names


def test_the_documented_tree_is_the_package():
    assert _documented_tree() == set(MODULES)
