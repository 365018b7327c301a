"""The one rule of the layout (DESIGN §1), as ruff's banned-api rule enforces it: the engine
knows nothing of editors, and the editor side knows nothing of model libraries."""

from __future__ import annotations

import subprocess
import sys
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
    ("engine", "import pygls", True),
    ("engine", "from lsprotocol import types", True),
    ("engine", "from lsp_server.settings import Settings", True),
    ("engine", "import torch", False),
    ("engine", "import llama_cpp", False),
]


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
        assert "DESIGN §1" in result.stdout
