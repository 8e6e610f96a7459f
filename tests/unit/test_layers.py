"""The layering rules of docs/architecture.md, checked on the source (no imports run).

A module's *load-time* imports are the import statements executed when it is imported:
module level, including ``if``/``try`` blocks, but not function bodies (which the stages use
to load torch, coremltools or transformers only when a gate needs them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "verifylib"
HEAVY = ("torch", "coremltools", "transformers", "matplotlib", "jsonschema")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        is_pkg = MODULES[module].name == "__init__.py"
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_pkg else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    out = [base]
    # ``from . import x`` and ``from .pkg import mod`` import submodules too.
    out += [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return out


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


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _closure(module: str, *, load_time: bool) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for imp in _imports(m, load_time=load_time):
            # importing a.b.c runs a and a.b first
            parts = imp.split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                if name in MODULES and name not in seen:
                    todo.append(name)
                elif name not in MODULES:
                    seen.add(name)
    return seen


STAGES = sorted(m for m in MODULES if m.startswith("verifylib.stages.") )


def test_the_six_stage_modules_are_found():
    assert [m.rsplit(".", 1)[1] for m in STAGES] == ["build", "canary", "export", "parity",
                                                      "placement", "wer"]


@pytest.mark.parametrize("stage", STAGES)
def test_no_stage_imports_another(stage):
    others = {m for m in STAGES if m != stage}
    direct = _imports(stage, load_time=False)
    assert not direct & others, f"{stage} imports {sorted(direct & others)}"
    assert "verifylib.stages" not in direct - {stage}


def test_only_notebooks_import_the_stages():
    importers = sorted(m for m in MODULES if not m.startswith("verifylib.stages")
                       for imp in _imports(m, load_time=False)
                       if imp == "verifylib.stages" or imp.startswith("verifylib.stages."))
    assert importers == []


@pytest.mark.parametrize("validator", ["verifylib.evidence.receipt", "verifylib.evidence.rules.registry",
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
        banned = {"verifylib.runtime.runner", "verifylib.runtime.ledger", "verifylib.evidence.rules.registry", "subprocess"}
        assert not reached & banned, f"{v} reaches {sorted(reached & banned)}"
        assert not any(m.startswith("verifylib.stages") for m in reached), v
