"""`infill-lsp complete PATH:LINE:COL`: one inline completion, asked of a real server.

The server runs as a subprocess over stdio and is spoken to exactly as an editor does:
initialize, open the file, ask for an inline completion, shut down. LINE and COL are 1-based,
COL counting characters as a person does (Unicode code points; a combining mark or an emoji
modifier counts as its own).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from engine.text import split_lines
from lsp_server.client import InfillClient, insert_text_of

#: Languages the demo and users are likely to point at; others go as plain text.
LANGUAGES = {
    ".py": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".rs": "rust",
    ".go": "go",
    ".java": "java",
    ".c": "c",
    ".cpp": "cpp",
    ".lua": "lua",
}


class CompleteError(Exception):
    """A bad location or file: one line for the user."""


def parse_location(location: str) -> tuple[Path, int, int]:
    path, sep, rest = location.rpartition(":")
    path2, sep2, line = path.rpartition(":")
    if not sep or not sep2 or not line.isdigit() or not rest.isdigit():
        raise CompleteError(f"expected PATH:LINE:COL with 1-based numbers, got {location!r}")
    if int(line) < 1 or int(rest) < 1:
        raise CompleteError(f"LINE and COL start at 1, got {location!r}")
    return Path(path2), int(line), int(rest)


def lsp_position(text: str, line: int, column: int) -> types.Position:
    """The UTF-16 position (LSP's default encoding) of 1-based LINE:COL in code points."""
    lines = split_lines(text) or [""]
    if text.endswith(("\n", "\r")):
        lines.append("")
    if line > len(lines):
        raise CompleteError(f"line {line} is past the end of the file ({len(lines)} lines)")
    content = lines[line - 1].rstrip("\r\n")
    if column > len(content) + 1:
        raise CompleteError(
            f"column {column} is past the end of line {line} ({len(content)} characters)"
        )
    codec = PositionCodec(encoding=types.PositionEncodingKind.Utf16)
    return types.Position(line=line - 1, character=codec.client_num_units(content[: column - 1]))


async def run_complete(args: argparse.Namespace) -> int:
    try:
        path, line, column = parse_location(args.location)
        text = path.read_text(encoding="utf-8")
        position = lsp_position(text, line, column)
    except (CompleteError, OSError, UnicodeDecodeError) as e:
        print(f"infill-lsp: error: {e}", file=sys.stderr)
        return 1

    client = InfillClient(
        "infill-lsp-complete",
        on_log=(lambda message: print(message, file=sys.stderr)) if args.verbose else None,
        on_show=lambda message: print(f"infill-lsp: {message}", file=sys.stderr),
    )
    started = time.perf_counter()
    uri = path.resolve().as_uri()
    try:
        await client.start(
            root_uri=path.resolve().parent.as_uri(),
            server_args=["--model", args.model] if args.model else [],
        )
        client.open(uri, text, LANGUAGES.get(path.suffix, "plaintext"))
        ready = time.perf_counter()
        items = await client.inline(uri, position, invoked=args.invoked)
        done = time.perf_counter()
        status = await client.status()
    except Exception as e:  # the server answered with an error: one line, no traceback
        print(f"infill-lsp: error: {e}", file=sys.stderr)
        return 1
    finally:
        await client.stop()

    if args.json:
        report: dict[str, Any] = {
            "items": [
                {
                    "insert_text": item.insert_text,
                    "range": None
                    if item.range is None
                    else {
                        "start": [item.range.start.line, item.range.start.character],
                        "end": [item.range.end.line, item.range.end.character],
                    },
                }
                for item in items
            ],
            "timings_ms": {
                "startup_and_load": round((ready - started) * 1000),
                "completion": round((done - ready) * 1000),
            },
            "model": status.get("model"),
        }
        print(json.dumps(report, ensure_ascii=False, indent=2))
    elif items:
        for item in items:
            print(insert_text_of(item))
    else:
        print("(no suggestion)", file=sys.stderr)
    return 0
