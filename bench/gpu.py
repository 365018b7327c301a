"""The transformers backend on one GPU, against the memory-bandwidth limit.

    python -m bench gpu --out DIR [--gguf SmolLM2.gguf]

on a CUDA machine (about 5 minutes on an H200), and on the CPU, to prove the code paths (a tiny
model, a few tokens):

    python -m bench gpu --tiny --out /tmp/gpu-smoke

It needs torch, transformers and tokenizers only (and engine/): no model hub, no network. The
model is built here, from a config written below: the shape of Qwen2.5-Coder-1.5B with random
weights, in bf16, saved with a small byte-level BPE tokenizer trained on this repository's
source (its vocabulary is smaller than the model's; the benchmark feeds token ids, so that does
not matter, and random weights make no sense of text anyway). Sections, each guarded (an error
is printed and recorded, and the next section runs):

1. bandwidth: a large device-to-device copy (bytes read + written / time), beside the spec
   figure for known GPUs. Batch-1 decoding reads every weight once per token, so bandwidth /
   weight bytes is the most tokens per second any loop can reach (the limit).
2. each decode loop (dynamic: eager over a growing cache; compiled: static cache with the
   decode step under torch.compile and CUDA graphs; static: the same, eager): its load time
   (compile included), greedy decode tokens/s over `--decode-tokens` after a short prompt, as a
   share of the limit; time to first token for a `--prompt-tokens` prompt on a new cache
   (cold), and for the same prompt one keystroke later (one token appended, or the last one
   changed), where only the new token may be fed (checked with `last_prefill_tokens`).
3. llama.cpp with every layer on the GPU, when llama-cpp-python there was built with GPU
   offload (the project's way: `make install LLAMA_CUDA=1`, README "GPU"): the SmolLM2 GGUF
   given with `--gguf` (no GGUF of the 1.5B shape exists here), so its limit is its own.

`iter_token_ids` does not stop at an end-of-sequence id (the engine's stop processor does), so
random weights always give `--decode-tokens` tokens. The JSON (DIR/gpu.json and
bench/results/gpu.json) is rewritten after every section, so a run cut short keeps what it
measured; the table goes to stdout at the end, logs to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import platform
import random
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

from bench._common import (
    RESULTS,
    ROOT,
    median,
    setup_logging,
    suite_parser,
    timed_tokens,
    write_json,
)
from bench.record import Metric, Outcome, Target, metric
from engine.backend import Backend
from engine.backends.transformers import TransformersBackend
from engine.specs import ModelSpec
from engine.types import SamplingParams

log = logging.getLogger("bench.gpu")

#: Qwen2.5-Coder-1.5B's config.json, the parts that decide its shape and cost.
QWEN_CODER_1_5B: dict[str, Any] = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "use_sliding_window": False,
}
#: The same architecture, small enough for a CPU smoke run. Its vocabulary is still larger
#: than the tokenizer's, as the real one is.
TINY: dict[str, Any] = {
    **QWEN_CODER_1_5B,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 2048,
    "max_position_embeddings": 4096,
}
#: Memory bandwidth from the vendors' data sheets, bytes/s, by a part of the device name
#: (first match wins, so the more specific names come first).
SPEC_BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),
    ("L40S", 0.864e12),
    ("L4", 0.3e12),
)
#: The share of the bandwidth limit the compiled loop should reach.
TARGET_SHARE = 0.5
#: The one keystroke may cost at most this many fed tokens (the changed or appended one).
KEYSTROKE_MAX_FED = 3
DECODE_PATHS = ("dynamic", "compiled", "static")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    device: str
    shape: dict[str, Any]
    shape_name: str
    tokenizer_vocab: int
    prompt_tokens: int
    decode_tokens: int
    decode_prompt_tokens: int
    repeats: int
    context_size: int
    copy_bytes: int
    paths: tuple[str, ...]


class Report:
    """The result being built, written out after every section; sections that fail or are
    skipped for time say so in it and in the log, and the run goes on."""

    def __init__(self, files: Sequence[Path], deadline: float) -> None:
        self.files = list(files)
        self.deadline = deadline
        self.data: dict[str, Any] = {"benchmark": "gpu", "errors": {}, "skipped": {}}

    @contextlib.contextmanager
    def section(self, name: str, *, needs_s: float = 0.0) -> Iterator[dict[str, Any] | None]:
        """A guarded section: yields its dict (None when there is no time left for it)."""
        left = self.deadline - time.monotonic()
        if left < needs_s:
            why = f"{left:.0f} s left of the run's time, {needs_s:.0f} s needed"
            log.warning("skipping %s: %s", name, why)
            self.data["skipped"][name] = why
            self.write()
            yield None
            return
        part: dict[str, Any] = {}
        self.data[name] = part
        started = time.perf_counter()
        log.info("== %s", name)
        try:
            yield part
        except Exception as e:
            log.error("%s failed:\n%s", name, traceback.format_exc())
            self.data["errors"][name] = f"{type(e).__name__}: {e}"
        finally:
            part["section_seconds"] = round(time.perf_counter() - started, 2)
            self.write()

    def write(self) -> None:
        for path in self.files:
            write_json(path, self.data)


# --- the model ---------------------------------------------------------------------------------


def train_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE tokenizer trained on this repository's Python source, as transformers'
    fast tokenizer (our backend's detokenizer needs tokenizer.json)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    corpus = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "engine").rglob("*.py"))]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,  # its bars go to stdout, where the table goes
        ),
    )
    return transformers.PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )


def build_model(folder: Path, settings: Settings) -> dict[str, Any]:
    """Write a random-weight Qwen2 model of `settings.shape` (bf16) and its tokenizer into
    `folder`; what it holds, for the report."""
    started = time.perf_counter()
    tokenizer = train_tokenizer(settings.tokenizer_vocab)
    tokenizer.save_pretrained(folder)
    eos = tokenizer.eos_token_id
    config = transformers.Qwen2Config(**settings.shape, bos_token_id=eos, eos_token_id=eos)
    # transformers 5 moved rope_theta into rope_parameters (and converts the old keyword);
    # set it there too, in case a release in between did not.
    rope = getattr(config, "rope_parameters", None)
    if isinstance(rope, dict) and rope.get("rope_theta") != settings.shape["rope_theta"]:
        rope["rope_theta"] = settings.shape["rope_theta"]
    # Initialised where it will run: 1.5 B random numbers take seconds on a GPU, a minute on
    # the CPU. The default dtype makes every parameter bf16 from the start.
    try:
        model = _random_model(config, settings.device)
    except Exception:
        if settings.device == "cpu":
            raise
        log.warning("building on %s failed; building on the CPU", settings.device, exc_info=True)
        model = _random_model(config, "cpu")
    model.eval()
    # parameters() yields a tied tensor once: the embedding, which is also the LM head.
    params = sum(p.numel() for p in model.parameters())
    built = time.perf_counter() - started
    # Its bars would garble stderr's log.
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model.save_pretrained(folder)
    del model
    _empty_cache(settings.device)
    return {
        "shape": settings.shape_name,
        "config": settings.shape,
        "parameters": params,
        # What a token reads in the dtype the backend runs it in: bf16 on CUDA, float32 on
        # the CPU (where the smoke run's limit is only a figure, not a target).
        "weight_bytes": params * (2 if settings.device.startswith("cuda") else 4),
        "dtype": "bfloat16" if settings.device.startswith("cuda") else "float32",
        "rope": getattr(config, "rope_parameters", None) or getattr(config, "rope_theta", None),
        "tokenizer_vocab": len(tokenizer),
        "build_seconds": round(built, 2),
        "save_seconds": round(time.perf_counter() - started - built, 2),
        "folder": str(folder),
    }


def _random_model(config: Any, device: str) -> Any:
    torch.manual_seed(0)
    default_dtype = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.bfloat16)
        with torch.device(device):
            return transformers.Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)


def static_cache_bytes(shape: dict[str, Any], context_size: int) -> int:
    """What a static cache of `context_size` tokens holds (keys and values, bf16): the static
    loops attend over all of it at every step, so they read it too."""
    head_dim = shape["hidden_size"] // shape["num_attention_heads"]
    per_token = 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * head_dim * 2
    return int(per_token * context_size)


# --- bandwidth -----------------------------------------------------------------------------------


def measure_bandwidth(device: str, nbytes: int, repeats: int = 10) -> dict[str, Any]:
    """Bytes read plus written per second by `copy_` of one large buffer into another."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src.fill_(7)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch, outside the timing
    _sync(device)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - started)
    del src, dst
    _empty_cache(device)
    best, typical = min(times), median(times)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else platform.processor()
    spec = next((bw for key, bw in SPEC_BANDWIDTH if key in name), None)
    return {
        "device_name": name or "cpu",
        "copy_bytes": nbytes,
        # The median copy, not the best: a decode loop runs for seconds, not at its luckiest.
        "measured_bytes_per_s": 2 * nbytes / typical,
        "best_bytes_per_s": 2 * nbytes / best,
        "spec_bytes_per_s": spec,
    }


