"""The package's structure as a test: layers only import downward, no import cycles, no module
over about 400 lines. The layers are declared here, once (docs/design/README.md mirrors them).

Every ``import`` of the package counts, wherever it stands: at module level, inside functions
(an import placed in a function to dodge a cycle is still that cycle) and in ``TYPE_CHECKING``
blocks (a type named from a higher layer means the type lives in the wrong layer). Imports
spelled as strings (``importlib.import_module``, the backend registry) are not seen.

Two granularities: modules (``halluprobe.check.claims``) for cycles between modules, and units
(the prefixes of ``LAYERS``, e.g. ``readouts``) for layer order and for cycles between units
(``corrections`` -> ``readouts.logits`` with ``readouts.apply`` -> ``corrections`` is a cycle
between two units even though no module imports itself back). A package's ``__init__`` that
imports its own submodules is not an edge between units; Python's implicit import of a parent
package when a submodule is imported is not modelled.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "halluprobe"
PACKAGE = "halluprobe"

# Bottom to top. A unit names a module or a package (all below it); the longest matching unit
# decides a module's layer. A module may import its own layer or any layer below, never above.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "records", "records_scores", "records_audit")),
    ("leaf", ("", "formatting", "files", "jsonl", "tomlfile")),  # "": the package's __init__ (version, re-exports)
    ("data", ("rundir", "benchmarks", "readouts", "metrics")),
    ("backends", ("backends", "ask", "clip_signal", "tiny", "tiny_qwen2vl")),
    # the question builders that ask a model (Auto-Probe, PROVE) sit with the runner
    ("run", ("runner", "run_setup", "shards", "diagnose", "scoring", "imports", "benchmarks.autoprobe", "benchmarks.prove", "captions", "captions.chair", "captions.amber", "captions.objhal", "judging")),
    ("present", ("audit", "corrections_table", "captions.comparison", "provenance", "provenance_sources", "provenance_judged", "hallusion_table", "tables", "study_table", "check", "report", "dataset_scores", "benchmark_scores", "rule_changes", "literature", "mmhal_table")),
    ("entry", ("demo", "demo_captions", "cli")),
)

# Edges between units that break the rules today, in modules other helpers are changing under
# issue 21 (arch-readout moves corrections.py under readouts/). Each entry is (importer unit,
# imported unit). The test fails when an entry no longer occurs: the lead removes it after the
# merge, and the set ends empty.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()

# No module over about 400 lines, none exempt (tiny.py's Qwen2-VL builder is tiny_qwen2vl.py); the
# templates are not Python. OVERSIZED_ALLOWED would list a module allowed over the limit for now (the test
# fails once a listed module has shrunk under it, so the list only shrinks); it is empty: the
# last entry, benchmarks/synthetic.py, was split (its class table is synthetic_classes.py).
MAX_LINES = 400
EXEMPT: frozenset[str] = frozenset()
OVERSIZED_ALLOWED: frozenset[str] = frozenset()

# An import inside a function hides an edge from a reader of the module's top; outside cli/
# (whose verbs import their library modules late to keep `halluprobe --help` fast) one is allowed
# only where it defers something heavy or optional. Every halluprobe module imports its heavy
# third-party packages (torch, transformers, matplotlib, jinja2, nltk, spacy, scipy.stats, httpx, pyarrow, pandas)
# inside the functions that use them, so importing a halluprobe module is always cheap, and the
# list below, (importing module, imported module) -> why, is the whole of what is left.
LOCAL_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}
MAX_LOCAL_IMPORTS = 40


def _modules() -> dict[str, Path]:
    """Dotted name relative to the package ('' for its __init__) -> file."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: Mapping[str, Path]) -> str:
    """The module a dotted name (relative to the package) is, or lies in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _imported(module: str, path: Path, modules: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """Every module of the package that ``module`` imports, anywhere in its file, with the line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    yield _resolve(alias.name.removeprefix(PACKAGE).lstrip("."), modules), node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = ".".join(p for p in (PACKAGE, package, base) if p)
            if base != PACKAGE and not base.startswith(PACKAGE + "."):
                continue
            relative = base.removeprefix(PACKAGE).lstrip(".")
            for alias in node.names:
                candidate = f"{relative}.{alias.name}".lstrip(".")
                yield (candidate if candidate in modules else _resolve(relative, modules)), node.lineno


def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: first line}, self-imports left out."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in _imported(module, path, modules):
            if target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def _unit(module: str) -> str:
    """The declared unit a module belongs to (the longest matching prefix)."""
    best = None
    for _, units in LAYERS:
        for unit in units:
            if (unit == "" and module == "") or (unit and (module == unit or module.startswith(unit + "."))):
                if best is None or len(unit) > len(best):
                    best = unit
    assert best is not None, f"{_dotted(module)} is in no layer: add it to LAYERS (and docs/design/README.md)"
    return best


