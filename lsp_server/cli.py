"""The `infill-lsp` command.

- `infill-lsp` / `infill-lsp serve [--stdio | --tcp --port N]`: the language server (TCP:
  loopback only unless `--host ADDRESS --allow-remote`; one client; its disconnect ends it);
- `infill-lsp complete PATH:LINE:COL [--json]`: one inline completion through a real server;
- `infill-lsp generate`: one JSON object per delta, stable for scripts:
  `{"index", "text", "finish_reason", "stop_reason"}` (plus `"error"` on an error delta);
- `infill-lsp doctor [--json]`: which model each role uses and how it loaded;
- `infill-lsp engine [--port N]`: both models over an OpenAI-compatible HTTP API (engine/api/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields, replace
from typing import Any, BinaryIO

from engine.accelerators import gib, llama_cpp_view, torch_view
from engine.errors import EngineError
from engine.models import ModelSet, backend_choices, model_spec
from engine.prompts import FIM_FAMILIES
from engine.specs import (
    API_KEY_ENV,
    DECODE_PATHS,
    DEVICES,
    LoadOptions,
    ModelOptions,
    ModelSpec,
    RemoteSpec,
    check_fim_family,
)
from engine.types import (
    CHAT_SAMPLING,
    COMPLETION_SAMPLING,
    ChatMessage,
    GenerationRequest,
    Role,
    SamplingParams,
    StopConditions,
)
from lsp_server.host import CompletionModel
from lsp_server.settings import Settings

log = logging.getLogger("infill_lsp")


def _model_options(*, remote: bool = True) -> argparse.ArgumentParser:
    """The flags of `LoadOptions`, one each (`--context-size` sets `context_size`); without
    `remote`, only those of a local model (the engine server has no remote backend)."""
    defaults = LoadOptions()
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("model")
    group.add_argument(
        "--backend",
        choices=backend_choices(),
        default=defaults.backend,
        help="auto: llama.cpp for a .gguf file, transformers for a folder",
    )
    group.add_argument("--context-size", type=int, default=defaults.context_size, metavar="N")
    group.add_argument(
        "--threads",
        type=int,
        default=defaults.threads,
        metavar="N",
        help="llama.cpp threads (default: every core other processes leave free, at most 8)",
    )
    group.add_argument(
        "--kv-cache-mb",
        type=int,
        default=defaults.kv_cache_mb,
        metavar="MB",
        help="memory for the KV states of recently used documents (default: sized from the "
        "model and the machine; 0: keep only the current one)",
    )
    group.add_argument(
        "--gpu-layers",
        type=int,
        default=defaults.gpu_layers,
        metavar="N",
        help="layers offloaded to the GPU (llama.cpp with CUDA; -1: all)",
    )
    group.add_argument("--device", default=defaults.device, help=f"transformers: {DEVICES}")
    group.add_argument(
        "--decode",
        default=defaults.decode,
        choices=DECODE_PATHS,
        help="transformers: the decode loop (auto: compiled on CUDA, dynamic on the CPU; "
        "static: a preallocated KV cache; compiled: that cache under torch.compile, with "
        "CUDA graphs on a GPU)",
    )
    if remote:
        _remote_options(group, with_backend=False)
    group.add_argument("-v", "--verbose", action="store_true", help="log at INFO to stderr")
    return parent


def _remote_options(group: Any, *, with_backend: bool) -> None:
    """The FIM family and the remote backend's flags (`--backend openai --endpoint URL`)."""
    if with_backend:
        group.add_argument(
            "--backend",
            choices=backend_choices(),
            default=None,
            help="openai: use the OpenAI-compatible server at --endpoint instead of a local model",
        )
    group.add_argument(
        "--fim-family",
        default=None,
        metavar="NAME",
        help=f"FIM prompt format: {', '.join(FIM_FAMILIES)} or none (default: the model's own)",
    )
    group.add_argument(
        "--endpoint",
        metavar="URL",
        help="with --backend openai: the server's API, e.g. http://127.0.0.1:8012/v1",
    )
    group.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"with --backend openai: the server's API key (default: ${API_KEY_ENV})",
    )
    group.add_argument(
        "--remote-model", metavar="NAME", help="with --backend openai: the model to ask for"
    )