# --- one decode loop -----------------------------------------------------------------------------


def token_ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(1, vocab) for _ in range(n)]


def time_first_token(backend: Backend, prompt: Sequence[int]) -> tuple[float, int]:
    """Seconds from the request to its first token, and the prompt tokens fed for it."""
    started = time.perf_counter()
    tokens = backend.iter_token_ids(prompt, SamplingParams(max_tokens=1), threading.Event())
    try:
        next(tokens)
    finally:
        tokens.close()
    return time.perf_counter() - started, backend.last_prefill_tokens or 0


def time_decode(backend: Backend, prompt: Sequence[int], n: int) -> dict[str, Any]:
    """Greedy decoding of `n` tokens after `prompt`: tokens/s after the first (the decode loop
    alone, without the prompt)."""
    started, stamps, ids = timed_tokens(backend, prompt, n)
    return {
        "tokens": len(ids),
        "first_token_s": stamps[0] - started,
        "tokens_per_s": (len(ids) - 1) / (stamps[-1] - stamps[0]),
        "distinct_ids": len(set(ids)),
    }


def measure_decode(
    backend: Backend, settings: Settings, vocab: int, part: dict[str, Any]
) -> random.Random:
    """Decode tokens/s into `part`: the median of `settings.repeats` runs after one short
    untimed run (cuBLAS handles, the allocator's pools). Returns the random prompts' source,
    for the measurements after it."""
    rng = random.Random(13)
    time_decode(backend, token_ids(rng, settings.decode_prompt_tokens, vocab), 8)
    runs = [
        time_decode(
            backend,
            token_ids(rng, settings.decode_prompt_tokens, vocab),
            settings.decode_tokens,
        )
        for _ in range(settings.repeats)
    ]
    part["decode_runs"] = runs
    part["decode_tokens_per_s"] = median(r["tokens_per_s"] for r in runs)
    return rng


