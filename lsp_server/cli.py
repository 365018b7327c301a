"""The `infill-lsp` command: its flags, and which module runs each subcommand.

- `infill-lsp` / `infill-lsp serve [--stdio | --tcp --port N]`: the language server (TCP:
  loopback only unless `--host ADDRESS --allow-remote`; one client; its disconnect ends it),
  `lsp_server/serve.py`;
- `infill-lsp complete PATH:LINE:COL [--json]`: one inline completion through a real server,
  `lsp_server/complete.py`;
- `infill-lsp generate`: one JSON object per delta, stable for scripts:
  `{"index", "text", "finish_reason", "stop_reason"}` (plus `"error"` on an error delta),
  `engine/generate.py`;
- `infill-lsp doctor [--json]`: which model each role uses and how it loaded, `engine/doctor.py`,
  and the usage counts kept on this machine (`usage_file.py`);
- `infill-lsp engine [--port N]`: both models over an OpenAI-compatible HTTP API (engine/api/).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import fields, replace

from engine.doctor import doctor_report, failed, print_report
from engine.errors import EngineError
from engine.generate import GenerateArgs, UsageError, stream_json_lines
from engine.hub import DownloadProgress, Phase
from engine.specs import API_KEY_ENV, ModelOptions, check_fim_family
from lsp_server.engine_place import ENGINE_ENV, engine_report
from lsp_server.model_flags import (
    model_flags,
    model_name,
    model_options,
    next_edit_flags,
    remote_flags,
)
from lsp_server.serve import LOG_FORMAT, run_serve
from lsp_server.settings import Settings, check_engine


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infill-lsp",
        description="A local Copilot for any editor: a language server backed by a local model.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    model = model_flags()

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
    gen.add_argument(
        "--model",
        type=model_name,
        help="model of the role in use (completion, or chat with --chat)",
    )
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
    serve.add_argument(
        "--model", type=model_name, help="completion model, unless the client's settings name one"
    )
    serve.add_argument(
        "--chat-model", type=model_name, help="chat model, unless the client's settings name one"
    )
    next_edit_flags(serve)
    remote_flags(serve, with_backend=True)
    serve.add_argument(
        "--remote-chat-model", metavar="NAME", help="with --backend openai: the chat model"
    )
    serve.add_argument(
        "--completion-menu",
        choices=("auto", "on", "off"),
        help="suggestions as completion-menu items: auto (clients without inline completion), "
        "on, off; unless the client's settings say",
    )
    serve.add_argument(
        "--engine",
        type=_engine_choice,
        metavar="auto|here|URL",
        help="where a local model runs: the user's shared engine (auto), this process (here) or "
        "an engine server's URL; a client's `engine` setting other than auto wins",
    )
    serve.add_argument(
        "-v", "--verbose", action="store_true", help="log at DEBUG (sizes and times, no code)"
    )
    serve.add_argument(
        "--log-protocol",
        action="store_true",
        help="log the protocol (pygls): the messages sent whole, your code in them",
    )

    complete = sub.add_parser(
        "complete", help="ask a real server (started as a subprocess) for one inline completion"
    )
    complete.add_argument(
        "location", metavar="PATH:LINE:COL", help="1-based line and column, in characters"
    )
    complete.add_argument("--json", action="store_true", help="print the items and timings")
    complete.add_argument("--invoked", action="store_true", help="ask as an explicit invocation")
    complete.add_argument(
        "--model",
        type=model_name,
        help="completion model (GGUF file, Hugging Face folder, or hf:ORG/REPO[/FILE.gguf])",
    )
    complete.add_argument("-v", "--verbose", action="store_true", help="show the server's log")

    engine = sub.add_parser(
        "engine",
        parents=[model_flags(remote=False)],
        help="serve both models over an OpenAI-compatible HTTP API",
    )
    engine.add_argument("--host", default="127.0.0.1", help="a non-loopback host wants a key")
    engine.add_argument("--port", type=int, default=8012, help="0: any free port (printed)")
    key = engine.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key", help="Bearer key for every route but /health (default: $INFILL_API_KEY)"
    )
    key.add_argument("--api-key-file", metavar="PATH", help="the key in a file (not seen in ps)")
    engine.add_argument(
        "--allow-no-key", action="store_true", help="listen on a non-loopback host without a key"
    )
    engine.add_argument(
        "--cors-origin", action="append", default=[], metavar="ORIGIN", help="'*' needs a key"
    )
    engine.add_argument(
        "--max-request-tokens",
        type=int,
        default=None,
        metavar="N",
        help="tokens one request may ask for, n x max_tokens (default: 16384)",
    )
    engine.add_argument(
        "--model",
        type=model_name,
        help="completion model (GGUF file, Hugging Face folder, or hf:ORG/REPO[/FILE.gguf])",
    )
    engine.add_argument(
        "--chat-model",
        type=model_name,
        help="chat model (GGUF file, Hugging Face folder, or hf:ORG/REPO[/FILE.gguf])",
    )

    doctor = sub.add_parser("doctor", parents=[model], help="check and describe both models")
    doctor.add_argument(
        "--model",
        type=model_name,
        help="completion model (GGUF file, Hugging Face folder, or hf:ORG/REPO[/FILE.gguf])",
    )
    doctor.add_argument(
        "--chat-model",
        type=model_name,
        help="chat model (GGUF file, Hugging Face folder, or hf:ORG/REPO[/FILE.gguf])",
    )
    next_edit_flags(doctor)
    doctor.add_argument(
        "--remote-chat-model", metavar="NAME", help="with --backend openai: the chat model"
    )
    doctor.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _engine_choice(value: str) -> str:
    try:
        return check_engine(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _generate_args(args: argparse.Namespace) -> GenerateArgs:
    """The `generate` flags, a field each."""
    return GenerateArgs(**{f.name: getattr(args, f.name) for f in fields(GenerateArgs)})


def _generate(args: argparse.Namespace) -> int:
    try:
        request = _generate_args(args).request()
    except UsageError as e:
        raise SystemExit(f"infill-lsp: error: {e}") from e
    # --model (and --remote-model) name the model of the role in use.
    options = model_options(args, chat_model=args.model, remote_chat_model=args.remote_model)
    return asyncio.run(stream_json_lines(request, options))


def _doctor(args: argparse.Namespace) -> int:
    from lsp_server.usage_file import USAGE_KEY, print_usage, usage_report

    options = model_options(args)
    report = doctor_report(options, on_download=_print_download)
    status = 1 if failed(report) else 0
    # Where an editor's language server would run these models (`engine: auto`).
    settings = Settings(**{f.name: getattr(options, f.name) for f in fields(ModelOptions)})
    report = {**report, "engine": engine_report(settings)}
    usage = usage_report()
    if args.json:
        print_report({**report, USAGE_KEY: usage}, as_json=True)
    else:
        print_report(report, as_json=False)
        print_usage(usage)
    return status


def _print_download(progress: DownloadProgress) -> None:
    """A hub model's download on stderr: a line each tenth, and when it ends."""
    if progress.phase is not Phase.DOWNLOADING or (progress.percent or 0) % 10 == 0:
        print(f"infill-lsp: {progress.words()}", file=sys.stderr, flush=True)


