"""Models named `hf:ORG/REPO/FILE.gguf` or `hf:ORG/REPO` (engine/hub.py), downloaded from a fake
hub on loopback (tests/fake_hub.py) that `HF_ENDPOINT` points to, through the real command:
`doctor` with the scripted model (whose model file is a JSON script) for the download and
its wiring. Each run is a process of its own, as a user's: huggingface_hub reads
`HF_ENDPOINT` and `HF_HUB_OFFLINE` once, when it is imported."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_hub import FakeHub, FakeRepo

from engine.default_models import GEMMA_FILE, default_chat_model, default_completion_model
from engine.specs import parse_hub_model
from lsp_server.settings import parse_settings

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED_CLI = [sys.executable, str(ROOT / "tests" / "scripted_cli.py")]


def script(name: str, *, fim: bool = False, padding: int = 0) -> bytes:
    """A scripted model's file; `padding` bytes of spaces make it as large as a test needs."""
    return json.dumps({"name": name, "script": ["x = 1"], "fim": fim}).encode() + b" " * padding


def hub_env(hub: FakeHub, tmp_path: Path, **more: str) -> dict[str, str]:
    """This environment, the hub's URL in HF_ENDPOINT, and our cache and the hub's config in
    the test's folder (no token of the machine's, no cache shared with another test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "INFILL_"))}
    env |= {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "INFILL_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    return env | more


def doctor(
    hub: FakeHub, tmp_path: Path, model: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """`infill-lsp doctor --json` on the scripted backend with `model` for completion (and next
    edits) and a local chat script; the process and its report (None if it printed none)."""
    chat = tmp_path / "chat.json"
    chat.write_bytes(script("chat"))
    command = [*SCRIPTED_CLI, "doctor", "--json", "--backend", "scripted", "--model", model]
    result = subprocess.run(
        [*command, "--chat-model", str(chat)],
        capture_output=True,
        text=True,
        timeout=300,
        env=hub_env(hub, tmp_path, **env),
        cwd=tmp_path,
        check=False,
    )
    try:
        report = json.loads(result.stdout)
    except ValueError:
        report = None
    return result, report


def cached(tmp_path: Path, repo: str, *parts: str) -> Path:
    return tmp_path / "cache" / "hf" / repo / Path(*parts)


def test_a_hub_gguf_is_downloaded_once_checked_and_then_used_without_asking_the_hub(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    fake_hub.repos["org/coder"] = FakeRepo({"coder.gguf": script("hub-coder"), "README.md": b"hi"})
    result, report = doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf")
    assert result.returncode == 0, result.stderr
    assert report is not None
    path = cached(tmp_path, "org/coder", "coder.gguf")
    assert report["completion"]["ok"]
    assert report["completion"]["model_path"] == str(path)
    assert report["completion"]["model_name"] == "hub-coder"
    assert report["next_edit"]["shared_with_other_role"]  # one model for both roles
    assert path.read_bytes() == script("hub-coder")
    assert fake_hub.downloads() == [f"/org/coder/resolve/{FakeRepo({}).commit}/coder.gguf"]
    # What the user saw: the download's progress, then that it was checked.
    assert "infill-lsp: hf:org/coder/coder.gguf: 100% (" in result.stderr
    assert "hf:org/coder/coder.gguf: downloaded (" in result.stderr
    assert "sha256 checked" in result.stderr

    fake_hub.requests.clear()
    again, report = doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf")
    assert again.returncode == 0, again.stderr
    assert report is not None
    assert report["completion"]["model_path"] == str(path)
    assert fake_hub.requests == []  # not even a look at the hub
    assert "downloaded" not in again.stderr

    # Offline, the cached model is used the same way.
    offline, report = doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf", HF_HUB_OFFLINE="1")
    assert offline.returncode == 0, offline.stderr
    assert report is not None
    assert report["completion"]["ok"]
    assert fake_hub.requests == []


def test_a_cached_file_cut_short_is_downloaded_again(fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.repos["org/coder"] = FakeRepo({"coder.gguf": script("hub-coder")})
    assert doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf")[0].returncode == 0
    path = cached(tmp_path, "org/coder", "coder.gguf")
    path.write_bytes(path.read_bytes()[:10])
    fake_hub.requests.clear()
    result, report = doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf")
    assert result.returncode == 0, result.stderr
    assert report is not None
    assert report["completion"]["model_name"] == "hub-coder"
    assert len(fake_hub.downloads()) == 1
    assert path.read_bytes() == script("hub-coder")


def test_offline_without_the_model_in_the_cache_says_so_and_asks_nothing(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    fake_hub.repos["org/coder"] = FakeRepo({"coder.gguf": script("hub-coder")})
    result, report = doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf", HF_HUB_OFFLINE="1")
    assert result.returncode == 1
    assert report is not None
    assert not report["completion"]["ok"]
    error = report["completion"]["error"]
    assert "hf:org/coder/coder.gguf is not in the cache" in error
    assert "HF_HUB_OFFLINE forbids downloading it" in error
    assert fake_hub.requests == []
    assert "Traceback" not in result.stderr


def test_a_file_whose_sha256_is_not_the_hubs_is_removed_and_refused(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    data = script("hub-coder")
    stated = hashlib.sha256(b"another file").hexdigest()
    fake_hub.repos["org/coder"] = FakeRepo(
        {"coder.gguf": data}, stated_sha256={"coder.gguf": stated}
    )
    result, report = doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf")
    assert result.returncode == 1
    assert report is not None
    error = report["completion"]["error"]
    assert f"the sha256 of the downloaded coder.gguf is {hashlib.sha256(data).hexdigest()}" in error
    assert f"the hub's is {stated}: the file was removed" in error
    assert not cached(tmp_path, "org/coder", "coder.gguf").exists()
    assert "download failed" in result.stderr

    # Once the hub serves what it states, the next load downloads it again and uses it.
    fake_hub.repos["org/coder"].stated_sha256.clear()
    result, report = doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf")
    assert result.returncode == 0, result.stderr
    assert report is not None
    assert report["completion"]["model_name"] == "hub-coder"


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("hf:org/coder/missing.gguf", "the hub has no file missing.gguf in org/coder"),
        ("hf:org/nothing/m.gguf", "the hub has no repository org/nothing (hf:org/nothing/m.gguf)"),
    ],
)
def test_a_missing_file_or_repository_is_a_clear_error(
    fake_hub: FakeHub, tmp_path: Path, model: str, message: str
) -> None:
    fake_hub.repos["org/coder"] = FakeRepo({"coder.gguf": script("hub-coder")})
    result, report = doctor(fake_hub, tmp_path, model)
    assert result.returncode == 1
    assert report is not None
    assert message in report["completion"]["error"]
    assert "Traceback" not in result.stderr
    assert fake_hub.downloads() == []


def test_a_split_gguf_is_downloaded_whole_with_progress_across_its_parts(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    # llama.cpp loads the first part and finds the others beside it; the script is the first
    # part here, and the others are bytes of their own.
    names = [f"big-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    parts = {names[0]: script("split-coder"), names[1]: b"b" * 1000, names[2]: b"c" * 1000}
    fake_hub.repos["org/split"] = FakeRepo(parts)
    result, report = doctor(fake_hub, tmp_path, f"hf:org/split/{names[0]}")
    assert result.returncode == 0, result.stderr
    assert report is not None
    assert report["completion"]["model_name"] == "split-coder"
    for name, data in parts.items():
        assert cached(tmp_path, "org/split", name).read_bytes() == data
    # The bytes of all three parts, counted as one download.
    assert sum(len(data) for data in parts.values()) == 2058
    assert "split/big-00001-of-00003.gguf: 100% (2.1 kB of 2.1 kB)" in result.stderr


def test_the_status_of_a_model_without_fim_tokens_says_what_that_costs(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    fake_hub.repos["org/coder"] = FakeRepo(
        {"coder.gguf": script("plain"), "fim.gguf": script("fim", fim=True)}
    )
    _, plain = doctor(fake_hub, tmp_path, "hf:org/coder/coder.gguf")
    _, fim = doctor(fake_hub, tmp_path, "hf:org/coder/fim.gguf")
    assert plain is not None
    assert fim is not None
    note = plain["completion"]["fim_note"]
    assert note.startswith("no fill-in-the-middle tokens: ")
    assert "the code after it cannot steer them" in note
    assert "47 with suffixRanking" in note
    assert fim["completion"]["fim_note"] is None
    assert "fim_note" not in plain["chat"]  # a fact of the completion model only


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "repo", "filename"),
    [
        ("hf:Qwen/Qwen2.5-Coder-1.5B", "Qwen/Qwen2.5-Coder-1.5B", None),
        (
            "hf:bartowski/Qwen2.5-Coder-7B-GGUF/Qwen2.5-Coder-7B-Q4_K_M.gguf",
            "bartowski/Qwen2.5-Coder-7B-GGUF",
            "Qwen2.5-Coder-7B-Q4_K_M.gguf",
        ),
        (
            "hf:org/repo/Q4_K_M/model-00001-of-00002.GGUF",
            "org/repo",
            "Q4_K_M/model-00001-of-00002.GGUF",
        ),
    ],
)
def test_hub_names_that_are_taken(name: str, repo: str, filename: str | None) -> None:
    model = parse_hub_model(name)
    assert model is not None
    assert (model.repo_id, model.filename, str(model)) == (repo, filename, name)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("hf:org", "names no hub repository"),
        ("hf:/etc/passwd.gguf", "names no hub repository"),
        ("hf:org/../x.gguf", "names no hub repository"),
        ("hf:org/re..po", "has no '..' or '--'"),
        ("hf:org/repo/../../x.gguf", "no empty, hidden or '..' part"),
        ("hf:org/repo//x.gguf", "no empty, hidden or '..' part"),
        ("hf:org/repo/", "no empty, hidden or '..' part"),
        ("hf:org/repo/.hidden.gguf", "no empty, hidden or '..' part"),
        ("hf:org/repo/a b.gguf", "no empty, hidden or '..' part"),
        ("hf:org/repo/x.gguf;rm", "no empty, hidden or '..' part"),
        ("hf:org/repo/model.safetensors", "a file named on the hub is a .gguf file"),
        ("hf:org/" + "r" * 600, "at most 512 characters"),
    ],
)
def test_bad_hub_names_are_refused_saying_why(name: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_hub_model(name)


def test_a_local_path_is_no_hub_name() -> None:
    assert parse_hub_model("/models/hf:x.gguf") is None
    assert parse_hub_model("models/coder.gguf") is None


def test_a_bad_hub_name_in_the_settings_is_a_message_and_the_default() -> None:
    settings, problems = parse_settings({"model": "hf:org", "chatModel": "hf:org/repo"})
    assert settings.model is None
    assert settings.chat_model == "hf:org/repo"
    (problem,) = problems
    assert problem.startswith("infill.model must be a path or a hub model name ('hf:org' names")


def test_a_bad_hub_name_on_the_command_line_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "doctor", "--model", "hf:org/repo/x.bin"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 2
    assert (
        "argument --model: 'hf:org/repo/x.bin': a file named on the hub is a .gguf" in result.stderr
    )


def test_a_bad_hub_name_in_the_environment_names_the_variable(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=hub_env(fake_hub, tmp_path, INFILL_CHAT_MODEL="hf:org/repo/x.bin"),
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["chat"]["error"].startswith("$INFILL_CHAT_MODEL: 'hf:org/repo/x.bin': a file")
    assert fake_hub.requests == []


FETCH = "import sys; from engine.hub import fetch; from engine.specs import parse_hub_model; "
FETCH += "print(fetch(parse_hub_model(sys.argv[1])))"


def fetch_in_process(hub: FakeHub, tmp_path: Path, model: str) -> subprocess.CompletedProcess[str]:
    """engine/hub.py's `fetch` alone, in a process of its own (the hub's settings are read
    once, at import)."""
    return subprocess.run(
        [sys.executable, "-c", FETCH, model],
        capture_output=True,
        text=True,
        timeout=300,
        env=hub_env(hub, tmp_path),
        cwd=tmp_path,
        check=False,
    )


def test_a_hub_repository_is_fetched_as_a_transformers_folder_of_what_it_needs(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    weights = b"\x00" * 5000
    fake_hub.repos["org/tiny"] = FakeRepo(
        {
            "config.json": b'{"model_type": "llama"}',
            "tokenizer.json": b"{}",
            "model.safetensors": weights,
            "pytorch_model.bin": b"old weights",  # the same weights pickled: not needed
            "README.md": b"# tiny",
            "onnx/model.onnx": b"onnx",
            "tiny.Q4_K_M.gguf": b"gguf",
        }
    )
    result = fetch_in_process(fake_hub, tmp_path, "hf:org/tiny")
    assert result.returncode == 0, result.stderr
    folder = cached(tmp_path, "org/tiny")
    assert result.stdout.strip() == str(folder)
    files = sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and ".infill" not in p.parts and ".cache" not in p.parts
    )
    assert files == ["config.json", "model.safetensors", "tokenizer.json"]
    assert (folder / "model.safetensors").read_bytes() == weights
    commit = FakeRepo({}).commit
    assert fake_hub.requests[:2] == [
        "GET /api/models/org/tiny/revision/main",
        f"GET /api/models/org/tiny/tree/{commit}",
    ]

    fake_hub.requests.clear()
    again = fetch_in_process(fake_hub, tmp_path, "hf:org/tiny")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == str(folder)
    assert fake_hub.requests == []


def test_a_hub_repository_without_a_config_is_no_model_folder(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    fake_hub.repos["org/ggufs"] = FakeRepo({"m.Q4_K_M.gguf": b"gguf", "README.md": b"#"})
    result = fetch_in_process(fake_hub, tmp_path, "hf:org/ggufs")
    assert result.returncode == 1
    assert "hf:org/ggufs has no config.json: it is not a transformers model folder" in result.stderr
    assert fake_hub.downloads() == []


@pytest.mark.slow
def test_a_real_gguf_from_the_hub_loads_with_llama_cpp(fake_hub: FakeHub, tmp_path: Path) -> None:
    """The default completion model's GGUF (Gemma 3 270M, 253 MB), served by the fake hub:
    downloaded, checked and loaded by llama.cpp as any GGUF named by path, and `doctor` says
    what its missing FIM tokens cost."""
    gguf = default_completion_model()
    fake_hub.repos["google/gemma"] = FakeRepo({GEMMA_FILE: gguf.read_bytes()})
    command = [sys.executable, "-m", "lsp_server.cli", "doctor", "--json"]
    command += ["--model", f"hf:google/gemma/{GEMMA_FILE}"]
    result = subprocess.run(
        [*command, "--chat-model", str(default_chat_model())],
        capture_output=True,
        text=True,
        timeout=600,
        env=hub_env(fake_hub, tmp_path),
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    completion = json.loads(result.stdout)["completion"]
    path = cached(tmp_path, "google/gemma", GEMMA_FILE)
    assert completion["model_path"] == str(path)
    assert completion["backend"] == "llama.cpp"
    assert completion["fim_family"] is None
    assert completion["fim_note"].startswith("no fill-in-the-middle tokens: ")
    assert path.stat().st_size == gguf.stat().st_size
    assert f"hf:google/gemma/{GEMMA_FILE}: downloaded (253.1 MB, sha256 checked)" in result.stderr


def test_a_repository_named_for_llama_cpp_asks_for_a_file_and_downloads_nothing(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    fake_hub.repos["org/tiny"] = FakeRepo({"config.json": b"{}", "m.gguf": b"gguf"})
    command = [sys.executable, "-m", "lsp_server.cli", "doctor", "--json"]
    result = subprocess.run(
        [*command, "--backend", "llama.cpp", "--model", "hf:org/tiny"],
        capture_output=True,
        text=True,
        timeout=300,
        env=hub_env(fake_hub, tmp_path),
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 1
    error = json.loads(result.stdout)["completion"]["error"]
    assert error == (
        "hf:org/tiny is a model folder, for transformers; llama.cpp loads a GGUF file: name "
        "one, hf:org/tiny/FILE.gguf"
    )
    assert fake_hub.requests == []


@pytest.mark.slow
def test_a_hub_repository_loads_as_a_transformers_model(fake_hub: FakeHub, tmp_path: Path) -> None:
    """A tiny random Llama (built here, as tests/engine/test_transformers_backend.py builds it)
    served as a hub repository, named `hf:org/tiny` for every role: fetched once as a model
    folder and loaded by transformers from our cache."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from test_transformers_backend import build_model_folder

    built = build_model_folder(tmp_path / "built")
    files = {str(p.relative_to(built)): p.read_bytes() for p in built.rglob("*") if p.is_file()}
    fake_hub.repos["org/tiny"] = FakeRepo(files | {"README.md": b"# tiny"})
    command = [sys.executable, "-m", "lsp_server.cli", "doctor", "--json", "--device", "cpu"]
    result = subprocess.run(
        [*command, "--model", "hf:org/tiny", "--chat-model", "hf:org/tiny"],
        capture_output=True,
        text=True,
        timeout=600,
        env=hub_env(fake_hub, tmp_path),
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    folder = cached(tmp_path, "org/tiny")
    for role in ("completion", "chat", "next_edit"):
        assert report[role]["backend"] == "transformers"
        assert report[role]["model_path"] == str(folder)
        assert report[role]["shared_with_other_role"]
    assert report["completion"]["fim_family"] is not None  # the tiny model has FIM tokens
    assert report["completion"]["fim_note"] is None
    assert (folder / "config.json").read_bytes() == files["config.json"]
    assert not (folder / "README.md").exists()
    assert result.stderr.count("hf:org/tiny: downloaded (") == 1  # once for the three roles