def _options(
    args: argparse.Namespace,
    *,
    model: str | None,
    chat_model: str | None,
    remote_chat_model: str | None = None,
) -> ModelOptions:
    """The model options of the command line: the `_model_options` flags and a model per role
    (a local one, and a remote one for `--backend openai`)."""
    loading: dict[str, Any] = {
        f.name: getattr(args, f.name, f.default) for f in fields(LoadOptions)
    }
    try:
        loading["fim_family"] = check_fim_family(loading["fim_family"])
    except ValueError as e:
        raise SystemExit(f"infill-lsp: error: --fim-family must be {e}") from e
    return ModelOptions(
        model=model,
        chat_model=chat_model,
        remote_model=getattr(args, "remote_model", None),
        remote_chat_model=remote_chat_model,
        **loading,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infill-lsp",
        description="A local Copilot for any editor: a language server backed by a local model.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    model = _model_options()

    gen = sub.add_parser(
        "generate", parents=[model], help="stream a completion as JSON lines (one per delta)"
    )
    source = gen.add_mutually_exclusive_group()
    source.add_argument("--prompt", help="the prompt text (default: read stdin)")
    source.add_argument("--prompt-file", metavar="PATH")
    gen.add_argument(
        "--chat",
        action="store_true",
        help="the prompt is a user message, rendered with the model's chat template",
    )
    gen.add_argument("--model", help="model of the role in use (completion, or chat with --chat)")
    gen.add_argument("--max-tokens", type=int)
    gen.add_argument("--min-tokens", type=int)
    gen.add_argument("--temperature", type=float)
    gen.add_argument("--top-p", type=float)
    gen.add_argument("--top-k", type=int)
    gen.add_argument("--repetition-penalty", type=float)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--n", type=int, help="number of choices")
    gen.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="stop string (repeatable; taken literally)",
    )
    gen.add_argument(
        "--stop-json",
        action="append",
        default=[],
        metavar="JSON",
        help="stop strings as a JSON string or list, for escapes: '[\"\\n\\n\"]'",
    )
    gen.add_argument("--stop-token-id", action="append", type=int, default=[], metavar="ID")
    gen.add_argument(
        "--include-stop-str", action="store_true", help="keep a matched stop string in the output"
    )
    gen.add_argument(
        "--ignore-eos",
        action="store_true",
        help="do not stop at the model's end-of-generation tokens",
    )

    serve = sub.add_parser("serve", help="run the language server (the default command)")
    serve.add_argument("--stdio", action="store_true", help="speak LSP on stdin/stdout (default)")
    serve.add_argument(
        "--tcp", action="store_true", help="listen on TCP instead (one client at a time)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="loopback only, unless --allow-remote")
    serve.add_argument("--port", type=int, default=2087, help="0: any free port (logged)")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --host be an address others can reach (the server has no authentication)",
    )
    serve.add_argument("--log-file", metavar="PATH", help="log here instead of stderr")
    serve.add_argument("--model", help="completion model, unless the client's settings name one")
    serve.add_argument("--chat-model", help="chat model, unless the client's settings name one")
    _remote_options(serve, with_backend=True)
    serve.add_argument(
        "--remote-chat-model", metavar="NAME", help="with --backend openai: the chat model"
    )
    serve.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")

    complete = sub.add_parser(
        "complete", help="ask a real server (started as a subprocess) for one inline completion"
    )
    complete.add_argument(
        "location", metavar="PATH:LINE:COL", help="1-based line and column, in characters"
    )
    complete.add_argument("--json", action="store_true", help="print the items and timings")
    complete.add_argument("--invoked", action="store_true", help="ask as an explicit invocation")
    complete.add_argument("--model", help="completion model (GGUF file or Hugging Face folder)")
    complete.add_argument("-v", "--verbose", action="store_true", help="show the server's log")

    engine = sub.add_parser(
        "engine",
        parents=[_model_options(remote=False)],
        help="serve both models over an OpenAI-compatible HTTP API",
    )
    engine.add_argument("--host", default="127.0.0.1", help="a non-loopback host wants a key")
    engine.add_argument("--port", type=int, default=8012, help="0: any free port (printed)")
    engine.add_argument(
        "--api-key", help="Bearer key for every route but /health (default: $INFILL_API_KEY)"
    )
    engine.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN")
    engine.add_argument("--model", help="completion model (GGUF file or Hugging Face folder)")
    engine.add_argument("--chat-model", help="chat model (GGUF file or Hugging Face folder)")

    doctor = sub.add_parser("doctor", parents=[model], help="check and describe both models")
    doctor.add_argument("--model", help="completion model (GGUF file or Hugging Face folder)")
    doctor.add_argument("--chat-model", help="chat model (GGUF file or Hugging Face folder)")
    doctor.add_argument(
        "--remote-chat-model", metavar="NAME", help="with --backend openai: the chat model"
    )
    doctor.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _stop_strings(args: argparse.Namespace) -> tuple[str, ...]:
    stops = list(args.stop)
    for raw in args.stop_json:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SystemExit(f"infill-lsp: error: --stop-json is not JSON: {e}") from e
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(s, str) for s in items):
            raise SystemExit("infill-lsp: error: --stop-json takes a string or a list of strings")
        stops.extend(items)
    return tuple(stops)


