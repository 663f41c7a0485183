"""Reading a string constant out of another project's Python script without running it.

Official judge and extraction prompts live inside evaluation scripts (MMHal-Bench's
``eval_gpt_mmhal.py``, Object HalBench's ``eval_gpt_obj_halbench.py``). halluprobe fetches such a
script pinned by sha256 and reads the one module-level assignment it needs from the script's
syntax tree: the script is never imported or executed, and no copy of the prompt is kept here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from halluprobe.errors import InputError

__all__ = ["module_string"]


def module_string(path: Path, name: str, what: str) -> tuple[str, int]:
    """The string assigned to ``name`` at the top level of the script ``path``, and its line; an
    InputError naming the file where it cannot be read or has no such assignment (``what``: the
    script's description for the message, e.g. "MMHal-Bench's judge script")."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as err:
        raise InputError(f"cannot read {what}: {err}", path) from None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):  # fmt: skip
            return node.value.value, node.lineno
    raise InputError(f"no module-level `{name} = '...'` string: not {what}", path)
