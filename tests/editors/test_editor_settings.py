"""The settings each editor plugin offers are the server's own: same keys, same defaults.

The VS Code extension declares every server setting in its `package.json` (the settings UI
shows them from there) and sends them as the server's `infill` section; a key the server does
not know would be ignored without a word, and a default that differs would make the settings
UI show one value while the server uses another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lsp_server.settings import CLIENT_KEYS, Settings, parse_settings

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "editors" / "vscode" / "package.json"
#: The extension's own keys: they choose and start the server, and never reach it.
EXTENSION_ONLY = {"enable", "nextEdits.enabled", "serverPath", "serverArgs", "trace.server"}


def _declared() -> dict[str, Any]:
    """The extension's `infill.*` settings and their defaults, from its manifest."""
    manifest = json.loads(PACKAGE.read_text(encoding="utf-8"))
    sections = manifest["contributes"]["configuration"]
    if isinstance(sections, dict):
        sections = [sections]
    declared = {}
    for section in sections:
        for name, schema in section["properties"].items():
            assert name.startswith("infill."), name
            declared[name.removeprefix("infill.")] = schema.get("default")
    return declared


SERVER_KEYS = sorted(CLIENT_KEYS)


def test_every_server_setting_is_declared_by_the_vscode_extension() -> None:
    declared = _declared()
    assert sorted(set(declared) - EXTENSION_ONLY) == SERVER_KEYS


@pytest.mark.parametrize("key", SERVER_KEYS)
def test_the_vscode_default_is_the_servers_default(key: str) -> None:
    """The manifest's default, sent as the extension sends it ("" for a path means the
    server's default model), parses without a warning into the server's default."""
    value = _declared()[key]
    settings, problems = parse_settings({key: value})
    assert problems == []
    assert settings == Settings(), f"infill.{key}: the extension's default {value!r} differs"
