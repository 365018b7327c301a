"""The one rule of the layout, as ruff's banned-api rule enforces it: the engine knows nothing
of editors, and the editor side knows nothing of model libraries."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: (the folder a module is in, what it imports, whether ruff refuses it there)
IMPORTS = [
    ("lsp_server", "import torch", True),
    ("lsp_server", "from transformers import AutoTokenizer", True),
    ("lsp_server", "import llama_cpp", True),
    ("lsp_server", "from llama_cpp.llama import Llama", True),
    ("lsp_server", "from engine.models import ModelOptions", False),
    ("lsp_server", "from pygls.lsp.server import LanguageServer", False),
    ("lsp_server", "from engine.backends.openai import RemoteEngine", True),
    ("lsp_server", "from engine.completion import CompletionModel", False),
    ("engine", "import pygls", True),
    ("engine", "from lsprotocol import types", True),
    ("engine", "from lsp_server.settings import Settings", True),
    ("engine", "import torch", False),
    ("engine", "import llama_cpp", False),
]

#: What ruff says a banned import breaks, by the folder it is in: the rule itself.
RULES = {
    "engine": "the engine knows nothing of editors",
    "lsp_server": "the editor side knows nothing of model libraries",
}


@pytest.mark.parametrize(("folder", "statement", "banned"), IMPORTS)
def test_each_side_imports_only_what_the_layout_allows(
    folder: str, statement: str, banned: bool
) -> None:
    # Checked as if it were a file in `folder`, so that the folder's ruff.toml applies.
    probe = ["--stdin-filename", f"{folder}/probe.py", "-"]
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "TID251", *probe],
        input=statement + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == (1 if banned else 0), result.stdout + result.stderr
    assert ("TID251" in result.stdout) == banned
    if banned:
        rule = "never a backend" if "engine.backends" in statement else RULES[folder]
        assert rule in result.stdout, result.stdout


PACKAGES = ("engine", "lsp_server")


def _modules() -> dict[str, Path]:
    """Every module of the product, by its dotted name."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(tree: ast.AST, known: dict[str, Path]) -> Iterator[str]:
    """The product's modules that `tree` imports anywhere: at the top, inside a function or
    under TYPE_CHECKING alike (an import moved into a function still makes a circle)."""

    def module_of(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            module = module_of(name)
            if module is not None:
                yield module


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {
        name: set(_imported(ast.parse(path.read_text(encoding="utf-8")), known)) - {name}
        for name, path in known.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for after in sorted(graph[node]):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_circles_are_found() -> None:
    # The check itself, on a made-up graph: a circle of three and a module outside it.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_product_imports_itself_through_others() -> None:
    graph = import_graph()
    assert "engine.models" in graph  # the walk found the product's modules
    assert "lsp_server.server" in graph
    assert circles(graph) == []


def test_the_editor_side_never_imports_a_backend() -> None:
    graph = import_graph()
    reaching = {
        name: sorted(m for m in imports if m.startswith("engine.backends"))
        for name, imports in graph.items()
        if name.startswith("lsp_server")
    }
    assert {name: found for name, found in reaching.items() if found} == {}


def _engine_names(tree: ast.AST) -> set[str]:
    """The names a module imports from engine/."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine")
        for alias in node.names
    }


def _isinstance_on(tree: ast.AST, names: set[str]) -> list[str]:
    """The names of `names` that an isinstance() or issubclass() call in `tree` checks."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            for name in ast.walk(node.args[1]):
                if isinstance(name, ast.Name) and name.id in names:
                    found.append(name.id)
    return found


def test_the_editor_side_never_branches_on_an_engine_type() -> None:
    # The check itself: a made-up module that does.
    probe = ast.parse("from engine.engine import Engine\nisinstance(x, (int, Engine))\n")
    assert _isinstance_on(probe, _engine_names(probe)) == ["Engine"]
    found = {}
    for name, path in _modules().items():
        if name.startswith("lsp_server"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if hits := _isinstance_on(tree, _engine_names(tree)):
                found[name] = hits
    assert found == {}