def measure_decode_path(
    decode: str, folder: Path, settings: Settings, part: dict[str, Any], vocab: int
) -> None:
    """Load `folder` with one decode loop and measure it into `part` (filled as it goes, so
    that a failure half-way keeps what was measured)."""
    _empty_cache(settings.device)
    started = time.perf_counter()
    backend = TransformersBackend(
        ModelSpec(
            path=folder,
            backend="transformers",
            device=settings.device,
            decode=decode,
            context_size=settings.context_size,
            # One live cache, no kept states of other prompts: a cold prompt is cold.
            kv_cache_mb=0,
        )
    )
    try:
        part["load_seconds"] = round(time.perf_counter() - started, 2)
        part["decode_path"] = backend.decode_path.value
        if backend.decode_path.value != decode:
            log.warning("%s asked, %s in use (the backend logged why)", decode, part["decode_path"])
        # 1. Decode.
        rng = measure_decode(backend, settings, vocab, part)
        log.info("%s: %.1f tokens/s", decode, part["decode_tokens_per_s"])

        # 2. Cold, then one keystroke later: the last token changed, or one token appended.
        # Every cold prompt starts with another token, so nothing of the last one is reused.
        time_first_token(backend, token_ids(rng, settings.prompt_tokens, vocab))  # untimed
        cold, changed, appended = [], [], []
        for _ in range(settings.repeats):
            prompt = token_ids(rng, settings.prompt_tokens, vocab)
            cold.append(time_first_token(backend, prompt))
            changed.append(time_first_token(backend, [*prompt[:-1], _other(prompt[-1], vocab)]))
            appended.append(time_first_token(backend, [*prompt, rng.randrange(1, vocab)]))
        part["cold_runs"] = cold
        part["keystroke_changed_runs"] = changed
        part["keystroke_appended_runs"] = appended
        part["cold_first_token_ms"] = 1000 * median(s for s, _ in cold)
        part["cold_fed"] = max(fed for _, fed in cold)
        keystrokes = changed + appended
        part["keystroke_first_token_ms"] = 1000 * median(s for s, _ in keystrokes)
        part["keystroke_fed_max"] = max(fed for _, fed in keystrokes)
        part["keystroke_over_cold"] = part["keystroke_first_token_ms"] / part["cold_first_token_ms"]
        if part["cold_fed"] != settings.prompt_tokens:
            raise AssertionError(f"a cold prompt fed {part['cold_fed']} tokens")
        if part["keystroke_fed_max"] > KEYSTROKE_MAX_FED:
            raise AssertionError(
                f"a keystroke fed {part['keystroke_fed_max']} tokens (at most "
                f"{KEYSTROKE_MAX_FED}): the KV cache was not reused"
            )
    finally:
        backend.close()
        del backend
        _empty_cache(settings.device)


