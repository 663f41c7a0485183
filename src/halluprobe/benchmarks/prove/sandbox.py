"""Run a generated verification program over a SceneGraph, locked down.

Two fences, both always on:

1. **Static check** (:func:`check_program`) on the AST, before anything runs: only an
   allow-listed set of node types (no import, class, with, global, yield, async, ...); no name
   or attribute starting with an underscore; no call of ``open``/``eval``/``exec``/
   ``getattr``/``compile``/``__import__``/``globals``/``locals``/``vars``/``type``/...; and an
   attribute may be read only if it is on an allow-list (the SceneGraph API of
   :data:`~halluprobe.benchmarks.prove.scene_graph.SANDBOX_API` and common str/list/dict
   methods), which shuts the frame walks (``gi_frame.f_globals``) and ``str.format`` tricks.
2. **A separate process** (``python -I``, empty environment, a fresh temporary working
   directory) with ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_AS`` (address space), ``RLIMIT_FSIZE``
   = 0 (it cannot write a byte to a file), ``RLIMIT_NOFILE`` = 0 (it cannot open a file at all,
   not even after closing a descriptor it holds: ``RLIMIT_FSIZE`` alone still let
   ``open(path, "w")`` create an empty file or truncate an existing one anywhere the user may
   write), ``RLIMIT_NPROC`` = 0 (``fork()`` fails), ``RLIMIT_CORE`` = 0, standard input on
   ``/dev/null`` once the request is read, a wall timeout, and a cap on output (printed text and
   the JSON result). Run as root, the child drops to the ``nobody`` user and group (65534 when
   there is none) before the program runs (root ignores ``RLIMIT_NPROC``); when it cannot, the
   program does not run. Its builtins are a short allow-list; the only object it is given is
   ``graph``, a facade whose methods are the SceneGraph API and return plain values.

:func:`run_program` returns an outcome for every input: a program the parser cannot take (a
lone surrogate such as a truncated emoji, nesting deeper than the parser allows, a NUL byte)
is ``refused`` like any other static-check failure.

The program either defines ``def verify(graph): ...`` (its return value is the result) or
assigns ``result``. Results must be JSON values (str, int, float, bool, None, lists, dicts).
"""

from __future__ import annotations

import ast
import json
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import halluprobe
from halluprobe.benchmarks.prove.scene_graph import SANDBOX_API, SceneGraph
from halluprobe.jsonl import loads

__all__ = ["SandboxLimits", "SandboxResult", "SandboxRefused", "check_program", "run_program", "ALLOWED_BUILTINS"]

log = logging.getLogger(__name__)

ALLOWED_BUILTINS: tuple[str, ...] = (
    "abs", "all", "any", "bool", "dict", "enumerate", "filter", "float", "int", "isinstance", "len",
    "list", "map", "max", "min", "print", "range", "reversed", "round", "set", "sorted", "str", "sum",
    "tuple", "zip", "True", "False", "None",
)  # fmt: skip
_FORBIDDEN_NAMES = frozenset(
    "open eval exec getattr setattr delattr hasattr compile __import__ globals locals vars dir type "
    "object breakpoint input memoryview help exit quit super classmethod staticmethod property "
    "__builtins__ id hash iter next format".split()
)
_ALLOWED_ATTRIBUTES = frozenset(SANDBOX_API) | frozenset(
    "lower upper strip lstrip rstrip split join startswith endswith replace count index find "
    "append extend insert pop remove sort items keys values get add update union intersection "
    "difference issubset issuperset isdigit isalpha title capitalize".split()
)
_ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Module, ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.If, ast.For, ast.While,
    ast.Break, ast.Continue, ast.Pass, ast.Return, ast.FunctionDef, ast.arguments, ast.arg,
    ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension,
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.keyword, ast.IfExp,
    ast.Attribute, ast.Subscript, ast.Slice, ast.Name, ast.Load, ast.Store, ast.Constant,
    ast.List, ast.Tuple, ast.Set, ast.Dict, ast.JoinedStr, ast.FormattedValue, ast.Assert,
    ast.boolop, ast.operator, ast.unaryop, ast.cmpop, ast.expr_context,
)  # fmt: skip

Outcome = Literal["ok", "refused", "error", "timeout", "cpu_limit", "memory_limit", "output_limit"]


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: int = 2
    memory_bytes: int = 1 << 30
    output_bytes: int = 64 * 1024
    wall_s: float = 10.0


