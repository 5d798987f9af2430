"""Rules on the C++ sources that no compiler checks.

The core and the binding must not touch iostreams or locales: with a statically linked libstdc++
(GCC 13 on the GPU image) stream formatting inside the extension module crashed the interpreter on
every error path. Only the CLI (an executable, src/cli/) and the JSON edge it links (src/io/, never
part of the Python module) may use them."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = re.compile(
    r"#\s*include\s*<(sstream|iostream|iomanip|fstream|ostream|istream|locale)>"
    r"|std::(locale|[io]?stringstream|ostream|istream|cout|cerr|clog|put_money|imbue)\b"
)


def checked_sources() -> list[pathlib.Path]:
    files = [ROOT / "python" / "remat" / "_core.cpp"]
    for folder in ("src", "include"):
        files += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.suffix in {".cpp", ".hpp", ".h", ".inc"} and p.parts[-2] not in {"cli", "io"}
        ]
    return sorted(files)


def test_the_rule_sees_the_sources():
    names = {p.name for p in checked_sources()}
    assert {"_core.cpp", "problem.cpp", "eager_planner.cpp", "errors.hpp"} <= names


@pytest.mark.parametrize("path", checked_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_iostreams_or_locales(path):
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert not hits, "iostreams/locales in the core or the binding:\n" + "\n".join(hits)


def test_the_rule_catches_a_stream():
    assert FORBIDDEN.search("#include <sstream>")
    assert FORBIDDEN.search("  std::ostringstream out;")
    assert not FORBIDDEN.search('#include "common/text.hpp"')


# --- imports: no circle in python/remat, and eager/'s stages import one way ---------------------

PACKAGE = ROOT / "python" / "remat"


def module_names() -> dict[str, pathlib.Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: pathlib.Path, modules: set[str]) -> set[str]:
    """The modules of python/remat that `name` imports, anywhere in it: a function-level import
    closes a circle as surely as a top-level one, and one under `if TYPE_CHECKING:` is a
    dependency a reader and a type checker follow, hidden from the interpreter. `from P import
    x` names P.x when that is a module (the extension `_core` too), else P itself."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            targets = []
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in modules or alias.name == "_core" else source)
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_in_the_package():
    found = circles(import_graph())
    assert not found, "import circles in python/remat:\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_an_import_for_type_checking_counts(tmp_path):
    # eager/types.py imported policy and table, which imported it back under TYPE_CHECKING.
    path = tmp_path / "table.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .types import Plan\n"
    )
    found = imports_of("remat.eager.table", path, {"remat.eager.types", "remat.eager.table"})
    assert found == {"remat.eager.types"}


# eager/'s stages, lowest first: a module may import its own stage and those below it.
STAGES = ["remat.eager.types", "remat.eager.measuring", "remat.eager.planning", "remat.eager.run"]


def stage_of(name: str) -> int:
    """The stage of an eager module; the shared helpers at eager/'s top level sit with types."""
    for rank, stage in reversed(list(enumerate(STAGES))):
        if name == stage or name.startswith(stage + "."):
            return rank
    return 0


def test_eager_stages_import_one_way():
    graph = import_graph()
    upward = [
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name.startswith("remat.eager.")
        for target in targets
        if target.startswith("remat.eager.") and stage_of(target) > stage_of(name)
    ]
    assert not upward, "eager/ modules importing a later stage:\n" + "\n".join(sorted(upward))


def test_no_name_in_a_package_hides_one_of_its_modules():
    # remat.eager.plan (a function) hid the subpackage remat.eager.plan:
    # `import remat.eager.plan.planner as p` failed, as the docs wrote it.
    import importlib
    import pkgutil
    import types

    import remat

    hidden = []
    for info in pkgutil.walk_packages(remat.__path__, "remat."):
        parent_name, _, child = info.name.rpartition(".")
        module = importlib.import_module(info.name)
        found = getattr(importlib.import_module(parent_name), child, None)
        if not isinstance(found, types.ModuleType) or found is not module:
            hidden.append(f"{info.name} (hidden by {found!r})")
    assert not hidden, "\n".join(hidden)


def test_the_core_modules_are_seen():
    graph = import_graph()
    assert {"remat.eager.run.auto", "remat.eager.measuring.ops", "remat.compiled.solver"} <= set(
        graph
    )
    assert "remat.eager.types" in graph["remat.eager.measuring.menu"]


# --- size: no source file over 600 lines ---------------------------------------------------------

MAX_LINES = 600


def source_files() -> list[pathlib.Path]:
    files = list((ROOT / "src").rglob("*.cpp")) + list((ROOT / "src").rglob("*.hpp"))
    files += list((ROOT / "include").rglob("*.hpp")) + list(PACKAGE.rglob("*.py"))
    return sorted(files + [PACKAGE / "_core.cpp"])


def test_no_source_file_over_600_lines():
    tests = list((ROOT / "tests" / "python").glob("*.py"))  # and the Python tests
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in source_files() + tests
    }
    over = [f"{path} ({lines})" for path, lines in sorted(sizes.items()) if lines > MAX_LINES]
    assert not over, "over 600 lines: " + ", ".join(over)


# --- the auto_checkpoint handle is composed of parts, each with its own declared state ---------

RUN = PACKAGE / "eager" / "run"


def _classes(path: pathlib.Path) -> list[ast.ClassDef]:
    return [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)]


def _package_classes() -> set[str]:
    return {c.name for path in PACKAGE.rglob("*.py") for c in _classes(path)}


def _on_self(node: ast.AST, context: type[ast.expr_context]) -> set[str]:
    """The `self.x` names `node` stores (ast.Store) or reads (ast.Load)."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, context)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
    }


def test_the_handles_parts_inherit_from_no_class_of_the_package():
    ours = _package_classes()
    mixed = [
        f"{path.name}: {c.name}({base.id})"
        for path in sorted(RUN.glob("*.py"))
        for c in _classes(path)
        for base in c.bases
        if isinstance(base, ast.Name) and base.id in ours
    ]
    assert not mixed, f"built from the package's classes, not composed: {mixed}"


def test_each_part_sets_its_state_in_its_own_init_and_reads_only_its_own():
    for path in sorted(RUN.glob("*.py")):
        for c in _classes(path):
            init = next((n for n in c.body if getattr(n, "name", None) == "__init__"), None)
            if init is None:
                continue  # a dataclass or a class of methods only
            declared = _on_self(init, ast.Store) | {
                n.name for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            declared |= {n.target.id for n in c.body if isinstance(n, ast.AnnAssign)}
            declared |= {
                t.id
                for n in c.body
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            stored = _on_self(c, ast.Store) - _on_self(init, ast.Store)
            read = _on_self(c, ast.Load)
            assert stored <= declared, (
                f"{path.name}: {c.name} sets {sorted(stored - declared)} outside __init__"
            )
            assert read <= declared, (
                f"{path.name}: {c.name} reads undeclared {sorted(read - declared)}"
            )


def test_measure_uses_the_recorder_not_the_handle():
    """measure() records its step with the handle's parts (measured_step.py), not by building
    an auto_checkpoint handle with a budget no step could exceed."""
    for name in ("measurement.py", "measured_step.py"):
        tree = ast.parse((RUN / name).read_text())
        imported = {
            (node.module, alias.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        assert all(module != "auto" for module, _ in imported), (name, sorted(imported))