def _other(token: int, vocab: int) -> int:
    return token + 1 if token + 1 < vocab else 1


# --- llama.cpp ------------------------------------------------------------------------------------


def llama_offload_status() -> tuple[Any, str | None]:
    """llama_cpp, or None and why it cannot be used here."""
    try:
        import llama_cpp
    except ImportError as e:
        return None, f"llama_cpp is not importable ({e})"
    if not llama_cpp.llama_supports_gpu_offload():
        return None, (
            "llama_cpp is a CPU-only build (llama_supports_gpu_offload() is false; "
            '`make install LLAMA_CUDA=1` builds it with CUDA, README "GPU")'
        )
    return llama_cpp, None


def measure_llama(
    gguf: Path, settings: Settings, bandwidth: float | None, part: dict[str, Any]
) -> None:
    """llama.cpp with every layer on the GPU: decode tokens/s, cold and keystroke first token."""
    from engine.backends.llama_cpp import LlamaCppBackend

    started = time.perf_counter()
    backend = LlamaCppBackend(
        ModelSpec(
            path=gguf,
            backend="llama.cpp",
            gpu_layers=-1,
            context_size=settings.context_size,
            threads=min(8, os.cpu_count() or 1),
            kv_cache_mb=0,
        )
    )
    try:
        part["model"] = f"{backend.info.name} ({gguf.name})"
        part["device"] = backend.info.device
        part["load_seconds"] = round(time.perf_counter() - started, 2)
        # The file's size stands for the bytes read per token (its weights, quantized).
        part["weight_bytes"] = gguf.stat().st_size
        if bandwidth:
            part["limit_tokens_per_s"] = bandwidth / part["weight_bytes"]
        vocab = min(backend.info.vocab_size, 32000)
        rng = measure_decode(backend, settings, vocab, part)
        if bandwidth:
            part["share_of_limit"] = part["decode_tokens_per_s"] / part["limit_tokens_per_s"]
        cold, keys = [], []
        for _ in range(settings.repeats):
            prompt = token_ids(rng, settings.prompt_tokens, vocab)
            cold.append(time_first_token(backend, prompt))
            keys.append(time_first_token(backend, [*prompt, rng.randrange(1, vocab)]))
        part["cold_runs"], part["keystroke_appended_runs"] = cold, keys
        part["cold_first_token_ms"] = 1000 * median(s for s, _ in cold)
        part["keystroke_first_token_ms"] = 1000 * median(s for s, _ in keys)
        part["keystroke_fed_max"] = max(fed for _, fed in keys)
        part["keystroke_over_cold"] = part["keystroke_first_token_ms"] / part["cold_first_token_ms"]
    finally:
        backend.close()