def _sampling(args: argparse.Namespace) -> SamplingParams:
    base = CHAT_SAMPLING if args.chat else COMPLETION_SAMPLING
    given = {
        "max_tokens": args.max_tokens,
        "min_tokens": args.min_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "repetition_penalty": args.repetition_penalty,
        "seed": args.seed,
        "n": args.n,
    }
    return replace(base, **{k: v for k, v in given.items() if v is not None})


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return str(args.prompt)
    if args.prompt_file is not None:
        try:
            with open(args.prompt_file, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise SystemExit(f"infill-lsp: error: cannot read {args.prompt_file}: {e}") from e
    return sys.stdin.read()


async def _generate(args: argparse.Namespace) -> int:
    role = Role.CHAT if args.chat else Role.COMPLETION
    try:
        sampling = _sampling(args)
        stops = StopConditions(
            stop=_stop_strings(args),
            stop_token_ids=tuple(args.stop_token_id),
            include_stop_str_in_output=args.include_stop_str,
            ignore_eos=args.ignore_eos,
        )
    except ValueError as e:
        raise SystemExit(f"infill-lsp: error: {e}") from e
    prompt = _read_prompt(args)
    request = GenerationRequest(
        prompt=None if args.chat else prompt,
        messages=(ChatMessage("user", prompt),) if args.chat else None,
        role=role,
        sampling=sampling,
        stops=stops,
    )
    # --model (and --remote-model) name the model of the role in use.
    options = _options(
        args, model=args.model, chat_model=args.model, remote_chat_model=args.remote_model
    )
    models = ModelSet({role: model_spec(role, options)})
    engine = await asyncio.to_thread(models.engine, role)
    loop = asyncio.get_running_loop()
    # Ctrl-C cancels the request: the stream ends with "cancelled" deltas, then we exit.
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, engine.cancel, request.request_id)
    status = 0
    try:
        async with contextlib.aclosing(engine.generate(request)) as deltas:
            async for delta in deltas:
                if not delta.text and delta.finish_reason is None:
                    continue
                line: dict[str, Any] = {
                    "index": delta.index,
                    "text": delta.text,
                    "finish_reason": delta.finish_reason,
                    "stop_reason": delta.stop_reason,
                }
                if delta.error:
                    line["error"] = delta.error
                    status = 1
                print(json.dumps(line, ensure_ascii=False), flush=True)
    finally:
        models.close()
    return status


