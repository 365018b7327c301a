"""`infill-lsp complete PATH:LINE:COL`: one inline completion, asked of a real server.

The server runs as a subprocess over stdio and is spoken to exactly as an editor does:
initialize, open the file, ask for an inline completion, shut down. LINE and COL are 1-based,
COL counting characters as a person does (Unicode code points; a combining mark or an emoji
modifier counts as its own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.workspace.position_codec import PositionCodec

from engine.text import split_lines

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
    # pygls logs every message it sends at INFO; the user asked for the server's log only.
    logging.getLogger("pygls").setLevel(logging.WARNING)
    try:
        path, line, column = parse_location(args.location)
        text = path.read_text(encoding="utf-8")
        position = lsp_position(text, line, column)
    except (CompleteError, OSError, UnicodeDecodeError) as e:
        print(f"infill-lsp: error: {e}", file=sys.stderr)
        return 1

    command = [sys.executable, "-m", "lsp_server.cli", "serve"]
    if args.model:
        command += ["--model", args.model]
    client = LanguageClient("infill-lsp-complete", "1")
    log_lines: list[str] = []

    @client.feature(types.WINDOW_LOG_MESSAGE)  # type: ignore[untyped-decorator]  # pygls client
    def log_message(params: types.LogMessageParams) -> None:
        log_lines.append(params.message)
        if args.verbose:
            print(params.message, file=sys.stderr)

    @client.feature(types.WINDOW_SHOW_MESSAGE)  # type: ignore[untyped-decorator]
    def show_message(params: types.ShowMessageParams) -> None:
        print(f"infill-lsp: {params.message}", file=sys.stderr)

    started = time.perf_counter()
    await client.start_io(*command)
    uri = path.resolve().as_uri()
    try:
        await client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(
                    general=types.GeneralClientCapabilities(
                        position_encodings=[types.PositionEncodingKind.Utf16]
                    )
                ),
                process_id=None,
                root_uri=path.resolve().parent.as_uri(),
            )
        )
        client.initialized(types.InitializedParams())
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri,
                    language_id=LANGUAGES.get(path.suffix, "plaintext"),
                    version=1,
                    text=text,
                )
            )
        )
        ready = time.perf_counter()
        trigger = (
            types.InlineCompletionTriggerKind.Invoked
            if args.invoked
            else types.InlineCompletionTriggerKind.Automatic
        )
        result = await client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=position,
                context=types.InlineCompletionContext(trigger_kind=trigger),
            )
        )
        done = time.perf_counter()
        status = await client.protocol.send_request_async("infill/status", {})
    except Exception as e:  # the server answered with an error: one line, no traceback
        print(f"infill-lsp: error: {e}", file=sys.stderr)
        return 1
    finally:
        try:
            await asyncio.wait_for(client.shutdown_async(None), 10)
            client.exit(None)
        except Exception:  # the server may be gone already
            pass
        await client.stop()  # type: ignore[no-untyped-call]

    items = _items(result)
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
            "model": getattr(status, "model", None),
        }
        print(json.dumps(report, ensure_ascii=False, indent=2))
    elif items:
        for item in items:
            print(item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value)
    else:
        print("(no suggestion)", file=sys.stderr)
    return 0


def _items(result: Any) -> list[types.InlineCompletionItem]:
    if result is None:
        return []
    if isinstance(result, types.InlineCompletionList):
        return list(result.items)
    return list(result)
