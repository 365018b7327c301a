"""The transformers backend against the llama.cpp backend on the same GGUF, on the CPU, side by
side in one run (issue 13).

Run from the repository root (`make bench` runs it with its defaults):

    .venv/bin/python bench/backends.py [--models smollm2 gemma] [--repeats 3] [--tokens 32]
                                       [--prompt-tokens 500 1500] [--decode dynamic static compiled]

For each model (the default chat model, SmolLM2-135M-Instruct Q4_1, and the default completion
model, Gemma 3 270M Q4_K_M), the sides are: llama.cpp on the GGUF as our backend loads it;
transformers loading the same GGUF (`gguf_file=`, dequantized to float32) with the dynamic
loop; and transformers with the static and compiled loops, loaded from a model folder saved
from that first load (the same weights and tokenizer; loading the GGUF again would cost as long
as the first time). A loop the backend cannot use for a model falls back, and the table says
which one ran.

The prompts are real code, this repository's own backends, cut to `--prompt-tokens` tokens;
every side gets the same token ids. Per repeat and side, for each prompt length: cold, the
first request on a cache that shares nothing (an untimed one-token request on another token
first), then warm, the same prompt one keystroke later (1-3 more tokens of the file, as typing
adds them), where only those may be fed. Decode tokens/s is measured after the shortest cold
prompt, over `--tokens` greedy tokens. Sides take turns within each repeat (the order rotates),
and the table shows medians, because absolute times on these shared machines drift.

Prints a table to stdout and writes JSON to bench/results/backends.json; logs go to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/backends.py` puts bench/ first on sys.path, where bench/engine.py would shadow
# the `engine` package; the repository root goes in front of it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import copy
import logging
import os
import platform
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from _common import (
    RESULTS,
    ROOT,
    Column,
    Table,
    median,
    setup_logging,
    shared_prefix,
    timed_tokens,
    write_json,
)

from engine.backend import Backend
from engine.default_models import default_chat_model, default_completion_model
from engine.models import load_backend
from engine.specs import ModelSpec

log = logging.getLogger("bench.backends")

MODELS: dict[str, Callable[[], Path]] = {
    "smollm2": default_chat_model,
    "gemma": default_completion_model,
}
DECODE_PATHS = ("dynamic", "static", "compiled")
#: The code the prompts are cut from: real Python, longer than the longest prompt.
SOURCES = ("engine/backends/transformers.py", "engine/backends/llama_cpp.py")
#: A keystroke may cost at most the typed tokens plus the one the backend feeds again.
KEYSTROKE_EXTRA_FED = 1
#: Every side is loaded with `kv_cache_mb=0`: one live KV cache, no kept states of other
#: documents, which would otherwise bring back an earlier prompt for a "cold" one.
#: Enough for the 1,500-token prompt, its keystroke and the decoded tokens. The static loops
#: attend over the whole preallocated cache at each step, so a larger one slows them.
CONTEXT_SIZE = 2048


@dataclass(slots=True)
class Side:
    """One backend loaded one way, and its measurements so far."""

    name: str
    backend: Backend
    load_seconds: float
    runs: list[dict[str, Any]]


def first_token(backend: Backend, prompt: Sequence[int], n: int = 1) -> dict[str, Any]:
    """Time to the first token of `prompt`, the prompt tokens fed, and with `n` > 1 the decode
    rate over the `n` greedy tokens (after the first: the loop alone)."""
    started, stamps, ids = timed_tokens(backend, prompt, n)
    result: dict[str, Any] = {
        "first_token_ms": 1000 * (stamps[0] - started),
        "fed": backend.last_prefill_tokens or 0,
        "token_ids": ids,
    }
    if n > 1:
        result["decode_tokens_per_s"] = (len(ids) - 1) / (stamps[-1] - stamps[0])
    return result


def cool(backend: Backend, prompt: Sequence[int]) -> None:
    """Leave nothing of `prompt` in the KV cache: one token after a one-token prompt on
    another token (both backends then keep no prefix)."""
    other = (prompt[0] + 1) % backend.info.vocab_size
    first_token(backend, [other])


def code_ids(backend: Backend, total: int) -> list[int]:
    """This repository's backends as token ids (BOS first where the model adds one), at least
    `total` of them."""
    text = "\n\n".join((ROOT / s).read_text(encoding="utf-8") for s in SOURCES)
    ids = backend.tokenize(text, add_bos=backend.vocab.adds_bos)
    if len(ids) < total:
        raise SystemExit(f"the source text has {len(ids)} tokens, {total} needed")
    return ids


def measure(side: Side, ids: list[int], lengths: Sequence[int], tokens: int, repeat: int) -> None:
    """One repeat of every measurement on one side (recorded in `side.runs`)."""
    typed = 1 + repeat % 3
    for length in lengths:
        prompt = ids[:length]
        cool(side.backend, prompt)
        cold = first_token(side.backend, prompt, tokens if length == min(lengths) else 1)
        warm = first_token(side.backend, ids[: length + typed])
        if cold["fed"] != length:
            log.warning("%s: a cold %d-token prompt fed %d", side.name, length, cold["fed"])
        if warm["fed"] > typed + KEYSTROKE_EXTRA_FED:
            log.warning("%s: a keystroke of %d tokens fed %d", side.name, typed, warm["fed"])
        side.runs.append(
            {"repeat": repeat, "prompt_tokens": length, "typed": typed, "cold": cold, "warm": warm}
        )
        log.info(
            "%s, %d tokens: cold %.0f ms, warm %.0f ms (fed %d)%s",
            side.name,
            length,
            cold["first_token_ms"],
            warm["first_token_ms"],
            warm["fed"],
            f", decode {cold['decode_tokens_per_s']:.1f} tokens/s"
            if "decode_tokens_per_s" in cold
            else "",
        )


def load_sides(
    model: Path, decodes: Sequence[str], workdir: Path, errors: dict[str, str]
) -> list[Side]:
    """Every side that loads; a side that fails is reported in `errors` and left out."""
    sides: list[Side] = []

    def add(name: str, spec: ModelSpec) -> Backend | None:
        started = time.perf_counter()
        try:
            backend = load_backend(spec)
        except Exception as e:
            log.error("%s did not load:\n%s", name, traceback.format_exc())
            errors[name] = f"{type(e).__name__}: {e}"
            return None
        seconds = time.perf_counter() - started
        decode = getattr(backend, "decode_path", None)
        label = name if decode is None or name.endswith(decode.value) else f"{name}->{decode}"
        sides.append(Side(label, backend, seconds, []))
        log.info("%s loaded in %.1f s", label, seconds)
        return backend

    add(
        "llama.cpp",
        ModelSpec(path=model, backend="llama.cpp", context_size=CONTEXT_SIZE, kv_cache_mb=0),
    )
    first = add(
        "transformers dynamic",
        ModelSpec(
            path=model,
            backend="transformers",
            device="cpu",
            decode="dynamic",
            context_size=CONTEXT_SIZE,
            kv_cache_mb=0,
        ),
    )
    others = [d for d in decodes if d != "dynamic"]
    if first is None or not others:
        return sides
    # The other loops load the same weights from a folder saved from the first load: the GGUF
    # path dequantizes and converts the tokenizer again each time, which takes as long as the
    # first. The backend keeps its model and tokenizer to itself; a benchmark may look in.
    folder = workdir / model.stem
    started = time.perf_counter()
    try:
        save_as_folder(first, folder)
    except Exception as e:
        log.error("saving %s as a model folder failed:\n%s", model, traceback.format_exc())
        errors["model folder"] = f"{type(e).__name__}: {e}"
        return sides
    log.info("saved as a model folder in %.1f s", time.perf_counter() - started)
    for decode in others:
        add(
            f"transformers {decode}",
            ModelSpec(
                path=folder,
                backend="transformers",
                device="cpu",
                decode=decode,
                context_size=CONTEXT_SIZE,
                kv_cache_mb=0,
            ),
        )
    return sides


def save_as_folder(backend: Backend, folder: Path) -> None:
    """Save a transformers backend's model (loaded from a GGUF) as a model folder.

    transformers refuses to save a model it loaded from a GGUF (its quantizer says "not
    serializable", though the weights are plain float32 by then), so the weights go into a
    model built from the same config without the GGUF's quantization entry."""
    import transformers

    loaded: Any = backend
    model, tokenizer = loaded._model, loaded._tokenizer
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = transformers.AutoModelForCausalLM.from_config(config)
    fresh.load_state_dict(model.state_dict())
    fresh.generation_config = model.generation_config
    transformers.utils.logging.disable_progress_bar()  # its bars would garble the log
    fresh.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def summarize(side: Side, lengths: Sequence[int]) -> dict[str, Any]:
    """Medians per prompt length, and the decode rate."""
    out: dict[str, Any] = {"load_seconds": side.load_seconds, "by_prompt": {}}
    for length in lengths:
        runs = [r for r in side.runs if r["prompt_tokens"] == length]
        if not runs:
            continue
        cold = median(r["cold"]["first_token_ms"] for r in runs)
        warm = median(r["warm"]["first_token_ms"] for r in runs)
        out["by_prompt"][str(length)] = {
            "cold_first_token_ms": cold,
            "warm_first_token_ms": warm,
            "warm_over_cold": warm / cold,
            "cold_fed": [r["cold"]["fed"] for r in runs],
            "warm_fed": [r["warm"]["fed"] for r in runs],
            "typed": [r["typed"] for r in runs],
        }
    rates = [
        r["cold"]["decode_tokens_per_s"] for r in side.runs if "decode_tokens_per_s" in r["cold"]
    ]
    if rates:
        out["decode_tokens_per_s"] = median(rates)
    return out


def bench_model(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    path = MODELS[name]()
    log.info("== %s: %s", name, path)
    errors: dict[str, str] = {}
    sides = load_sides(path, args.decode, workdir, errors)
    result: dict[str, Any] = {"model": name, "path": str(path), "errors": errors, "sides": {}}
    if not sides:
        return result
    lengths = sorted(args.prompt_tokens)
    ids = code_ids(sides[0].backend, max(lengths) + 3)
    # Every side gets llama.cpp's token ids; say whether transformers' tokenizer agrees.
    others = [s for s in sides if s.backend is not sides[0].backend]
    if others:
        text = "\n\n".join((ROOT / s).read_text(encoding="utf-8") for s in SOURCES)
        theirs = others[0].backend.tokenize(text, add_bos=sides[0].backend.vocab.adds_bos)
        result["same_tokenization"] = theirs == ids
        result["tokenizations_part_at"] = shared_prefix(theirs, ids)
    try:
        for side in sides:  # untimed: first-call costs (allocations, thread pools)
            first_token(side.backend, ids[:64], 4)
        for repeat in range(args.repeats):
            shift = repeat % len(sides)
            for side in sides[shift:] + sides[:shift]:
                try:
                    measure(side, ids, lengths, args.tokens, repeat)
                except Exception as e:
                    log.error("%s failed:\n%s", side.name, traceback.format_exc())
                    errors[side.name] = f"{type(e).__name__}: {e}"
    finally:
        for side in sides:
            side.backend.close()
    for side in sides:
        result["sides"][side.name] = summarize(side, lengths) | {"runs": side.runs}
        result["sides"][side.name]["device"] = side.backend.info.device
    # Greedy on the same ids: llama.cpp runs the quantized weights, transformers the same
    # weights dequantized, so their choices may part after a while.
    decoded = {
        s.name: next(r["cold"]["token_ids"] for r in s.runs if "decode_tokens_per_s" in r["cold"])
        for s in sides
        if any("decode_tokens_per_s" in r["cold"] for r in s.runs)
    }
    if decoded:
        reference = next(iter(decoded.values()))
        result["same_greedy_prefix"] = {
            name: shared_prefix(reference, got) for name, got in decoded.items()
        }
    return result


def print_table(result: dict[str, Any]) -> None:
    config = result["config"]
    lengths = config["prompt_tokens"]
    print(
        f"backends on the CPU: same GGUF, same token ids (this repository's code), "
        f"{config['tokens']} greedy tokens decoded after {min(lengths)}; median of "
        f"{config['repeats']}; torch threads {config['torch_threads']}, {config['cpu_count']} cores"
    )
    for model in result["models"]:
        print(f"\n{model['model']}: {model['path']}")
        rows: list[list[Any]] = []
        table = Table(
            Column("side", 30, "<"),
            Column("load s", 7, spec=".1f"),
            Column("tok/s", 7, spec=".1f"),
            *(
                column
                for n in lengths
                for column in (
                    Column(f"cold {n}", 10, spec=".0f"),
                    Column(f"warm {n}", 9, spec=".0f"),
                    Column("w/c", 6, spec=".3f"),
                )
            ),
        )
        for name, side in model["sides"].items():
            cells = [name, side["load_seconds"], side.get("decode_tokens_per_s")]
            for n in lengths:
                row = side["by_prompt"].get(str(n), {})  # none: that prompt failed ("-")
                keys = ("cold_first_token_ms", "warm_first_token_ms", "warm_over_cold")
                cells += [row.get(key) for key in keys]
            rows.append(cells)
        table.print(rows)
        warm_fed = {
            name: max(max(p["warm_fed"]) for p in side["by_prompt"].values())
            for name, side in model["sides"].items()
            if side["by_prompt"]
        }
        print(
            "times to first token in ms; warm: 1-3 tokens typed, at most fed: "
            + ", ".join(f"{k} {v}" for k, v in warm_fed.items())
        )
        if "same_tokenization" in model:
            print(
                f"transformers tokenizes the code as llama.cpp does: {model['same_tokenization']}"
                f" (the same first {model['tokenizations_part_at']} tokens; every side is fed "
                "llama.cpp's)"
            )
        if "same_greedy_prefix" in model:
            print(
                "greedy tokens equal to the first side's: "
                + ", ".join(f"{k} {v}" for k, v in model["same_greedy_prefix"].items())
            )
        for name, error in model["errors"].items():
            print(f"error, {name}: {error}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--decode", nargs="+", default=list(DECODE_PATHS), choices=DECODE_PATHS)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every side (3)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens decoded per run (32)")
    parser.add_argument("--prompt-tokens", type=int, nargs="+", default=[500, 1500])
    parser.add_argument(
        "--torch-threads", type=int, help="torch's CPU threads (default: torch's own choice)"
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "backends.json", help="output")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=False)
    if max(args.prompt_tokens) + 3 + args.tokens > CONTEXT_SIZE:
        parser.error(f"prompts and tokens must fit in {CONTEXT_SIZE} tokens")

    import torch  # only here: the module's help and errors above need no torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "backends",
        "config": {
            "models": args.models,
            "decode": args.decode,
            "repeats": args.repeats,
            "tokens": args.tokens,
            "prompt_tokens": sorted(args.prompt_tokens),
            "context_size": CONTEXT_SIZE,
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "models": [],
    }
    with tempfile.TemporaryDirectory(prefix="infill-backends-") as tmp:
        for name in args.models:
            try:
                result["models"].append(bench_model(name, args, Path(tmp)))
            except Exception as e:
                log.error("%s failed:\n%s", name, traceback.format_exc())
                result["models"].append(
                    {"model": name, "path": "?", "errors": {"model": str(e)}, "sides": {}}
                )
            write_json(args.json, result)
    result["seconds"] = time.perf_counter() - started
    write_json(args.json, result)
    print_table(result)
    log.info("wrote %s in %.0f s", args.json, result["seconds"])
    return 1 if any(m["errors"] for m in result["models"]) else 0


if __name__ == "__main__":
    sys.exit(main())