def _dotted(module: str) -> str:
    return ".".join(p for p in (PACKAGE, module) if p)


def _layer(unit: str) -> int:
    return next(i for i, (_, units) in enumerate(LAYERS) if unit in units)


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _unit_edges(graph: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, str], str]:
    """(importer unit, imported unit) -> one example 'module:line -> module', between distinct
    units; a package's __init__ importing below itself is not an edge between units."""
    edges: dict[tuple[str, str], str] = {}
    for module, targets in graph.items():
        for target, line in targets.items():
            source_unit, target_unit = _unit(module), _unit(target)
            if source_unit == target_unit:
                continue
            edges.setdefault((source_unit, target_unit), f"{_dotted(module)}:{line} -> {_dotted(target)}")
    return edges


def test_every_module_is_in_a_declared_layer() -> None:
    for module in _graph():
        _unit(module)  # asserts with the module's name


def test_no_import_cycle_between_modules() -> None:
    graph = _graph()
    cycles = _cycles({m: set(t) for m, t in graph.items()})
    assert not cycles, "import cycles (counting imports inside functions): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycle_between_units() -> None:
    edges = _unit_edges(_graph())
    unit_graph: dict[str, set[str]] = {}
    for source, target in edges:
        if (source, target) not in KNOWN_VIOLATIONS:
            unit_graph.setdefault(source, set()).add(target)
    cycles = _cycles(unit_graph)
    details = [" <-> ".join(c) + " (" + ", ".join(edges[(a, b)] for a in c for b in c if (a, b) in edges) + ")" for c in cycles]
    assert not cycles, "import cycles between units: " + "; ".join(details)


def test_layers_only_import_downward() -> None:
    edges = _unit_edges(_graph())
    upward = {(s, t): where for (s, t), where in edges.items() if _layer(t) > _layer(s)}
    unexpected = {edge: where for edge, where in upward.items() if edge not in KNOWN_VIOLATIONS}
    assert not unexpected, "imports from a lower layer to a higher one: " + "; ".join(
        f"{s} ({LAYERS[_layer(s)][0]}) -> {t} ({LAYERS[_layer(t)][0]}): {where}" for (s, t), where in sorted(unexpected.items())
    )


def test_known_violations_still_occur() -> None:
    """An entry of KNOWN_VIOLATIONS that no longer occurs is removed (the set only shrinks)."""
    edges = _unit_edges(_graph())
    stale = sorted(edge for edge in KNOWN_VIOLATIONS if edge not in edges)
    assert not stale, f"KNOWN_VIOLATIONS lists edges that are gone, remove them: {stale}"


def _line_counts() -> dict[str, int]:
    return {
        str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(SRC.rglob("*.py"))
        if str(path.relative_to(SRC)) not in EXEMPT
    }


def test_no_module_over_about_400_lines() -> None:
    counts = _line_counts()
    assert counts, "no modules found"
    over = {name: n for name, n in counts.items() if n > MAX_LINES and name not in OVERSIZED_ALLOWED}
    assert not over, f"modules over {MAX_LINES} lines (split them): {over}"


def test_oversized_allow_list_only_shrinks() -> None:
    counts = _line_counts()
    stale = sorted(name for name in OVERSIZED_ALLOWED if counts.get(name, 0) <= MAX_LINES)
    assert not stale, f"OVERSIZED_ALLOWED lists modules now within {MAX_LINES} lines (or gone), remove them: {stale}"


def test_the_walk_sees_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    """The parser itself: a function-local import, a TYPE_CHECKING import and a relative import
    are all edges, and a cycle made only of function-local imports is found."""
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import leaf\n")
    (package / "sub" / "leaf.py").write_text("def f():\n    from halluprobe.top import g\n")
    (package / "top.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from halluprobe.sub.leaf import f\n"
        "def g():\n    import halluprobe.sub.leaf\n"
    )
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    seen = {m: {t for t, _ in _imported(m, p, modules)} for m, p in modules.items()}
    assert seen["sub.leaf"] == {"top"} and seen["sub"] == {"sub.leaf"} and seen["top"] == {"sub.leaf"}
    assert _cycles({m: t - {m} for m, t in seen.items()}) == [["sub.leaf", "top"]]