# --- the run -----------------------------------------------------------------------------------


def run(args: argparse.Namespace, report: Report, settings: Settings) -> None:
    """The sections in order of importance: what a cut-short run loses is the least needed."""
    data = report.data
    with report.section("environment") as part:
        assert part is not None
        part.update(
            python=platform.python_version(),
            torch=torch.__version__,
            transformers=transformers.__version__,
            cuda=torch.version.cuda,
            device=settings.device,
            device_name=(
                torch.cuda.get_device_name(settings.device)
                if settings.device.startswith("cuda")
                else "cpu"
            ),
            cpu_count=os.cpu_count(),
            settings=dataclasses.asdict(settings),
        )

    workdir = Path(tempfile.mkdtemp(prefix="infill-gpu-bench-"))
    folder = workdir / "model"
    try:
        with report.section("model") as part:
            assert part is not None
            part.update(build_model(folder, settings))
        with report.section("bandwidth") as part:
            assert part is not None
            part.update(measure_bandwidth(settings.device, settings.copy_bytes))
        model = data.get("model", {})
        bandwidth = data.get("bandwidth", {}).get("measured_bytes_per_s")
        spec = data.get("bandwidth", {}).get("spec_bytes_per_s")
        if "weight_bytes" in model and bandwidth:
            data["limit"] = {
                "tokens_per_s": bandwidth / model["weight_bytes"],
                "spec_tokens_per_s": spec / model["weight_bytes"] if spec else None,
                "static_cache_bytes": static_cache_bytes(settings.shape, settings.context_size),
            }
        if "weight_bytes" in model:
            vocab = int(model["tokenizer_vocab"])
            for decode in settings.paths:
                # The compiled loop compiles at load: give it more room than the eager ones.
                needs = 90.0 if decode == "compiled" and not args.tiny else 20.0
                with report.section(f"transformers_{decode}", needs_s=needs) as part:
                    if part is not None:
                        measure_decode_path(decode, folder, settings, part, vocab)
                        limit = data.get("limit", {}).get("tokens_per_s")
                        if limit and "decode_tokens_per_s" in part:
                            part["share_of_limit"] = part["decode_tokens_per_s"] / limit
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    with report.section("llama_cpp", needs_s=20.0) as part:
        if part is not None:
            llama, why = llama_offload_status()
            gguf = args.gguf
            if why is None and gguf is None:
                why = "no GGUF given (--gguf PATH: the SmolLM2 chat model's file)"
            elif why is None and not gguf.is_file():
                why = f"the GGUF {gguf} is not a file"
            elif why is None and not settings.device.startswith("cuda"):
                why = "not on a GPU"
            if why is not None:
                log.warning("llama.cpp skipped: %s", why)
                part["skipped"] = why
            else:
                part["llama_cpp_version"] = getattr(llama, "__version__", "?")
                measure_llama(
                    gguf, settings, data.get("bandwidth", {}).get("measured_bytes_per_s"), part
                )


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    paths = {d: data.get(f"transformers_{d}", {}) for d in DECODE_PATHS}
    eager = paths["dynamic"].get("decode_tokens_per_s")
    fast = paths["compiled"].get("decode_tokens_per_s")
    share = paths["compiled"].get("share_of_limit")
    return {
        "compiled_over_dynamic": fast / eager if fast and eager else None,
        "compiled_share_of_limit": share,
        "target_share": TARGET_SHARE,
        "target_met": None if share is None else share >= TARGET_SHARE,
        "compiled_in_use": paths["compiled"].get("decode_path") == "compiled",
    }


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _empty_cache(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def settings_from(args: argparse.Namespace) -> Settings:
    """The run's settings: the real shape on the GPU, or `--tiny`'s on the CPU (each value
    reads tiny first)."""
    device = args.device or ("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    tiny = bool(args.tiny)
    return Settings(
        device=device,
        shape=TINY if tiny else QWEN_CODER_1_5B,
        shape_name="tiny Qwen2" if tiny else "Qwen2.5-Coder-1.5B",
        tokenizer_vocab=512 if tiny else 4096,
        prompt_tokens=args.prompt_tokens or (300 if tiny else 2000),
        decode_tokens=args.decode_tokens or (16 if tiny else 256),
        decode_prompt_tokens=16 if tiny else 32,
        repeats=args.repeats or (1 if tiny else 3),
        context_size=1024 if tiny else 4096,
        copy_bytes=(64 << 20) if tiny else (4 << 30) if device.startswith("cuda") else (512 << 20),
        paths=tuple(args.paths),
    )


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = suite_parser("gpu", __doc__)
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu.json")
    parser.add_argument("--tiny", action="store_true", help="a tiny model: a CPU smoke run")
    parser.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if there is one)")
    parser.add_argument("--paths", nargs="+", default=list(DECODE_PATHS), choices=DECODE_PATHS)
    parser.add_argument("--prompt-tokens", type=int, help="cold prompt (2000; tiny 300)")
    parser.add_argument("--decode-tokens", type=int, help="tokens per decode run (256; tiny 16)")
    parser.add_argument("--repeats", type=int, help="runs per measurement, median (3; tiny 1)")
    parser.add_argument("--deadline-s", type=float, default=460.0, help="run time (460 s)")
    parser.add_argument("--gguf", type=Path, help="a GGUF for llama.cpp (SmolLM2's)")
    args = parser.parse_args(argv)
    setup_logging(quiet_engine=False)

    settings = settings_from(args)
    report = Report(
        [args.out / "gpu.json", RESULTS / ("gpu-tiny.json" if args.tiny else "gpu.json")],
        deadline=time.monotonic() + args.deadline_s,
    )
    try:
        run(args, report, settings)
    finally:
        report.data["summary"] = summarize(report.data)
        report.write()
    return Outcome(
        parameters={k: v for k, v in dataclasses.asdict(settings).items() if k != "shape"},
        metrics=gpu_metrics(report.data),
        models=[args.gguf] if args.gguf else [],
    )


def gpu_metrics(data: dict[str, Any]) -> list[Metric]:
    """Each loop's decode rate and its share of the bandwidth limit (the compiled loop's judged
    against the target), and the errors of sections that failed."""
    out = []
    if "limit" in data:
        out.append(
            metric("limit at the measured bandwidth", data["limit"]["tokens_per_s"], "tokens/s")
        )
    for key in [f"transformers_{d}" for d in DECODE_PATHS] + ["llama_cpp"]:
        part = data.get(key) or {}
        if "decode_tokens_per_s" not in part:
            continue
        label = key.replace("_", " ", 1)
        out.append(metric(f"{label}: decode", part["decode_tokens_per_s"], "tokens/s"))
        target: Target | None = (">=", TARGET_SHARE) if key == "transformers_compiled" else None
        out.append(
            metric(f"{label}: share of the limit", part.get("share_of_limit"), target=target)
        )
        out.append(
            metric(f"{label}: keystroke / cold first token", part.get("keystroke_over_cold"))
        )
    out.append(metric("sections that failed", len(data["errors"]), target=("==", 0)))
    return out
