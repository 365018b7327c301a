"""The scripted model of `serve --backend scripted` (tests/scripted_backend.py): its file,
how it chooses and records answers, and that only the tests' command line (tests/scripted_cli.py)
can choose it: neither the shipped `infill-lsp` nor a client's settings offer it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import scripted_cli
from scripted_backend import SCRIPTED_BACKEND, ScriptedBackend, load_script, load_scripted_model

from engine import models
from engine.engine import Engine
from engine.errors import ModelLoadError
from engine.models import load_backend, model_spec
from engine.specs import ModelOptions, ModelSpec
from engine.types import ChatMessage, GenerationRequest, Role, SamplingParams
from lsp_server import cli
from lsp_server.settings import parse_settings


def script(tmp_path: Path, **content: Any) -> Path:
    path = tmp_path / "model.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


@pytest.fixture
def scripted_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted backend registered for this test only, as tests/scripted_cli.py does."""
    monkeypatch.setitem(models.LOADERS, SCRIPTED_BACKEND, load_scripted_model)


@pytest.mark.usefixtures("scripted_offered")
def test_the_command_line_loads_a_script_for_each_role(tmp_path: Path) -> None:
    path = script(tmp_path, name="coder", script=["x"])
    options = ModelOptions(backend="scripted", model=str(path), chat_model=str(path))
    spec = model_spec(Role.COMPLETION, options)
    assert isinstance(spec, ModelSpec)
    backend = load_backend(spec)
    assert isinstance(backend, ScriptedBackend)
    assert backend.info.backend == "scripted"
    assert backend.info.path == str(path)
    assert backend.info.name == "coder"
    assert backend.info.has_chat_template
    # Like the default models, it has no FIM tokens unless the script says so.
    assert backend.special_token_id("<fim_prefix>") is None
    assert backend.special_token_id("<eos>") == 1


def run(engine: Engine, prompt: str, n: int = 1) -> list[str]:
    async def go() -> list[str]:
        request = GenerationRequest(prompt=prompt, sampling=SamplingParams(max_tokens=50, n=n))
        return [c.text for c in await engine.collect(request)]

    return asyncio.run(go())


def test_entries_are_chosen_by_what_the_prompt_holds_and_the_calls_recorded(
    tmp_path: Path,
) -> None:
    path = script(
        tmp_path,
        script=[{"match": "beta", "text": "for beta"}, "first", "last"],
        record="calls.jsonl",
    )
    engine = Engine(load_script(path))
    try:
        assert run(engine, "alpha") == ["first"]
        assert run(engine, "the beta") == ["for beta"]
        assert run(engine, "alpha") == ["last"]
        assert run(engine, "beta again") == ["last"]  # the last entry left is played again
    finally:
        engine.close()
    with (tmp_path / "calls.jsonl").open(encoding="utf-8") as f:
        events = [json.loads(line) for line in f]
    assert [(e["event"], e["call"]) for e in events] == [
        (event, call) for call in range(4) for event in ("start", "end")
    ]
    assert [e["prompt"] for e in events if e["event"] == "start"] == [
        "<bos>alpha",
        "<bos>the beta",
        "<bos>alpha",
        "<bos>beta again",
    ]
    assert [e["yielded"] for e in events if e["event"] == "end"] == [5, 8, 4, 4]


def test_a_chat_prompt_is_rendered_with_the_scripts_template(tmp_path: Path) -> None:
    path = script(tmp_path, script=["Hi."], record="calls.jsonl")
    engine = Engine(load_script(path))
    try:

        async def go() -> str:
            request = GenerationRequest(messages=(ChatMessage("user", "Hello?"),), role=Role.CHAT)
            (choice,) = await engine.collect(request)
            return choice.text

        assert asyncio.run(go()) == "Hi."
    finally:
        engine.close()
    start = json.loads((tmp_path / "calls.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert start["prompt"] == "<bos><|user|>Hello?\n<|assistant|>"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "cannot read the script"),
        ("[1]", "is not a JSON object"),
        ('{"scirpt": []}', "unknown keys: scirpt"),
        ('{"script": "x"}', "a list of entries"),
        ('{"script": [{"text": 3}]}', "entry 0: an entry's text"),
        ('{"script": [{"text": "x", "step_seconds": "slow"}]}', "step_seconds is a number"),
        ('{"context": "big"}', "a bad value"),
    ],
)
def test_a_bad_script_is_a_load_error_naming_the_file(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ModelLoadError, match=message) as caught:
        load_script(path)
    assert str(path) in str(caught.value)


@pytest.mark.usefixtures("scripted_offered")
def test_the_scripted_backend_needs_both_scripts_on_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as caught:
        scripted_cli.main(["serve", "--backend", "scripted", "--model", "a.json"])
    assert caught.value.code == 2
    assert "--backend scripted needs --model and --chat-model" in capsys.readouterr().err


def serve_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_the_shipped_command_never_offers_the_scripted_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "scripted" not in serve_help(capsys)
    with pytest.raises(SystemExit) as caught:
        cli.main(["serve", "--backend", "scripted", "--model", "a.json", "--chat-model", "b.json"])
    assert caught.value.code == 2
    assert "invalid choice: 'scripted'" in capsys.readouterr().err


@pytest.mark.usefixtures("scripted_offered")
def test_the_tests_command_line_offers_the_scripted_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "{auto,llama.cpp,transformers,openai,scripted}" in serve_help(capsys)


def test_a_client_cannot_choose_the_scripted_backend() -> None:
    settings, problems = parse_settings({"backend": "scripted"})
    assert settings.backend == "auto"
    (problem,) = problems
    assert problem.startswith("infill.backend must be one of auto, llama.cpp, transformers")
