"""PROVE sandbox: programs over a SceneGraph run; escapes are refused or killed with a clear reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from halluprobe.benchmarks.prove.sandbox import SandboxLimits, SandboxRefused, check_program, run_program
from halluprobe.benchmarks.prove.scene_graph import SceneGraph

GRAPH = SceneGraph([["dog"], ["dog", "brown"], ["dog", "on", "sofa"], {"kind": "entity", "entity": "cat", "count": 2}])
FAST = SandboxLimits(cpu_s=1, wall_s=10.0, memory_bytes=512 << 20, output_bytes=4096)


def test_verify_function_and_result_variable() -> None:
    r = run_program("def verify(graph):\n    print('checking')\n    return graph.count('cat')\n", GRAPH, FAST)
    assert r.ok and r.result == 2 and r.stdout == "checking\n"
    r = run_program("result = sorted(graph.attributes_of('dog') + graph.relations_between('dog', 'sofa'))", GRAPH, FAST)
    assert r.ok and r.result == ["brown", "on"]
    r = run_program("result = [e.upper() for e in graph.entities() if graph.has_entity(e)]", GRAPH, FAST)
    assert r.result == ["DOG", "SOFA", "CAT"]


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("import os", "Import is not allowed"),
        ("from os import system", "ImportFrom is not allowed"),
        ("__import__('os').system('true')", "starts with an underscore"),
        ("result = ().__class__.__mro__[1].__subclasses__()", "'__class__' starts with an underscore"),
        ("result = (x for x in []).gi_frame.f_globals", "'gi_frame' is not on the allow-list"),
        ("result = '{0.entities}'.format(graph)", "'format' is not on the allow-list"),
        ("open('pwned.txt', 'w').write('x')", "'open' is not allowed"),
        ("eval('1+1')", "'eval' is not allowed"),
        ("exec('x=1')", "'exec' is not allowed"),
        ("result = getattr(graph, 'entities')", "'getattr' is not allowed"),
        ("result = compile('1', 'f', 'eval')", "'compile' is not allowed"),
        ("result = globals()", "'globals' is not allowed"),
        ("result = vars()", "'vars' is not allowed"),
        ("class A:\n    pass", "ClassDef is not allowed"),
        ("with x as y:\n    pass", "With is not allowed"),
        ("def f():\n    global x", "Global is not allowed"),
        ("result = (", "syntax error"),
    ],
)
def test_static_refusals(source: str, reason: str) -> None:
    with pytest.raises(SandboxRefused, match=reason.replace("(", r"\(").replace("[", r"\[")):
        check_program(source)
    r = run_program(source, GRAPH, FAST)
    assert r.outcome == "refused" and reason in (r.reason or "")


def test_file_creation_is_refused_statically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "pwned.txt"
    r = run_program(f"open({str(target)!r}, 'w').write('x')\nresult = 1", GRAPH, FAST)
    assert r.outcome == "refused"
    assert not target.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["relative", "outside", "existing"])
def test_process_fence_stops_file_writes_the_static_check_missed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The second fence alone: with the static check off and ``open`` handed to the program, a write
    fails and no file appears (or is truncated) outside the child's temporary folder."""
    from halluprobe.benchmarks.prove import sandbox

    monkeypatch.setattr(sandbox, "check_program", lambda source: None)
    monkeypatch.setattr(sandbox, "ALLOWED_BUILTINS", (*sandbox.ALLOWED_BUILTINS, "open"))
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)  # the parent's working directory: a relative path must not land here
    existing = outside / "precious.txt"
    existing.write_text("keep me")
    target = {"relative": "pwned.txt", "outside": str(outside / "pwned.txt"), "existing": str(existing)}[where]
    r = sandbox.run_program(f"f = open({target!r}, 'w')\nf.write('x')\nf.close()\nresult = 1", GRAPH, FAST)
    assert r.outcome == "error" and "OSError" in (r.reason or ""), r
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"] and existing.read_text() == "keep me"


def test_infinite_loop_hits_cpu_limit() -> None:
    r = run_program("while True:\n    pass", GRAPH, FAST)
    assert r.outcome == "cpu_limit" and "CPU limit" in (r.reason or "")


def test_wall_timeout() -> None:
    r = run_program("while True:\n    pass", GRAPH, SandboxLimits(cpu_s=30, wall_s=1.0))
    assert r.outcome == "timeout" and "wall timeout" in (r.reason or "")