def _doctor(args: argparse.Namespace) -> int:
    report: dict[str, Any] = {}
    failed = False
    # Before the models load: a GPU's free memory is then what they found.
    machine = _machine_report()
    specs: dict[Role, ModelSpec | RemoteSpec] = {}
    options = _options(
        args,
        model=args.model,
        chat_model=args.chat_model,
        remote_chat_model=args.remote_chat_model,
    )
    for role in Role:
        try:
            specs[role] = model_spec(role, options)
        except EngineError as e:
            report[role.value] = {"ok": False, "error": str(e)}
            failed = True
    models = ModelSet(specs)
    for role in specs:
        try:
            engine = models.engine(role)
        except EngineError as e:
            spec = specs[role]
            where = str(spec.path) if isinstance(spec, ModelSpec) else spec.endpoint
            report[role.value] = {"ok": False, "model_path": where, "error": str(e)}
            failed = True
            continue
        try:
            fim = CompletionModel.of(engine, options.fim_family).fim
        except EngineError as e:
            report[role.value] = {"ok": False, "model_path": engine.info.path, "error": str(e)}
            failed = True
            continue
        info = asdict(engine.info)
        report[role.value] = {
            "ok": True,
            "backend": info["backend"],
            "model_path": info["path"],
            "model_name": info["name"],
            "device": info["device"],
            "gpu": info["gpu"],
            "warnings": list(info["warnings"]),
            "context_size": info["context_size"],
            "fim_family": fim.family if fim else None,
            "chat_template": info["has_chat_template"],
            "eog_tokens": [{"id": i, "text": t} for i, t in engine.info.eog_tokens],
            "load_seconds": round(info["load_seconds"], 3),
            "shared_with_other_role": models.shared(),
        }
    models.close()
    report["machine"] = machine
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        for role_name, entry in report.items():
            if role_name == "machine":
                continue
            print(f"{role_name}:")
            for key, value in entry.items():
                if key == "eog_tokens":
                    value = ", ".join(f"{t['text']} ({t['id']})" for t in value)
                elif key == "gpu" and value is None:
                    value = "none"
                elif key == "warnings":
                    for warning in value:
                        print(f"  {'warning':24} {warning}")
                    continue
                print(f"  {key:24} {value}")
        _print_machine(machine)
    # A warning (GPU layers asked of a CPU-only build, say) is no failure: the model works.
    return 1 if failed else 0


def _machine_report() -> dict[str, Any]:
    """What the machine offers each local backend: llama.cpp's build and devices, and torch's
    CUDA and GPUs (`doctor`'s "machine" section)."""
    llama, torch = llama_cpp_view(), torch_view()
    return {
        "llama_cpp": {
            "installed": llama.installed,
            "version": llama.version,
            "gpu_offload": llama.gpu_offload,
            "backends": list(llama.backends),
            "devices": [
                {
                    "name": d.name,
                    "description": d.description,
                    "kind": d.kind.value,
                    "backend": d.backend,
                    "memory_total": d.memory_total,
                    "memory_free": d.memory_free,
                }
                for d in llama.devices
            ],
            "notes": list(llama.notes),
        },
        "torch": {
            "installed": torch.installed,
            "version": torch.version,
            "cuda_version": torch.cuda_version,
            "cuda_available": torch.cuda_available,
            "devices": [
                {"index": d.index, "name": d.name, "memory_total": d.memory_total}
                for d in torch.devices
            ],
            "notes": list(torch.notes),
        },
    }


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else "yes" if value else "no"


