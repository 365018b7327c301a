"""A hub model (`hf:ORG/REPO/FILE.gguf`) named in the real server's settings, downloaded from a
fake hub on loopback (tests/fake_hub.py) while the server keeps answering: the editor sees the
download as work-done progress and in `infill/status`, and completions come once the model has
loaded. The model is the scripted one (its file a JSON script), made large enough for the
download to report its progress in steps."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from fake_hub import FakeHub, FakeRepo
from lsp_helpers import lsp_session, poll_until
from lsprotocol import types
from pytest_lsp import client_capabilities
from scripted_lsp import SCRIPTED_SERVER_COMMAND

pytestmark = [pytest.mark.asyncio(loop_scope="function"), pytest.mark.slow]

VS_CODE = "visual_studio_code@v1.65.2"
MODEL = "hf:org/coder/coder.gguf"
# huggingface_hub hands on what it receives 10 MiB at a time: three reports, then the last.
SIZE = 25 << 20


def coder_script() -> bytes:
    text = json.dumps({"name": "hub-coder", "script": ["x = 1"], "fim": False})
    return text.encode() + b" " * (SIZE - len(text))


async def test_a_hub_model_downloads_with_progress_while_the_server_answers(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    release = threading.Event()  # the download stops halfway until the test has seen it there
    fake_hub.repos["org/coder"] = FakeRepo({"coder.gguf": coder_script()}, release=release)
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps({"name": "chat", "script": ["-"]}), encoding="utf-8")
    command = [*SCRIPTED_SERVER_COMMAND, "--backend", "scripted", "--model", MODEL]
    command += ["--chat-model", str(chat)]
    env = {
        "HF_ENDPOINT": fake_hub.url,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "INFILL_CACHE_DIR": str(tmp_path / "cache"),
    }
    assert not any(key in os.environ for key in ("HF_HUB_OFFLINE", "HF_TOKEN"))
    options = {"infill": {"model": MODEL, "debounceMs": 0}}
    async with lsp_session(client_capabilities(VS_CODE), options, command, env) as session:
        # Halfway: the server answers, says it is loading, and how far the download is.
        status = await poll_until(
            session.status,
            lambda status: status["download"] is not None and status["download"].percent,
            "the download to begin",
        )
        assert status["status"] == "loading"
        download = status["download"]
        assert download.model == MODEL
        assert download.phase == "downloading"
        assert download.total_bytes == SIZE
        assert 0 < download.percent < 100
        assert download.message.startswith(f"{MODEL}: {download.percent}% (")
        release.set()

        status = await session.until_loaded()
        assert status["status"] == "ready", status
        assert status["model"] == "hub-coder"
        assert status["model_path"] == str(
            tmp_path / "cache" / "hf" / "org" / "coder" / "coder.gguf"
        )
        assert status["download"] is None
        assert status["fim_note"].startswith("no fill-in-the-middle tokens")

        uri = session.open("def f():\n    ", name="hub")
        items = await session.inline(uri, types.Position(line=1, character=4), invoked=True)
        assert items
        assert "x = 1" in str(items[0].insert_text)

        reports = session.client.progress_reports
        (token,) = [t for t in reports if str(t).startswith("infill-download-")]
        begin, *steps, end = reports[token]
    assert isinstance(begin, types.WorkDoneProgressBegin)
    assert begin.title == f"infill: downloading {MODEL}"
    assert all(isinstance(step, types.WorkDoneProgressReport) for step in steps)
    percents = [step.percentage for step in steps if step.percentage is not None]
    assert len(percents) >= 3
    assert percents == sorted(percents)
    assert percents[-1] == 100
    assert isinstance(end, types.WorkDoneProgressEnd)
    assert end.message == f"{MODEL}: downloaded (26.2 MB, sha256 checked)"
    assert len(fake_hub.downloads()) == 1