def _serve(args: argparse.Namespace) -> int:
    base = Settings(
        model=args.model,
        chat_model=args.chat_model,
        fim_family=check_fim_family(args.fim_family),
        endpoint=args.endpoint,
        api_key=args.api_key,
        remote_model=args.remote_model,
        remote_chat_model=args.remote_chat_model,
        next_edit_model=args.next_edit_model,
        next_edit_format=args.next_edit_format,
        remote_next_edit_model=args.remote_next_edit_model,
    )
    if args.backend is not None:
        base = replace(base, backend=args.backend)
    if args.completion_menu is not None:
        base = replace(base, completion_menu=args.completion_menu)
    if args.engine is not None:
        # What `auto` defers to, as the environment's choice: editors send the setting's
        # default `auto` with every configuration, which must not undo the flag.
        os.environ[ENGINE_ENV] = args.engine
    tcp = (args.host, args.port) if args.tcp else None
    return run_serve(
        base,
        log_file=args.log_file,
        verbose=args.verbose,
        tcp=tcp,
        log_protocol=args.log_protocol,
    )


def _engine(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from engine.api.schema import DEFAULT_TOKEN_BUDGET
    from engine.api.serve import read_key_file, run_server

    api_key = args.api_key or os.environ.get(API_KEY_ENV)
    if args.api_key_file is not None:
        try:
            api_key = read_key_file(args.api_key_file)
        except ValueError as e:
            parser.error(str(e))
    budget = DEFAULT_TOKEN_BUDGET if args.max_request_tokens is None else args.max_request_tokens
    if budget < 1:
        parser.error("--max-request-tokens must be at least 1")
    return run_server(
        model_options(args),
        host=args.host,
        port=args.port,
        api_key=api_key,
        cors_origins=args.cors_origin,
        allow_no_key=args.allow_no_key,
        token_budget=budget,
    )


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
            return _generate(args)
        if args.command == "complete":
            from lsp_server.complete import run_complete

            return asyncio.run(run_complete(args))
        if args.command == "engine":
            return _engine(args, parser)
        return _doctor(args)
    except EngineError as e:
        print(f"infill-lsp: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
