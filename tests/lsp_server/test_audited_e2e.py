"""The language server reads nothing of the user's disk: the editor sends the documents it needs,
and a workspace may hold secrets. Run under an audit hook (tests/audited_cli.py), with a workspace
that holds symbolic-link loops, a FIFO and binary files, while the client opens, edits and completes
documents there, the process opens no file but its log, its models and Python's own modules, and
lists no folder outside those."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path

import pytest
from lsp_helpers import REPO, lsp_session
from lsprotocol import types
from pytest_lsp import client_capabilities
from scripted_lsp import SCRIPTED_SERVER_COMMAND, scripted_command, write_script

AUDITED = (sys.executable, str(Path(__file__).parents[1] / "audited_cli.py"), "serve")


def hostile_workspace(root: Path) -> dict[str, Path]:
    """A workspace with what would hang or mislead a server that read it: two links that
    point at each other, a folder link to itself, a FIFO (opening it waits for a writer),
    a binary file with a source file's name, and one plain source file."""
    root.mkdir()
    (root / "loop_a.py").symlink_to(root / "loop_b.py")
    (root / "loop_b.py").symlink_to(root / "loop_a.py")
    (root / "itself").symlink_to(root, target_is_directory=True)
    os.mkfifo(root / "pipe.py")
    (root / "blob.py").write_bytes(b"\x00\x01\xff\xfe" * 4096)
    (root / "main.py").write_text("import helpers\n")
    return {
        "main": root / "main.py",
        "loop": root / "loop_a.py",
        "pipe": root / "pipe.py",
        "blob": root / "blob.py",
        "deep": root / "itself" / "itself" / "main.py",
    }


def allowed_roots(*extra: Path) -> list[str]:
    """Where the server may open files: Python's installation and its packages, this checkout
    (our modules, the scripted backend), and `extra`."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(REPO)}
    roots.update(p for p in sysconfig.get_paths().values())
    roots.update(p for p in sys.path if p)
    roots.update(str(p) for p in extra)
    return sorted({os.path.realpath(r) for r in roots})


def under(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path) if os.path.exists(path) else os.path.abspath(path)
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs and symbolic links as POSIX makes them")
async def test_a_hostile_workspace_is_never_read_while_documents_are_edited_and_completed(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "workspace"
    files = hostile_workspace(workspace)
    models = tmp_path / "models"
    coder = write_script(models, "coder", ["value()\n"])
    log_file = tmp_path / "logs" / "server.log"
    log_file.parent.mkdir()
    audit = tmp_path / "opened.jsonl"
    command = [*AUDITED, *scripted_command(coder)[len(SCRIPTED_SERVER_COMMAND) :]]
    command += ["--log-file", str(log_file), "-v"]
    env = {"INFILL_AUDIT_FILE": str(audit), "INFILL_CACHE_DIR": str(tmp_path / "cache")}
    async with lsp_session(
        client_capabilities("visual_studio_code@v1.65.2"), None, command, env
    ) as session:
        status = await session.until_loaded()
        assert status["status"] == "ready", status
        session.client.workspace_did_change_workspace_folders(
            types.DidChangeWorkspaceFoldersParams(
                event=types.WorkspaceFoldersChangeEvent(
                    added=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")],
                    removed=[],
                )
            )
        )
        texts = {
            "main": "import helpers\n\ndef run():\n    return ",
            "loop": "def loop():\n    return ",
            "pipe": "def pipe():\n    return ",
            "blob": "\x00\x01\ufffd\ufffe binary\ndef blob():\n    return ",
            "deep": "def deep():\n    return ",
        }
        for name, text in texts.items():
            uri = session.open(text, uri=files[name].as_uri())
            last = text.splitlines()[-1]
            line = len(text.splitlines()) - 1
            session.change(uri, 2, [{"range": _at(line, len(last)), "text": "x"}])
            items = await session.inline(uri, types.Position(line=line, character=len(last) + 1))
            assert items, f"a suggestion in {name}"
            session.client.text_document_did_close(
                types.DidCloseTextDocumentParams(
                    text_document=types.TextDocumentIdentifier(uri=uri)
                )
            )
        await session.wait_for_messages()
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(e["path"] == str(coder.path) for e in events), "the hook saw the model opened"
    touched_workspace = [e for e in events if under(e["path"], [str(workspace)])]
    assert touched_workspace == []
    roots = allowed_roots(models, log_file)
    elsewhere = sorted({e["path"] for e in events if not under(e["path"], roots)})
    assert elsewhere == []


def _at(line: int, character: int) -> dict[str, dict[str, int]]:
    point = {"line": line, "character": character}
    return {"start": point, "end": point}