def test_memory_bomb() -> None:
    r = run_program("x = [0] * (10 ** 10)", GRAPH, FAST)
    assert r.outcome == "memory_limit" and r.reason == "memory limit exceeded"
    growing = "x = []\nwhile True:\n    x.append('a' * 10 ** 6)"  # a megabyte at a time
    r = run_program(growing, GRAPH, SandboxLimits(cpu_s=10, wall_s=30.0, memory_bytes=512 << 20))
    assert r.outcome == "memory_limit"


def test_huge_output() -> None:
    r = run_program("while True:\n    print('a' * 1000)", GRAPH, FAST)
    assert r.outcome == "output_limit" and "printed output exceeds 4096 bytes" in (r.reason or "")
    r = run_program("result = 'a' * 100000", GRAPH, FAST)
    assert r.outcome == "output_limit" and "result exceeds" in (r.reason or "")


def test_runtime_error_and_missing_result() -> None:
    r = run_program("result = 1 / 0", GRAPH, FAST)
    assert r.outcome == "error" and r.reason == "ZeroDivisionError: division by zero"
    r = run_program("x = 1", GRAPH, FAST)
    assert r.outcome == "error" and "neither defines verify(graph) nor assigns result" in (r.reason or "")


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ('result = "\ud83d"', "lone surrogate U+D83D"),  # a truncated emoji in model output
        ("result = " + "-" * 100_000 + "1", "nested too deeply"),
        ("result = " + "+".join(["1"] * 200_000), "nested too deeply"),
        ("result = " + "[" * 200_000, "too many nested parentheses"),
        ("result = 1\x00", "null bytes"),
    ],
    ids=["surrogate", "unary", "sum", "brackets", "nul"],
)
def test_every_program_gets_an_outcome(source: str, reason: str) -> None:
    """What the parser cannot take is refused, never raised out of run_program."""
    with pytest.raises(SandboxRefused, match=re.escape(reason)):
        check_program(source)
    r = run_program(source, GRAPH, FAST)
    assert r.outcome == "refused" and reason in (r.reason or "")


def test_an_unexpected_failure_is_an_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    from halluprobe.benchmarks.prove import sandbox

    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError("cannot start the child")

    monkeypatch.setattr(sandbox.subprocess, "run", no_memory)
    r = sandbox.run_program("result = 1", GRAPH, FAST)
    assert r.outcome == "error" and r.reason == "sandbox failure: MemoryError: cannot start the child"


def _fence_only(monkeypatch: pytest.MonkeyPatch, *builtins: str) -> None:
    """The static check off, and builtins it would never allow handed to the program."""
    from halluprobe.benchmarks.prove import sandbox

    monkeypatch.setattr(sandbox, "check_program", lambda source: None)
    monkeypatch.setattr(sandbox, "ALLOWED_BUILTINS", (*sandbox.ALLOWED_BUILTINS, *builtins))


def test_process_fence_no_file_opens_after_closing_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing fd 0 used to free a descriptor below the RLIMIT_NOFILE limit: /etc/passwd was readable."""
    from halluprobe.benchmarks.prove import sandbox

    _fence_only(monkeypatch, "open")
    r = sandbox.run_program("stdin = open(0)\nleft = stdin.read()\nstdin.close()\nresult = open('/etc/passwd').read()", GRAPH, FAST)
    assert r.outcome == "error" and "OSError" in (r.reason or "") and "Too many open files" in (r.reason or ""), r
    r = sandbox.run_program("stdin = open(0)\nresult = stdin.read()", GRAPH, FAST)
    assert r.ok and r.result == ""  # standard input is /dev/null: the request is not readable either


def test_process_fence_fork_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from halluprobe.benchmarks.prove import sandbox

    _fence_only(monkeypatch, "__import__", "OSError")
    program = (
        "import os\n"
        "try:\n    pid = os.fork()\nexcept OSError as e:\n    result = 'refused: ' + str(e)\n"
        "else:\n    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n    result = 'forked'\n"
    )
    r = sandbox.run_program(program, GRAPH, FAST)
    assert r.ok and str(r.result).startswith("refused: "), r


def test_process_fence_runs_the_program_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from halluprobe.benchmarks.prove import sandbox

    _fence_only(monkeypatch, "__import__")
    r = sandbox.run_program("import os\nresult = [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()]", GRAPH, FAST)
    assert r.ok, r
    uid, euid, gid, egid, groups = r.result
    if os.geteuid() == 0:  # dropped to nobody
        assert 0 not in (uid, euid, gid, egid) and groups == []
    else:  # an ordinary user stays who it is
        assert euid == os.geteuid()
