"""Shared pytest fixtures. Real tokenizers come from registry packages (tests/_assets.py)."""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from pathlib import Path

import pytest

import _assets


@pytest.fixture(scope="session")
def llama_tokenizer_dir() -> Path:
    """LLaMA-2 / LLaVA-1.5 tokenizer folder (32000 pieces)."""
    return _assets.llama_tokenizer_dir()


@pytest.fixture(scope="session")
def qwen2_tokenizer_dir() -> Path:
    """Qwen2 tokenizer folder (151936 ids)."""
    return _assets.qwen2_tokenizer_dir()


@pytest.fixture(scope="session")
def mistral_tokenizer_dir() -> Path:
    """Mistral v1 tokenizer folder (32000 pieces; LLaVA-1.6-Mistral)."""
    return _assets.mistral_tokenizer_dir("v1")


# The slow tier: a test module that builds, loads or runs models (tiny VLMs, the demo model,
# OWLv2, MiniLM, spaCy) says so itself with `pytestmark = pytest.mark.slow` at its top (or a
# test with `@pytest.mark.slow`), so the mark travels with the file on a rename. `python3 -m
# pytest -q` leaves the slow tier out (the fast tier, for local work); the README's test command,
# which CI runs, selects every tier with -m "not gpu and not network".
#
# The guard below fails the collection when a test that is not marked slow reaches a model
# builder: in its own body, in a function of its module it calls (transitively), in a fixture it
# uses, in a tests/_helper module it names, or through a module-level import of one. It reads
# code, not file names, so no rename moves a model test to the fast tier. Not seen: a model
# reached only through CLI arguments (`["demo", ...]`, `--extractor spacy`): mark those by hand.
MODEL_MODULES = ("torch", "halluprobe.tiny", "halluprobe.tiny_qwen2vl", "halluprobe.backends.hf.backend", "halluprobe.demo", "spacy", "sentence_transformers", "open_clip")
MODEL_NAMES = frozenset(
    {
        "HFBackend", "run_demo", "train_demo_model", "SpacyExtractor", "spacy_extract", "ClipScorer", "OwlDetector",
        "SentenceTransformer", "tiny_llava_dir", "tiny_owlv2_dir",
    }
)  # fmt: skip
MODEL_PREFIXES = ("build_tiny_", "AutoModel", "Owlv2")
TESTS = Path(__file__).resolve().parent


@functools.cache
def _module_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


_NAMES: dict[int, frozenset[str]] = {}  # by id of a node of a cached tree (the trees live as long)


def _names_cached(node: ast.AST) -> frozenset[str]:
    if id(node) not in _NAMES:
        _NAMES[id(node)] = frozenset(_names(node))
    return _NAMES[id(node)]


def _names(node: ast.AST) -> set[str]:
    """Identifiers, attributes and imported module names (dotted, ``importorskip`` included)
    used under ``node``."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, ast.Import):
            found.update(alias.name for alias in sub.names)
        elif isinstance(sub, ast.Call) and getattr(sub.func, "attr", getattr(sub.func, "id", None)) == "importorskip":
            found.update(arg.value for arg in sub.args[:1] if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
        elif isinstance(sub, ast.ImportFrom) and sub.module:
            found.add(sub.module)
            found.update(f"{sub.module}.{alias.name}" for alias in sub.names)
            found.update(alias.name for alias in sub.names)
    return found


def _is_model(name: str) -> bool:
    return (
        name in MODEL_NAMES
        or name.startswith(MODEL_PREFIXES)
        or any(name == m or name.startswith(m + ".") for m in MODEL_MODULES)
    )


def _reach(item: pytest.Item) -> set[str]:
    """Every name the test can reach without leaving the test suite's own code."""
    path = Path(str(item.fspath))
    tree = _module_tree(path)
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    # the module's own statements (imports, importorskip, constants), not its functions' bodies
    roots: list[ast.AST] = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    test = getattr(item, "function", None)
    if test is not None:
        roots.append(_function_node(test, tree))
    for defs in getattr(item, "_fixtureinfo").name2fixturedefs.values():
        for fixturedef in defs:
            func = fixturedef.func
            module = sys.modules.get(getattr(func, "__module__", ""))
            file = getattr(module, "__file__", None)
            if file and Path(file).resolve().parent == TESTS:
                roots.append(_function_node(func, _module_tree(Path(file).resolve())))
    seen: set[str] = set()
    todo, done = roots, set()
    while todo:
        node = todo.pop()
        if id(node) in done:
            continue
        done.add(id(node))
        names = _names_cached(node)
        seen |= names
        todo += [functions[n] for n in names if n in functions]
        for helper in (n.split(".")[0] for n in names if n.startswith("_")):
            helper_path = TESTS / f"{helper}.py"
            if helper_path.is_file():
                todo.append(_module_tree(helper_path))
    return seen


def _function_node(func: object, tree: ast.Module) -> ast.AST:
    """The function's node in its module's tree (by name and first line), else its module."""
    code = getattr(inspect.unwrap(func), "__code__", None)  # type: ignore[arg-type]
    if code is None:
        return tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])  # co_firstlineno: the first decorator
            if first <= code.co_firstlineno <= node.lineno:
                return node
    return tree


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = []
    for item in items:
        if item.get_closest_marker("slow") is None:
            models = sorted(n for n in _reach(item) if _is_model(n))
            if models:
                unmarked.append(f"{item.nodeid} (reaches {', '.join(models[:3])})")
    if unmarked:
        raise pytest.UsageError(
            "tests that build or load models are not marked slow (add `pytestmark = pytest.mark.slow` to the module, "
            "or @pytest.mark.slow): " + "; ".join(unmarked)
        )
