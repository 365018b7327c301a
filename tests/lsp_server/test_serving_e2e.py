"""The server as an editor sees it while it starts, and with a model of the other local backend:

- the model's load as work-done progress (`window/workDoneProgress/create`, then `$/progress`
  begin, any reports, end) on a client that shows progress;
- a transformers model (a tiny random Llama built here from a config: no model hub, no
  download) serving inline completions through the real server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsp_helpers import SERVER_COMMAND, Session, completion_engine, document_jobs, lsp_session
from lsprotocol import types
from pytest_lsp import client_capabilities
from scripted_lsp import scripted_command, write_script

from engine.default_models import default_chat_model, default_completion_model

pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.slow]

VS_CODE = "visual_studio_code@v1.65.2"
FAST = {"infill": {"maxTokensSingleLine": 8, "maxTokensMultiLine": 16, "debounceMs": 0}}


async def load_progress(session: Session) -> list[object]:
    """The `$/progress` values of the server's model-load token (the one whose name says so),
    once its end has come. The end goes out as the load settles: a status request that sees
    the model ready may overtake it, so each round trip lets it arrive."""
    async with asyncio.timeout(60):
        while True:
            await session.wait_for_messages()
            reports = session.client.progress_reports
            tokens = [t for t in reports if str(t).startswith("infill-load-")]
            assert len(tokens) <= 1, tokens
            if tokens and isinstance(reports[tokens[0]][-1], types.WorkDoneProgressEnd):
                return list(reports[tokens[0]])


@pytest.mark.parametrize("models", ["real", "scripted"])
async def test_the_model_load_is_shown_as_progress_that_ends_naming_the_ready_model(
    models: str, tmp_path: Path
) -> None:
    capabilities = client_capabilities(VS_CODE)
    assert capabilities.window is not None
    assert capabilities.window.work_done_progress  # this client shows progress
    command = SERVER_COMMAND
    if models == "scripted":
        coder = write_script(tmp_path, "coder", ["x\n"])
        command = scripted_command(coder, write_script(tmp_path, "chat", ["-"]))
    async with lsp_session(capabilities, FAST, command) as session:
        status = await session.until_loaded()
        assert status["status"] == "ready", status
        progress = await load_progress(session)
    begin, *reports, end = progress
    assert isinstance(begin, types.WorkDoneProgressBegin)
    assert begin.title == "infill: loading the completion model"
    assert all(isinstance(r, types.WorkDoneProgressReport) for r in reports)
    assert isinstance(end, types.WorkDoneProgressEnd)
    assert end.message == f"infill: {status['model']} ready"
    if models == "scripted":
        assert end.message == "infill: coder ready"


async def test_a_load_that_fails_ends_its_progress_with_the_error() -> None:
    options = {"infill": {"model": "/nonexistent/model.gguf"}}
    async with lsp_session(client_capabilities(VS_CODE), options) as session:
        status = await session.until_loaded()
        assert status["status"] == "error"
        progress = await load_progress(session)
    assert isinstance(progress[0], types.WorkDoneProgressBegin)
    end = progress[-1]
    assert isinstance(end, types.WorkDoneProgressEnd)
    assert end.message is not None
    assert "/nonexistent/model.gguf" in end.message


async def test_a_client_without_progress_support_gets_no_progress() -> None:
    capabilities = client_capabilities(VS_CODE)
    assert capabilities.window is not None
    capabilities.window.work_done_progress = False
    async with lsp_session(capabilities, FAST) as session:
        assert (await session.until_loaded())["status"] == "ready"
        await session.wait_for_messages()
        assert session.client.progress_reports == {}


async def test_a_transformers_model_serves_inline_completions_through_the_server(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from test_transformers_backend import build_model_folder

    folder = build_model_folder(tmp_path / "tiny llama")  # a space in the path, too
    options = {"infill": {**FAST["infill"], "model": str(folder), "device": "cpu"}}
    async with lsp_session(client_capabilities(VS_CODE), options) as session:
        status = await session.until_loaded()
        assert status["status"] == "ready", status
        assert status["backend"] == "transformers"
        assert status["model_path"] == str(folder)
        assert status["fim_family"]  # its tokenizer has FIM tokens: a FIM prompt, not a fallback

        text = "def add(a, b):\n    return \n"
        uri = session.open(text)
        cursor = session.position(text, 1, 11)
        items = await session.inline(uri, cursor)
        # A random model writes random text: what any answer must hold, not what it says.
        for item in items:
            assert str(item.insert_text).strip()
            assert item.range is not None
            assert item.range.start == cursor
        _, (job,) = await document_jobs(
            session, uri, lambda running, finished: not running and finished, "the job's end"
        )
        assert job["prompt_tokens"] > 0
        assert 1 <= job["generated_tokens"] <= 8
        assert job["finish_reasons"] in (["stop"], ["length"])
        engine = await completion_engine(session)
        assert engine["model"] == status["model"]


async def test_the_environment_names_each_roles_model_and_a_setting_beats_it() -> None:
    """README "Default models": with no setting, `INFILL_MODEL` names the completion model
    (here SmolLM2 in place of Gemma); the `model` setting, when given, wins over the
    environment. (The chat model loads on first use; the same lookup names it.)"""
    smol = str(default_chat_model())
    env = {"INFILL_MODEL": smol}
    capabilities = client_capabilities("visual_studio_code@v1.65.2")
    async with lsp_session(capabilities, None, env=env) as session:
        status = await session.until_loaded()
        assert status["status"] == "ready", status
        assert status["model_path"] == smol
    gemma = str(default_completion_model())
    async with lsp_session(capabilities, {"model": gemma}, env=env) as session:
        status = await session.until_loaded()
        assert status["status"] == "ready", status
        assert status["model_path"] == gemma