@dataclass(frozen=True)
class SandboxResult:
    """``outcome`` says what happened; ``reason`` is one line when it is not ``ok``."""

    outcome: Outcome
    result: Any = None
    stdout: str = ""
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


class SandboxRefused(ValueError):
    """The static check refused the program (the message says which rule, at which line)."""


def check_program(source: str) -> ast.Module:
    """Parse and check ``source``; raise :class:`SandboxRefused` naming the first violation."""
    try:
        tree = ast.parse(source, mode="exec")
    except SyntaxError as err:
        raise SandboxRefused(f"syntax error at line {err.lineno}: {err.msg}") from None
    except UnicodeEncodeError as err:  # a lone surrogate (half of an emoji) has no UTF-8 form
        line = source.count("\n", 0, err.start) + 1
        raise SandboxRefused(f"line {line}: not text: a lone surrogate U+{ord(source[err.start]):04X}") from None
    except (RecursionError, MemoryError):  # 100,000 nested "-", a 200,000-term sum
        raise SandboxRefused("nested too deeply for the parser") from None
    except ValueError as err:  # a NUL byte
        raise SandboxRefused(f"not a program: {err}") from None
    problems = sorted((_position(node), problem) for node in ast.walk(tree) if (problem := _violation(node)))
    if problems:
        (line, _col, _end), problem = problems[0]
        raise SandboxRefused(f"line {line}: {problem}")
    return tree


def _position(node: ast.AST) -> tuple[int, int, int]:
    """Source order, innermost first on a tie (``a.b.c``: ``a``, then ``a.b``); position-less nodes last."""
    if not hasattr(node, "lineno"):
        return (1 << 30, 0, 0)
    return (node.lineno, node.col_offset, node.end_col_offset or 0)


def _violation(node: ast.AST) -> str | None:
    """Why ``node`` is not allowed, or None."""
    if not isinstance(node, _ALLOWED_NODES):
        return f"{type(node).__name__} is not allowed"
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            return f"name {node.id!r} starts with an underscore"
        if node.id in _FORBIDDEN_NAMES:
            return f"{node.id!r} is not allowed"
    elif isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            return f"attribute {node.attr!r} starts with an underscore"
        if node.attr not in _ALLOWED_ATTRIBUTES:
            return f"attribute {node.attr!r} is not on the allow-list"
    elif isinstance(node, ast.FunctionDef):
        if node.decorator_list:
            return "decorators are not allowed"
        if node.name.startswith("_"):
            return f"function name {node.name!r} starts with an underscore"
    elif isinstance(node, ast.arg) and node.arg.startswith("_"):
        return f"argument {node.arg!r} starts with an underscore"
    return None


# The child: reads {"source", "tuples", "limits"} as JSON on stdin, applies the limits, runs the
# program, writes one JSON line {"outcome", "result" | "reason", "stdout"} on stdout.
_CHILD = r"""
import json, os, pwd, resource, sys
req = json.loads(sys.stdin.read())
# the request is read: standard input is nothing from here on (a closed fd 0 would be a free slot)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
lim = req["limits"]
resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_s"], lim["cpu_s"] + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
sys.path.insert(0, req["package_root"])
from halluprobe.benchmarks.prove.scene_graph import SANDBOX_API, SceneGraph
import builtins
out_cap = lim["output_bytes"]
printed = []
size = [0]
class OutputLimit(Exception):
    pass
def capped_print(*args, sep=" ", end="\n"):
    text = sep.join(str(a) for a in args) + end
    size[0] += len(text)
    if size[0] > out_cap:
        raise OutputLimit("printed output exceeds %d bytes" % out_cap)
    printed.append(text)
class Graph:
    __slots__ = ()
g = SceneGraph(req["tuples"])
for name in SANDBOX_API:
    setattr(Graph, name, staticmethod(getattr(g, name)))
safe = {n: getattr(builtins, n) for n in req["builtins"] if n not in ("print", "True", "False", "None")}
safe["print"] = capped_print
env = {"__builtins__": safe, "graph": Graph()}
def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
code = compile(req["source"], "<program>", "exec")
if os.geteuid() == 0:
    # root ignores RLIMIT_NPROC and may read anything: run the program as nobody, or not at all
    try:
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    except KeyError:
        uid = gid = 65534
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError as e:
        emit({"outcome": "error", "reason": "cannot drop root privileges: %s" % e, "stdout": ""})
        sys.exit(0)
resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # fork() and threads fail
resource.setrlimit(resource.RLIMIT_AS, (lim["memory_bytes"], lim["memory_bytes"]))
# no new file descriptor from here on, whatever the program closes first: RLIMIT_FSIZE stops
# writing bytes, but not open(path, "w") creating an empty file or truncating an existing one
# (stdout and stderr, already open, still work)
resource.setrlimit(resource.RLIMIT_NOFILE, (0, 0))
try:
    exec(code, env)
    if "verify" in env and callable(env["verify"]):
        value = env["verify"](env["graph"])
    elif "result" in env:
        value = env["result"]
    else:
        raise NameError("the program neither defines verify(graph) nor assigns result")
    text = json.dumps(value)
    if len(text) > out_cap:
        emit({"outcome": "output_limit", "reason": "result exceeds %d bytes" % out_cap, "stdout": ""})
    else:
        emit({"outcome": "ok", "result": value, "stdout": "".join(printed)})
except OutputLimit as e:
    emit({"outcome": "output_limit", "reason": str(e), "stdout": ""})
except MemoryError:
    printed.clear()
    emit({"outcome": "memory_limit", "reason": "memory limit exceeded", "stdout": ""})
except RecursionError:
    emit({"outcome": "error", "reason": "RecursionError: maximum recursion depth exceeded", "stdout": ""})
except BaseException as e:
    emit({"outcome": "error", "reason": "%s: %s" % (type(e).__name__, str(e)[:300]), "stdout": "".join(printed)[:out_cap]})
"""


