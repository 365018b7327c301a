"""`infill-lsp serve --tcp`: loopback only unless the user allows remote clients, one client at a
time, and a disconnect that ends the server cleanly. The real server process, spoken to over real
sockets."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import subprocess
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lsp_helpers import SERVER_COMMAND, answer, plain_json, poll_until, server_env, wait_until
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from scripted_lsp import scripted_command, write_script

from engine.net import is_loopback
from lsp_server.tcp import listen_problem

LISTENING = re.compile(r"listening on (\S+):(\d+)")
#: A line in the server's log format (`serve.LOG_FORMAT`): time, level, logger.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ \S+: ")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("[::1", False),  # only a whole bracketed address is one
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
        ("10.0.0.1", False),
        ("build-box.example.com", False),
        ("", False),
    ],
)
def test_only_loopback_hosts_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert (listen_problem(host, allow_remote=False) is None) is loopback
    assert listen_problem(host, allow_remote=True) is None


def test_a_non_loopback_host_without_allow_remote_is_refused_before_listening() -> None:
    result = subprocess.run(
        [*SERVER_COMMAND, "--tcp", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(),
        check=False,
    )
    assert result.returncode == 2
    assert "not a loopback address" in result.stderr
    assert "--allow-remote" in result.stderr
    assert "listening" not in result.stderr


@dataclass
class TcpServer:
    process: asyncio.subprocess.Process
    host: str
    port: int
    log: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def tcp_server(
    *args: str, command: Sequence[str] = SERVER_COMMAND
) -> AsyncIterator[TcpServer]:
    """`serve --tcp --port 0` (any free port; `command` for `serve`), its port read from its
    log."""
    process = await asyncio.create_subprocess_exec(
        *command,
        "--tcp",
        "--port",
        "0",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=server_env(),
    )
    assert process.stderr is not None
    log: list[str] = []

    async def read_log() -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            log.append(line.decode(errors="replace").rstrip("\n"))

    reading = asyncio.create_task(read_log())
    try:
        found = await wait_until(
            lambda: (
                next((m for line in log if (m := LISTENING.search(line))), None)
                or process.returncode is not None
            ),
            "the server to listen",
        )
        assert isinstance(found, re.Match), log
        yield TcpServer(process, found.group(1), int(found.group(2)), log)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await reading


async def status(client: LanguageClient) -> dict[str, object]:
    result = await answer(client.protocol.send_request_async("infill/status", {}))
    return dict(result._asdict())


async def initialized_client(port: int) -> LanguageClient:
    client = LanguageClient("infill-lsp tests", "1")
    await client.start_tcp("127.0.0.1", port)
    await answer(
        client.initialize_async(
            types.InitializeParams(capabilities=types.ClientCapabilities(), process_id=None)
        )
    )
    client.initialized(types.InitializedParams())
    return client


def server_command(models: str, folder: Path) -> Sequence[str]:
    """The server on the real default models, or on scripted models."""
    if models == "real":
        return SERVER_COMMAND
    coder, chat = write_script(folder, "coder", ["x\n"]), write_script(folder, "chat", ["-"])
    return scripted_command(coder, chat)


@pytest.mark.parametrize("models", [pytest.param("real", marks=pytest.mark.slow), "scripted"])
async def test_one_client_at_a_time_and_its_disconnect_ends_the_server_cleanly(
    models: str, tmp_path: Path
) -> None:
    async with tcp_server(command=server_command(models, tmp_path)) as server:
        assert server.host == "127.0.0.1"
        client = await initialized_client(server.port)
        assert "status" in await status(client)

        # A second editor is turned away; the first one goes on as before.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await answer(reader.read()) == b""
        writer.close()
        assert "status" in await status(client)

        # The first editor goes away without a word: the server ends, status 0, no traceback.
        transport = client.protocol.writer
        assert transport is not None
        transport.close()
        await client.stop()  # type: ignore[no-untyped-call]  # pygls: unannotated
        assert await answer(server.process.wait()) == 0
    log = "\n".join(server.log)
    assert "one client at a time" in log
    assert "client disconnected" in log
    assert "Traceback" not in log, log


@pytest.mark.slow
async def test_shutdown_and_exit_end_the_server_with_status_0() -> None:
    async with tcp_server() as server:
        client = await initialized_client(server.port)
        await answer(client.shutdown_async(None))
        client.exit(None)
        assert await answer(server.process.wait()) == 0
        await client.stop()  # type: ignore[no-untyped-call]  # pygls: unannotated
    assert "Traceback" not in "\n".join(server.log)


async def test_allow_remote_lets_the_server_listen_on_every_address() -> None:
    async with tcp_server("--host", "0.0.0.0", "--allow-remote") as server:
        assert server.host == "0.0.0.0"
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.close()  # connected, then gone: the server ends
        assert await answer(server.process.wait()) == 0


def _ipv6_loopback() -> bool:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        return True
    return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
async def test_a_bracketed_ipv6_loopback_host_is_listened_on() -> None:
    """`--host [::1]` passes the loopback check, and the server listens there (as the engine
    server does: both take the address with or without its brackets)."""
    async with tcp_server("--host", "[::1]") as server:
        assert server.host == "[::1]"
        _, writer = await asyncio.open_connection("::1", server.port)
        writer.close()  # connected, then gone: the server ends
        assert await answer(server.process.wait()) == 0


@pytest.mark.slow
async def test_a_real_client_over_tcp_gets_a_completion_and_the_log_goes_to_the_log_file(
    tmp_path: Path,
) -> None:
    """`serve --tcp --log-file PATH` as a user starts it: an editor connects over loopback and
    gets a real suggestion from the default model; every log line (the listening address, the
    completion, the engine's figures for its job) is in the file, and none on stderr."""
    log_file = tmp_path / "logs" / "infill lsp.log"  # a folder that exists; a space in the name
    log_file.parent.mkdir()
    process = await asyncio.create_subprocess_exec(
        *SERVER_COMMAND,
        "--tcp",
        "--port",
        "0",
        "--log-file",
        str(log_file),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=server_env(),
    )
    client: LanguageClient | None = None
    try:
        found = await wait_until(
            lambda: (
                (log_file.exists() and LISTENING.search(log_file.read_text(encoding="utf-8")))
                or process.returncode is not None
            ),
            "the server to listen (said in its log file)",
        )
        assert isinstance(found, re.Match), found
        assert found.group(1) == "127.0.0.1"
        client = await initialized_client(int(found.group(2)))
        state = await poll_until(
            lambda: status(client), lambda s: s["status"] != "loading", "the model to load"
        )
        assert state["status"] == "ready", state

        uri = "file:///tcp/fibonacci.py"
        text = "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return "
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="python", version=1, text=text
                )
            )
        )
        result = await answer(
            client.text_document_inline_completion_async(
                types.InlineCompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    position=types.Position(line=3, character=11),
                    context=types.InlineCompletionContext(
                        trigger_kind=types.InlineCompletionTriggerKind.Invoked
                    ),
                )
            )
        )
        items = result.items if isinstance(result, types.InlineCompletionList) else result
        assert items, "the default model suggests something after `return `"
        assert all(str(item.insert_text).strip() for item in items)
        report = await answer(client.protocol.send_request_async("infill/stats", None))
        (engine,) = [e for e in plain_json(report)["engines"] if "completion" in e["roles"]]
        job_ids = [job["request_id"] for job in engine["jobs"] if job["document"] == uri]
        assert job_ids

        await answer(client.shutdown_async(None))
        client.exit(None)
        assert await answer(process.wait()) == 0
    finally:
        if client is not None:
            await client.stop()  # type: ignore[no-untyped-call]  # pygls: unannotated
        if process.returncode is None:
            process.kill()
        stdout, stderr = await process.communicate()
    log = log_file.read_text(encoding="utf-8")
    assert "listening on 127.0.0.1:" in log
    assert "client connected from" in log
    assert "inline fibonacci.py:" in log
    # The engine's line for each of the completion's jobs: an invoked request's items are a
    # scoring and a branching where the model writes them together, else generations.
    kinds = r"(prompt \d+ tokens|scored \d+ continuations|\d+ branches after)"
    for job_id in job_ids:
        assert re.search(rf"completion {re.escape(job_id)}: {kinds}", log), job_id
    assert "Traceback" not in log
    assert stdout == b""  # over TCP, stdout carries nothing at all
    # Our log lines went to the file only (llama.cpp may still print its own notes).
    ours = [line for line in stderr.decode(errors="replace").splitlines() if LOG_LINE.match(line)]
    assert ours == []