def test_the_slow_guard_sees_model_builders_by_code_not_by_file_name() -> None:
    """tests/conftest.py's guard: what reaches a model builder, and what does not."""
    import conftest

    def reaches_model(source: str) -> bool:
        return any(conftest._is_model(n) for n in conftest._names(ast.parse(source)))

    assert reaches_model("from halluprobe.tiny import demo_photos")
    assert reaches_model("import pytest\ntorch = pytest.importorskip('torch')")
    assert reaches_model("def t():\n    from halluprobe.backends.hf.backend import HFBackend\n    HFBackend('m')")
    assert reaches_model("def t(tmp_path):\n    build_tiny_qwen2vl(tmp_path, None)")
    assert reaches_model("model = transformers.AutoModelForImageTextToText.from_pretrained(path)")
    assert not reaches_model("from transformers import AutoTokenizer\nAutoTokenizer.from_pretrained(path)")
    assert not reaches_model("from halluprobe.backends.scripted import ScriptedBackend\nimport torchvision_free")


def _top_names(path: Path) -> tuple[set[str], set[str]]:
    """Names a module defines at its top level, and names it only imports there."""
    defined: set[str] = set()
    imported: set[str] = set()

    def scan(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imported.update(a.asname or a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                scan(node.body)
                scan(node.orelse)
            elif isinstance(node, ast.Try):
                scan(node.body)
                for handler in node.handlers:
                    scan(handler.body)

    scan(ast.parse(path.read_text(encoding="utf-8")).body)
    return defined, imported - defined


def _reexports(files: list[Path], modules: Mapping[str, Path]) -> list[str]:
    """Every `from halluprobe.X import N` (and, in the package, `x.N` on a module imported as x) where X is a
    module that does not define N but imports it itself. A package's __init__ may gather names."""
    tops = {m: _top_names(p) for m, p in modules.items()}
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        module_aliases: dict[str, str] = {}
        uses: list[tuple[str, str, int]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                source = node.module.removeprefix(PACKAGE).lstrip(".")
                for alias in node.names:
                    submodule = f"{source}.{alias.name}".lstrip(".")
                    if submodule in modules:
                        module_aliases[alias.asname or alias.name] = submodule
                    else:
                        uses.append((source, alias.name, node.lineno))
        for node in ast.walk(tree) if path.is_relative_to(SRC) else ():  # tests patch names where they are used
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in module_aliases:
                uses.append((module_aliases[node.value.id], node.attr, node.lineno))
        for source, name, line in uses:
            if source not in modules or modules[source].name == "__init__.py":
                continue
            defined, imported = tops[source]
            if name not in defined and name in imported:
                found.append(f"{path.relative_to(SRC.parent.parent)}:{line} takes {name} from {_dotted(source)}, which only imports it")
    return found


def test_every_import_names_the_module_that_defines_the_name() -> None:
    modules = _modules()
    tests = SRC.parent.parent / "tests"
    found = _reexports([*SRC.rglob("*.py"), *tests.glob("*.py")], modules)
    assert not found, "imports through a re-export (import from the defining module):\n" + "\n".join(found)


def _function_local_imports() -> dict[tuple[str, str], int]:
    """(module, imported module) -> line, for imports of the package inside functions, outside cli/."""
    modules = _modules()
    found: dict[tuple[str, str], int] = {}
    for module, path in modules.items():
        if module == "cli" or module.startswith("cli."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and node is not function:
                    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    for name in names:
                        if name == PACKAGE or name.startswith(PACKAGE + "."):
                            found.setdefault((_dotted(module), name), node.lineno)
    return found


def test_function_local_imports_outside_the_cli_defer_something() -> None:
    found = _function_local_imports()
    unlisted = sorted(f"{m}:{line} imports {t}" for (m, t), line in found.items() if (m, t) not in LOCAL_IMPORTS_ALLOWED)
    assert not unlisted, "imports inside functions outside cli/ (move them to the top, or list why in LOCAL_IMPORTS_ALLOWED):\n" + "\n".join(unlisted)
    assert len(LOCAL_IMPORTS_ALLOWED) <= MAX_LOCAL_IMPORTS
    stale = sorted(key for key in LOCAL_IMPORTS_ALLOWED if key not in found)
    assert not stale, f"LOCAL_IMPORTS_ALLOWED lists imports that are gone, remove them: {stale}"


def test_importing_any_module_is_cheap() -> None:
    """No module imports a heavy or optional third-party package at its top (the reason the rule
    above can be strict): torch, transformers and the rest are imported where they are used."""
    heavy = ("torch", "transformers", "matplotlib", "jinja2", "nltk", "spacy", "sentence_transformers", "httpx", "accelerate", "skimage", "inflect", "lemminflect", "open_clip", "pyarrow", "pandas")
    found = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name.split(".")[0] in heavy or name.startswith("scipy.stats") or (isinstance(node, ast.ImportFrom) and name == "scipy" and any(a.name == "stats" for a in node.names)):
                    found.append(f"{_dotted(module)}:{node.lineno} imports {name}")
    assert not found, "heavy imports at a module's top: " + "; ".join(found)