def _package_root() -> str:

    return str(Path(halluprobe.__file__).resolve().parent.parent)


def run_program(source: str, graph: SceneGraph, limits: SandboxLimits | None = None) -> SandboxResult:
    """Check ``source`` statically, then run it over ``graph`` in a limited child process.

    Never raises for anything the program does: the outcome and a one-line reason say what
    happened (``refused`` for the static check).
    """
    limits = limits or SandboxLimits()
    try:
        check_program(source)
    except SandboxRefused as err:
        return SandboxResult(outcome="refused", reason=str(err))
    try:
        return _run_checked(source, graph, limits)
    except Exception as err:  # noqa: BLE001 - the promise: an outcome for every input, never a raise
        log.warning("sandbox failure: %s: %s", type(err).__name__, err)
        return SandboxResult(outcome="error", reason=f"sandbox failure: {type(err).__name__}: {str(err)[:300]}")


def _run_checked(source: str, graph: SceneGraph, limits: SandboxLimits) -> SandboxResult:
    """:func:`run_program` past the static check: the child process and what it reports."""
    request = json.dumps(
        {
            "source": source,
            "tuples": [t.model_dump() for t in graph.tuples()],
            "limits": {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_bytes, "output_bytes": limits.output_bytes},
            "builtins": list(ALLOWED_BUILTINS),
            "package_root": _package_root(),
        }
    )
    with tempfile.TemporaryDirectory(prefix="halluprobe-sandbox-") as cwd:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "-c", _CHILD],
                input=request.encode(),
                capture_output=True,
                cwd=cwd,
                env=env,
                timeout=limits.wall_s,
            )
        except subprocess.TimeoutExpired:
            return SandboxResult(outcome="timeout", reason=f"killed after the {limits.wall_s:g} s wall timeout")
    out = proc.stdout
    if len(out) > limits.output_bytes * 2 + 1024:
        return SandboxResult(outcome="output_limit", reason=f"child output exceeds {limits.output_bytes} bytes")
    if proc.returncode != 0 or not out.strip():
        rc = proc.returncode
        if rc in (-24, -9) or (rc < 0 and -rc == 24):  # SIGXCPU (or SIGKILL at the hard limit)
            return SandboxResult(outcome="cpu_limit", reason=f"killed at the {limits.cpu_s} s CPU limit (signal {-rc})")
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        tail = err[-1] if err else ""
        if "MemoryError" in tail:
            return SandboxResult(outcome="memory_limit", reason="memory limit exceeded")
        return SandboxResult(outcome="error", reason=f"child exited with {rc}: {tail[:300]}")
    try:
        data = loads(out.decode().strip().splitlines()[-1])  # nesting too deep: malformed, an outcome
    except (ValueError, IndexError):
        return SandboxResult(outcome="error", reason="child wrote no valid result line")
    return SandboxResult(
        outcome=data["outcome"], result=data.get("result"), stdout=data.get("stdout", ""), reason=data.get("reason")
    )