def _print_machine(machine: dict[str, Any]) -> None:
    """The machine section of `doctor` as text: one line per fact, one per device."""
    lines: list[tuple[str, str]] = []
    llama = machine["llama_cpp"]
    if llama["installed"]:
        lines.append(
            (
                "llama.cpp",
                f"llama-cpp-python {llama['version'] or '(version unknown)'}, "
                f"GPU offload: {_yes_no(llama['gpu_offload'])}",
            )
        )
        lines.append(("llama.cpp backends", ", ".join(llama["backends"]) or "none"))
        for i, d in enumerate(llama["devices"] or [None]):
            words = (
                "none"
                if d is None
                else f"{d['name']} ({d['kind']}): {_device_words(d['description'] or d['name'], d)}"
            )
            lines.append(("llama.cpp devices" if i == 0 else "", words))
    else:
        lines.append(("llama.cpp", "not installed"))
    lines.extend(("llama.cpp note", note) for note in llama["notes"])
    torch = machine["torch"]
    if torch["installed"]:
        lines.append(
            (
                "torch",
                f"{torch['version']}, CUDA build: {torch['cuda_version'] or 'no'}, "
                f"CUDA available: {_yes_no(torch['cuda_available'])}",
            )
        )
        for i, d in enumerate(torch["devices"] or [None]):
            words = "none" if d is None else f"cuda:{d['index']}: {_device_words(d['name'], d)}"
            lines.append(("torch GPUs" if i == 0 else "", words))
    else:
        lines.append(("torch", "not installed"))
    lines.extend(("torch note", note) for note in torch["notes"])
    print("machine:")
    for key, value in lines:
        print(f"  {key:24} {value}")


def _device_words(name: str, device: dict[str, Any]) -> str:
    """A device and its memory in words: `NVIDIA H200, 139.8 GiB (120.2 GiB free)`."""
    total, free = device.get("memory_total"), device.get("memory_free")
    if total is None:
        return name
    words = f"{name}, {gib(total)}"
    return words if free is None else f"{words} ({gib(free)} free)"


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _serve(args: argparse.Namespace) -> int:
    from lsp_server.server import build_server

    handler: logging.Handler = (
        logging.FileHandler(args.log_file, encoding="utf-8")
        if args.log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    logging.getLogger("pygls").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    base = Settings(
        model=args.model,
        chat_model=args.chat_model,
        fim_family=check_fim_family(args.fim_family),
        endpoint=args.endpoint,
        api_key=args.api_key,
        remote_model=args.remote_model,
        remote_chat_model=args.remote_chat_model,
    )
    if args.backend is not None:
        base = replace(base, backend=args.backend)
    server = build_server(base)
    # INFO and above from our own loggers also reach the client (window/logMessage).
    server.client_log.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    for name in ("engine", "lsp_server"):
        logging.getLogger(name).addHandler(server.client_log)
    if args.tcp:
        from lsp_server.tcp import serve_tcp

        return serve_tcp(server, args.host, args.port)
    server.start_io(sys.stdin.buffer, _protocol_stdout())
    return 0


def _protocol_stdout() -> BinaryIO:
    """A stream of our own for the protocol, and file descriptor 1 pointed at stderr.

    Native code writes to descriptor 1 behind Python's back: llama.cpp prints there, and
    llama-cpp-python points descriptors 1 and 2 at /dev/null while it loads a model, which
    swallowed every message the server sent meanwhile (a request answered then never got its
    answer). Neither can touch a duplicate of the original descriptor.
    """
    sys.stdout.flush()
    stream = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return stream


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # `infill-lsp` alone, or with only server flags (`--stdio`, as editor clients add it), serves.
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "serve")
    args = parser.parse_args(argv)
    if args.command == "serve":
        try:
            check_fim_family(args.fim_family)
        except ValueError as e:
            parser.error(f"--fim-family must be {e}")
        if args.tcp:
            from lsp_server.tcp import listen_problem

            if problem := listen_problem(args.host, allow_remote=args.allow_remote):
                parser.error(problem)
        return _serve(args)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format=LOG_FORMAT,
    )
    try:
        if args.command == "generate":
            return asyncio.run(_generate(args))
        if args.command == "complete":
            from lsp_server.complete import run_complete

            return asyncio.run(run_complete(args))
        if args.command == "engine":
            from engine.api.serve import run_server

            return run_server(
                _options(args, model=args.model, chat_model=args.chat_model),
                host=args.host,
                port=args.port,
                api_key=args.api_key or os.environ.get(API_KEY_ENV),
                cors_origins=args.cors_origin,
            )
        return _doctor(args)
    except EngineError as e:
        print(f"infill-lsp: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
