"""The transformers backend on a tiny random Llama built here (no model hub, no download).

The reference for every greedy output is a plain loop that runs the whole sequence through the
model for each token, without any cache: equal outputs prove the KV cache reuse is exact.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tokenizers import (  # noqa: E402
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    processors,
    trainers,
)

from engine.backends import transformers_decode, transformers_load  # noqa: E402
from engine.backends.transformers import (  # noqa: E402
    DecodePath,
    TransformersBackend,
    should_spread,
    wanted_decode_path,
    weights_bytes,
)
from engine.chat_template import render_chat  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.errors import ModelLoadError  # noqa: E402
from engine.models import load_backend  # noqa: E402
from engine.sampling import apply_repetition_penalty, filter_top_k_top_p  # noqa: E402
from engine.specs import ModelSpec  # noqa: E402
from engine.types import (  # noqa: E402
    ChatMessage,
    GenerationRequest,
    SamplingParams,
    ScoreRequest,
    StopConditions,
)
from engine.worker import prepare_prompt_ids  # noqa: E402

SPECIALS = ["<s>", "</s>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|end|>"]
BOS, EOS, FIM_PREFIX, END_OF_TURN = 0, 1, 2, 5
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "for i in range(10):\n    print(i * i)\n",
    "# héllo wörld: ünïcode 🙂\n",
    "<|user|>explain this<|end|><|assistant|>It adds two numbers.<|end|>",
]
#: The decode loops every CPU test runs on (the compiled one compiles for half a minute: its
#: own tests below).
DECODES = ["dynamic", "static"]
PROMPT = "def add(a, b):\n"
MORE = "    return a + b\n\nclass Point:\n"


def build_model_folder(folder: Path, **config: Any) -> Path:
    """A byte-level BPE tokenizer with FIM and chat tokens, a tiny random model on top of it,
    and a generation config whose end-of-generation ids are a list."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        CORPUS * 4,
        trainers.BpeTrainer(
            vocab_size=320,
            special_tokens=SPECIALS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", BOS)]
    )
    hf_tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>"
    )
    hf_tokenizer.chat_template = CHAT_TEMPLATE
    hf_tokenizer.save_pretrained(folder)

    model_class = config.pop("model_class", transformers.LlamaForCausalLM)
    config_class = config.pop("config_class", transformers.LlamaConfig)
    model_config = config_class(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(hf_tokenizer),
        max_position_embeddings=512,
        bos_token_id=BOS,
        eos_token_id=EOS,
        **config,
    )
    torch.manual_seed(0)
    model_class(model_config).save_pretrained(folder)
    transformers.GenerationConfig(
        bos_token_id=BOS, eos_token_id=[EOS, END_OF_TURN]
    ).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_folder(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module", params=DECODES)
def backend(model_dir: Path, request: pytest.FixtureRequest) -> Iterator[TransformersBackend]:
    backend = TransformersBackend(ModelSpec(path=model_dir, device="cpu", decode=request.param))
    assert backend.decode_path == request.param
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def engine(backend: TransformersBackend) -> Iterator[Engine]:
    engine = Engine(backend, name="tiny")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)


def reference_greedy(model: Any, prompt_ids: Sequence[int], n: int) -> list[int]:
    """Greedy decoding the slow, obvious way: the whole sequence again for every token."""
    ids = list(prompt_ids)
    out = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids]), use_cache=False).logits
            token = int(logits[:, -1].argmax())
            out.append(token)
            ids.append(token)
    return out


def greedy(prompt: str, max_tokens: int = 12) -> GenerationRequest:
    return GenerationRequest(
        prompt=prompt,
        sampling=SamplingParams(max_tokens=max_tokens),
        stops=StopConditions(ignore_eos=True),
    )


def sampled(seed: int | None, **kw: Any) -> GenerationRequest:
    return GenerationRequest(
        prompt=PROMPT,
        sampling=SamplingParams(max_tokens=24, temperature=1.0, seed=seed, **kw),
        stops=StopConditions(ignore_eos=True),
    )


# --- generation --------------------------------------------------------------------------------


async def test_greedy_output_equals_a_reference_loop_without_cache(
    engine: Engine, backend: TransformersBackend, reference: Any
) -> None:
    (result,) = await engine.collect(greedy(PROMPT))
    prompt_ids = backend.tokenize(PROMPT, add_bos=True)
    assert list(result.token_ids) == reference_greedy(reference, prompt_ids, 12)


async def test_an_extended_prompt_feeds_only_its_new_tokens_and_stays_exact(
    engine: Engine, backend: TransformersBackend, reference: Any
) -> None:
    await engine.collect(greedy(PROMPT))
    old_ids = backend.tokenize(PROMPT, add_bos=True)
    (result,) = await engine.collect(greedy(PROMPT + MORE))
    new_ids = backend.tokenize(PROMPT + MORE, add_bos=True)
    # At most the token at the seam is fed again (BPE may merge across it), never the prefix.
    assert 0 < backend.last_prefill_tokens <= len(new_ids) - len(old_ids) + 1
    assert list(result.token_ids) == reference_greedy(reference, new_ids, 12)


async def test_the_same_prompt_again_feeds_one_token_for_fresh_logits(
    engine: Engine, backend: TransformersBackend
) -> None:
    (first,) = await engine.collect(greedy(PROMPT))
    (second,) = await engine.collect(greedy(PROMPT))
    assert backend.last_prefill_tokens == 1
    assert second.token_ids == first.token_ids


def reference_log_probs(
    model: Any, prompt_ids: Sequence[int], continuation: Sequence[int]
) -> list[float]:
    """Each continuation token's log-probability, from one forward over the whole text."""
    ids = [*prompt_ids, *continuation]
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0].float()
    rows = torch.log_softmax(logits, dim=-1)
    return [float(rows[len(prompt_ids) + i - 1, t]) for i, t in enumerate(continuation)]


async def test_scores_equal_one_forward_over_the_whole_text_and_the_prompt_stays_cached(
    engine: Engine, backend: TransformersBackend, reference: Any
) -> None:
    prompt_ids = backend.tokenize(PROMPT, add_bos=True)
    continuations = (
        tuple(backend.tokenize(" return s == s[::-1]", add_bos=False)),
        tuple(backend.tokenize(" pass", add_bos=False)),
    )
    scores = await engine.score(
        ScoreRequest(prompt_token_ids=tuple(prompt_ids), continuations=continuations, top=3)
    )
    assert scores is not None
    for got, continuation in zip(scores.continuations, continuations, strict=True):
        assert got == pytest.approx(
            reference_log_probs(reference, prompt_ids, continuation), abs=1e-4
        )
    # The most likely next tokens are what greedy decoding writes first, most likely first.
    (first,) = reference_greedy(reference, prompt_ids, 1)
    assert scores.top[0][0] == first
    assert [p for _, p in scores.top] == sorted((p for _, p in scores.top), reverse=True)
    # Generating after the same prompt feeds one token: the scoring left the prompt cached.
    (result,) = await engine.collect(
        GenerationRequest(
            prompt_token_ids=tuple(prompt_ids),
            sampling=SamplingParams(max_tokens=4),
            stops=StopConditions(ignore_eos=True),
        )
    )
    assert backend.last_prefill_tokens == 1
    assert list(result.token_ids) == reference_greedy(reference, prompt_ids, 4)


@pytest.mark.parametrize("stop", ["cancel", "close"])
def test_a_stopped_generation_yields_nothing_more_and_the_cache_stays_exact(
    backend: TransformersBackend, reference: Any, stop: str
) -> None:
    prompt_ids = backend.tokenize("class Point:\n", add_bos=True)
    cancelled = threading.Event()
    tokens = backend.iter_token_ids(prompt_ids, SamplingParams(max_tokens=12), cancelled)
    got = [next(tokens) for _ in range(3)]
    if stop == "cancel":
        cancelled.set()
        assert next(tokens, None) is None
    else:
        tokens.close()  # what the worker does when the output is finished
    assert got == reference_greedy(reference, prompt_ids, 3)

    # The cache holds the prompt and the first two tokens; the third was never fed.
    follow_up = [*prompt_ids, *got]
    again = backend.iter_token_ids(follow_up, SamplingParams(max_tokens=6), threading.Event())
    continued = [next(again) for _ in range(6)]
    again.close()
    assert backend.last_prefill_tokens == 1
    assert continued == reference_greedy(reference, follow_up, 6)


def test_a_cancel_before_the_first_step_yields_nothing(backend: TransformersBackend) -> None:
    cancelled = threading.Event()
    cancelled.set()
    prompt_ids = backend.tokenize(PROMPT, add_bos=True)
    assert list(backend.iter_token_ids(prompt_ids, SamplingParams(), cancelled)) == []


async def test_seeded_sampling_repeats_and_other_seeds_differ(engine: Engine) -> None:
    (first,) = await engine.collect(sampled(seed=7))
    (again,) = await engine.collect(sampled(seed=7))
    (other,) = await engine.collect(sampled(seed=8))
    assert first.token_ids == again.token_ids
    assert first.token_ids != other.token_ids
    # Choice 0 of n keeps the request's seed; the others get their own, on the same cache.
    both = await engine.collect(sampled(seed=7, n=2))
    assert both[0].token_ids == first.token_ids
    assert both[1].token_ids != first.token_ids
    (filtered,) = await engine.collect(sampled(seed=7, top_k=20, top_p=0.9))
    (filtered_again,) = await engine.collect(sampled(seed=7, top_k=20, top_p=0.9))
    assert filtered.token_ids == filtered_again.token_ids


async def test_a_repetition_penalty_changes_greedy_output_of_a_repeating_model(
    engine: Engine,
) -> None:
    (plain,) = await engine.collect(greedy(PROMPT, max_tokens=24))
    assert len(set(plain.token_ids)) < len(plain.token_ids), "the tiny model repeats itself"
    penalized_request = GenerationRequest(
        prompt=PROMPT,
        sampling=SamplingParams(max_tokens=24, repetition_penalty=5.0),
        stops=StopConditions(ignore_eos=True),
    )
    (penalized,) = await engine.collect(penalized_request)
    assert len(set(penalized.token_ids)) > len(set(plain.token_ids))


@pytest.mark.parametrize("decode", DECODES)
def test_a_sliding_window_model_is_exact_across_cropped_requests(
    tmp_path: Path, decode: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = build_model_folder(
        tmp_path,
        config_class=transformers.MistralConfig,
        model_class=transformers.MistralForCausalLM,
        sliding_window=6,
    )
    backend = TransformersBackend(ModelSpec(path=folder, device="cpu", decode=decode))
    # A static cache of the context's length could not be cut back once the window slid.
    assert backend.decode_path is DecodePath.DYNAMIC
    fallbacks = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    if decode == "static":
        (line,) = fallbacks
        assert "static loop not used" in line
        assert "cannot be cut back" in line
    else:
        assert fallbacks == []
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    prompt_ids = backend.tokenize(PROMPT + MORE, add_bos=True)
    assert len(prompt_ids) > 12  # well past the window
    for prompt in (prompt_ids, prompt_ids[:-4], [*prompt_ids[:-6], 40, 41]):
        tokens = backend.iter_token_ids(prompt, SamplingParams(), threading.Event())
        got = [next(tokens) for _ in range(8)]
        tokens.close()
        assert got == reference_greedy(reference, prompt, 8)
    backend.close()


# --- tokenizer, template and model information ---------------------------------------------


def test_special_false_keeps_special_token_text_in_code_as_plain_text(
    backend: TransformersBackend,
) -> None:
    code = "FIM = '<fim_prefix>'  # and </s> too\n"
    plain = backend.tokenize(code, add_bos=False, special=False)
    assert FIM_PREFIX not in plain
    assert EOS not in plain
    assert backend.detokenize(plain) == code
    assert FIM_PREFIX in backend.tokenize(code, add_bos=False, special=True)
    assert backend.special_token_id("<fim_prefix>") == FIM_PREFIX
    assert backend.special_token_id("<|end|>") == END_OF_TURN
    assert backend.special_token_id("def") is None


def test_bos_is_added_once_and_eos_never(backend: TransformersBackend) -> None:
    assert backend.vocab.adds_bos
    assert backend.vocab.bos_token == "<s>"
    assert backend.vocab.eos_token == "</s>"
    with_bos = backend.tokenize("x = 1", add_bos=True)
    assert with_bos[0] == BOS
    assert with_bos[1:] == backend.tokenize("x = 1", add_bos=False)
    assert backend.tokenize("<s>x = 1", add_bos=True).count(BOS) == 1
    assert EOS not in with_bos


def test_the_chat_template_renders_and_eog_ids_include_the_generation_config(
    backend: TransformersBackend,
) -> None:
    messages = (ChatMessage("user", "explain this"),)
    assert render_chat(backend, messages) == "<s><|user|>explain this<|end|><|assistant|>"
    prompt_ids = prepare_prompt_ids(backend, GenerationRequest(messages=messages))
    assert prompt_ids.count(BOS) == 1
    assert prompt_ids[0] == BOS
    assert END_OF_TURN in prompt_ids
    assert backend.info.has_chat_template
    assert backend.eog_token_ids == {EOS, END_OF_TURN}
    assert dict(backend.info.eog_tokens) == {EOS: "</s>", END_OF_TURN: "<|end|>"}


def test_model_info(backend: TransformersBackend, model_dir: Path) -> None:
    info = backend.info
    assert info.backend == "transformers"
    assert info.device == "cpu"
    assert info.name == model_dir.name
    assert info.path == str(model_dir)
    assert info.context_size == 512  # the model's max_position_embeddings caps the 4096 asked
    assert info.vocab_size == 320
    assert info.load_seconds > 0


# --- loading ---------------------------------------------------------------------------------


def test_load_backend_picks_transformers_for_a_model_folder(model_dir: Path) -> None:
    backend = load_backend(ModelSpec(path=model_dir, device="cpu", context_size=256))
    try:
        assert isinstance(backend, TransformersBackend)
        assert backend.context_size == 256
    finally:
        backend.close()


@pytest.mark.parametrize(
    "contents",
    [
        pytest.param({}, id="empty folder"),
        pytest.param({"config.json": json.dumps({"model_type": "llama"})}, id="config only"),
        pytest.param({"config.json": "{not json"}, id="broken config"),
    ],
)
def test_a_folder_without_a_model_is_a_load_error_naming_the_path(
    tmp_path: Path, contents: dict[str, str]
) -> None:
    for name, text in contents.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ModelLoadError) as raised:
        load_backend(ModelSpec(path=tmp_path, device="cpu"))
    message = str(raised.value)
    assert str(tmp_path) in message
    assert "\n" not in message


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "cudaa"])
def test_an_unknown_device_is_a_load_error(model_dir: Path, device: str) -> None:
    with pytest.raises(ModelLoadError, match="unknown device"):
        TransformersBackend(ModelSpec(path=model_dir, device=device))


# --- sampling ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top_k", "top_p", "kept"),
    [
        (0, 1.0, {0, 1, 2, 3}),
        (2, 1.0, {1, 3}),
        (0, 0.5, {1}),  # token 1 alone holds 0.64 of the mass
        (0, 0.8, {1, 3}),
        (0, 0.9, {1, 3, 0}),
        (0, 1e-6, {1}),  # the best token always stays
        (3, 0.8, {1, 3}),
    ],
)
def test_top_k_and_top_p_keep_the_most_likely_tokens(
    top_k: int, top_p: float, kept: set[int]
) -> None:
    logits = torch.log(torch.tensor([0.1, 0.64, 0.06, 0.2]))
    filtered = filter_top_k_top_p(logits, top_k, top_p)
    assert {i for i in range(4) if filtered[i] != float("-inf")} == kept


def test_the_repetition_penalty_lowers_seen_tokens_of_either_sign() -> None:
    logits = torch.tensor([2.0, -2.0, 2.0, -2.0])
    seen = torch.tensor([True, True, False, False])
    assert apply_repetition_penalty(logits, seen, 2.0).tolist() == [1.0, -4.0, 2.0, -2.0]


# --- GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_model_is_bf16_and_greedy_cache_reuse_repeats(model_dir: Path) -> None:
    backend = TransformersBackend(ModelSpec(path=model_dir, device="cuda"))
    try:
        assert backend.info.device == "cuda"
        assert backend._decoder.model.dtype in (torch.bfloat16, torch.float16)
        prompt_ids = backend.tokenize(PROMPT + MORE, add_bos=True)
        runs = []
        for _ in range(2):
            tokens = backend.iter_token_ids(prompt_ids, SamplingParams(), threading.Event())
            runs.append([next(tokens) for _ in range(8)])
            tokens.close()
        assert backend.last_prefill_tokens == 1
        assert runs[0] == runs[1]
    finally:
        backend.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_auto_is_the_compiled_loop_with_cuda_graphs_and_stays_exact(
    model_dir: Path,
) -> None:
    """The fast path where it is meant to run: compiled at load, no compile after, the cache
    reused across keystrokes and documents, the same tokens as the static loop's eager steps
    (both bf16 over the same cache)."""
    from torch._dynamo.utils import counters

    runs = {}
    for decode in ("auto", "static"):
        backend = TransformersBackend(ModelSpec(path=model_dir, device="cuda", decode=decode))
        try:
            graphs = counters["stats"]["unique_graphs"]
            runs[decode] = documents_and_back(backend)
            if decode == "auto":
                assert backend.decode_path is DecodePath.COMPILED
                assert backend.info.warnings == ()
                assert counters["stats"]["unique_graphs"] == graphs
        finally:
            backend.close()
    assert [fed for _, fed in runs["auto"]][1::2] == [1, 1]
    assert runs["auto"] == runs["static"]


# --- many documents: kept caches and chunked prompts ----------------------------------------


def greedy_ids(
    backend: TransformersBackend,
    prompt: Sequence[int],
    key: str | None,
    n: int = 6,
    cancelled: threading.Event | None = None,
) -> list[int]:
    tokens = backend.iter_token_ids(
        prompt, SamplingParams(), cancelled or threading.Event(), cache_key=key
    )
    out = [token for token, _ in zip(tokens, range(n), strict=False)]
    tokens.close()
    return out


@pytest.mark.parametrize("decode", DECODES)
def test_back_in_a_document_its_kept_cache_answers_exactly_after_one_token(
    model_dir: Path, reference: Any, decode: str
) -> None:
    backend = TransformersBackend(ModelSpec(path=model_dir, device="cpu", decode=decode))
    a = backend.tokenize(PROMPT + MORE, add_bos=True)
    b = backend.tokenize("for i in range(10):\n    print(i * i)\n" * 2, add_bos=True)
    try:
        greedy_ids(backend, a, "file:///a.py")
        greedy_ids(backend, b, "file:///b.py")
        again = greedy_ids(backend, a, "file:///a.py")
        assert backend.last_prefill_tokens == 1
        assert again == reference_greedy(reference, a, 6)
        status = backend.cache_status()
        assert (status.states, status.restored) == (1, 1)
        assert status.bytes > 0
        # B's cache was kept while A's served: B comes back the same way.
        assert greedy_ids(backend, b, "file:///b.py") == reference_greedy(reference, b, 6)
        assert backend.last_prefill_tokens == 1
    finally:
        backend.close()


@pytest.mark.parametrize("decode", DECODES)
def test_a_zero_budget_keeps_no_other_document(model_dir: Path, decode: str) -> None:
    backend = TransformersBackend(
        ModelSpec(path=model_dir, device="cpu", kv_cache_mb=0, decode=decode)
    )
    a = backend.tokenize(PROMPT + MORE, add_bos=True)
    b = backend.tokenize("for i in range(10):\n    print(i * i)\n" * 2, add_bos=True)
    try:
        for prompt, key in ((a, "a"), (b, "b"), (a, "a")):
            greedy_ids(backend, prompt, key)
        assert backend.last_prefill_tokens == len(a) - 1  # all but BOS, shared with B
        assert backend.cache_status().states == 0
    finally:
        backend.close()


@pytest.mark.parametrize("decode", DECODES)
def test_a_cancelled_prompt_stops_between_chunks_and_keeps_what_was_fed(
    model_dir: Path, reference: Any, monkeypatch: pytest.MonkeyPatch, decode: str
) -> None:
    monkeypatch.setattr(transformers_decode, "PREFILL_CHUNK", 4)
    backend = TransformersBackend(ModelSpec(path=model_dir, device="cpu", decode=decode))
    prompt = backend.tokenize(PROMPT + MORE, add_bos=True)
    assert len(prompt) > 12
    cancelled = threading.Event()
    forwards = 0

    def count_forward(module: object, inputs: Any) -> None:
        nonlocal forwards
        if isinstance(module, transformers.LlamaForCausalLM):  # the whole model, not a layer
            forwards += 1
            if forwards == 2:
                cancelled.set()  # a newer request arrives while the second chunk runs

    # Every module's forward, through torch's own hook: the backend's model is its own.
    hook = torch.nn.modules.module.register_module_forward_pre_hook(count_forward)
    try:
        try:
            assert greedy_ids(backend, prompt, "a", cancelled=cancelled) == []
        finally:
            hook.remove()
        assert forwards == 2
        assert backend.cache_status().live_tokens == 8
        out = greedy_ids(backend, prompt, "a")
        assert backend.last_prefill_tokens == len(prompt) - 8
        assert out == reference_greedy(reference, prompt, 6)
    finally:
        backend.close()


# --- decode loops: the fast path and its fallbacks ---------------------------------------------


@pytest.mark.parametrize(
    ("setting", "device", "path"),
    [
        ("auto", "cpu", DecodePath.DYNAMIC),
        ("auto", "cuda", DecodePath.COMPILED),
        ("auto", "cuda:1", DecodePath.COMPILED),
        ("static", "cpu", DecodePath.STATIC),
        ("compiled", "cpu", DecodePath.COMPILED),
        ("dynamic", "cuda", DecodePath.DYNAMIC),
    ],
)
def test_auto_is_the_compiled_loop_on_cuda_and_the_dynamic_one_on_the_cpu(
    setting: str, device: str, path: DecodePath
) -> None:
    assert wanted_decode_path(setting, device) is path


def documents_and_back(backend: TransformersBackend) -> list[tuple[list[int], int]]:
    """Greedy tokens and fed prompt tokens for: a prompt, a keystroke later, another
    document, and the first document again."""
    a = backend.tokenize(PROMPT + MORE, add_bos=True)
    b = backend.tokenize("for i in range(10):\n    print(i * i)\n", add_bos=True)
    runs = []
    for prompt, key in ((a[:-1], "a"), (a, "a"), (b, "b"), (a, "a")):
        runs.append((greedy_ids(backend, prompt, key, n=8), backend.last_prefill_tokens))
    return runs


@pytest.mark.slow
def test_the_compiled_loop_is_exact_and_compiles_once_at_load(
    model_dir: Path, reference: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """torch.compile on the CPU (inductor; CUDA graphs are for a GPU): the same tokens as
    the reference, the cache reused across keystrokes and documents, and no compile after
    load (a recompile per token would make the fast path the slowest)."""
    from torch._dynamo.utils import counters

    caplog.set_level("INFO", logger="engine.backends.transformers_decode")
    backend = TransformersBackend(ModelSpec(path=model_dir, device="cpu", decode="compiled"))
    try:
        assert backend.decode_path is DecodePath.COMPILED
        assert any("compiled the decode step" in r.getMessage() for r in caplog.records)
        graphs = counters["stats"]["unique_graphs"]
        runs = documents_and_back(backend)
        assert counters["stats"]["unique_graphs"] == graphs
    finally:
        backend.close()
    a = backend.tokenize(PROMPT + MORE, add_bos=True)
    b = backend.tokenize("for i in range(10):\n    print(i * i)\n", add_bos=True)
    expected = [reference_greedy(reference, p, 8) for p in (a[:-1], a, b, a)]
    assert [tokens for tokens, _ in runs] == expected
    assert [fed for _, fed in runs][1] == 1  # one keystroke: one token fed
    assert [fed for _, fed in runs][3] == 1  # back in A: its kept cache


def test_a_compile_that_fails_falls_back_to_the_static_loop_with_one_log_line(
    model_dir: Path,
    reference: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken_compile(fn: Any, **kwargs: Any) -> Any:
        def step(**inputs: Any) -> Any:
            raise RuntimeError("no C++ compiler found")

        return step

    monkeypatch.setattr(torch, "compile", broken_compile)
    backend = TransformersBackend(ModelSpec(path=model_dir, device="cpu", decode="compiled"))
    try:
        assert backend.decode_path is DecodePath.STATIC
        (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert "compiled loop not used" in line
        assert "no C++ compiler found" in line
        assert backend.info.warnings == (line,)  # doctor shows it
        prompt = backend.tokenize(PROMPT, add_bos=True)
        assert greedy_ids(backend, prompt, None, n=8) == reference_greedy(reference, prompt, 8)
    finally:
        backend.close()


def test_a_model_without_a_static_cache_falls_back_to_the_dynamic_loop(
    model_dir: Path,
    reference: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def no_static_cache(**kwargs: Any) -> Any:
        raise ValueError("this architecture has no static cache")

    monkeypatch.setattr(transformers, "StaticCache", no_static_cache)
    backend = TransformersBackend(ModelSpec(path=model_dir, device="cpu", decode="compiled"))
    try:
        assert backend.decode_path is DecodePath.DYNAMIC
        (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert "compiled loop not used" in line
        assert "no static cache" in line
        prompt = backend.tokenize(PROMPT, add_bos=True)
        assert greedy_ids(backend, prompt, None, n=8) == reference_greedy(reference, prompt, 8)
    finally:
        backend.close()


def test_sliding_window_layers_keep_the_static_loop_but_not_the_compiled_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A window longer than the context never slides, so the static cache can be cut back;
    but those layers count their length in Python, which a compiled step would be compiled
    again for at every token."""
    folder = build_model_folder(
        tmp_path,
        config_class=transformers.MistralConfig,
        model_class=transformers.MistralForCausalLM,
        sliding_window=512,
    )
    spec = ModelSpec(path=folder, device="cpu", decode="compiled", context_size=256)
    backend = TransformersBackend(spec)
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    try:
        assert backend.decode_path is DecodePath.STATIC
        (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert "compiled loop not used" in line
        assert "sliding-window" in line
        prompt = backend.tokenize(PROMPT + MORE, add_bos=True)
        assert greedy_ids(backend, prompt, "a", n=8) == reference_greedy(reference, prompt, 8)
    finally:
        backend.close()


# --- placement: one GPU, or accelerate's device_map ---------------------------------------------

GIB = 1 << 30


@pytest.mark.parametrize(
    ("device", "weights", "free", "accelerate", "spread"),
    [
        ("auto", 3 * GIB, [80 * GIB], True, False),  # fits one GPU: stays there whole
        ("auto", 70 * GIB, [80 * GIB, 80 * GIB], True, True),  # too big for one
        ("auto", 70 * GIB, [80 * GIB], True, True),  # one GPU, the rest on the CPU
        ("auto", 70 * GIB, [80 * GIB], False, False),  # no accelerate: no device_map
        ("cuda:0", 70 * GIB, [80 * GIB, 80 * GIB], True, False),  # a device named: as said
        ("auto", 70 * GIB, [], True, False),  # no GPU
    ],
)
def test_accelerate_spreads_only_a_model_that_does_not_fit_the_first_gpu(
    device: str, weights: int, free: list[int], accelerate: bool, spread: bool
) -> None:
    assert should_spread(device, weights, free, has_accelerate=accelerate) is spread


def test_the_weights_are_counted_from_the_config_alone(model_dir: Path, reference: Any) -> None:
    source = transformers_load.check_source(model_dir)
    assert weights_bytes(source) == 2 * reference.num_parameters()


def test_a_device_map_load_answers_as_the_plain_one(model_dir: Path, reference: Any) -> None:
    """`device_map="auto"` (on this CPU-only machine accelerate has one place to put it)."""
    source = transformers_load.check_source(model_dir)
    model, placed_on = transformers_load.load_model(source, "cpu", spread=True)
    assert placed_on == "device_map=auto over cpu"
    prompt = [BOS, 7, 9, 40, 41]
    with torch.no_grad():
        got = model(torch.tensor([prompt]), use_cache=False).logits
        want = reference(torch.tensor([prompt]), use_cache=False).logits
    assert torch.allclose(got, want)


@pytest.mark.parametrize("decode", DECODES)
def test_the_loop_runs_over_accelerates_hooks(model_dir: Path, reference: Any, decode: str) -> None:
    """A model accelerate dispatched (its weights streamed in by hooks before each layer, as
    for the part of a too-big model that stays on the CPU) decodes exactly, cache reuse too."""
    import accelerate

    backend = TransformersBackend(ModelSpec(path=model_dir, device="cpu", decode=decode))
    accelerate.cpu_offload(backend._decoder.model, execution_device=torch.device("cpu"))
    try:
        assert any(hasattr(m, "_hf_hook") for m in backend._decoder.model.modules())
        a = backend.tokenize(PROMPT + MORE, add_bos=True)
        assert greedy_ids(backend, a[:-2], "a") == reference_greedy(reference, a[:-2], 6)
        assert greedy_ids(backend, a, "a") == reference_greedy(reference, a, 6)
        assert backend.last_prefill_tokens == 2
    finally:
        backend.close()


# --- a GGUF file through transformers ------------------------------------------------------------


def test_a_gguf_file_needs_the_gguf_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "coder.gguf"
    model.write_bytes(b"GGUF")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gguf" else real(name, *a),
    )
    with pytest.raises(
        ModelLoadError, match=r"coder\.gguf.*pip install 'infill-lsp\[transformers\]'"
    ):
        TransformersBackend(ModelSpec(path=model, device="cpu"))


@pytest.mark.slow
def test_the_chat_gguf_through_transformers_decodes_as_llama_cpp_does(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The same GGUF file in both backends: transformers dequantizes it, llama.cpp runs it
    quantized, and on a code prompt their greedy tokens agree. Loading prints no progress bar
    (stderr is the server's log)."""
    from engine.default_models import default_chat_model

    path = default_chat_model()
    if not path.is_file():
        pytest.skip(f"the default chat model is not installed ({path}): make install")
    text = "def fibonacci(n):\n    if n < 2:\n        return n\n    return"
    runs = []
    for kind in ("transformers", "llama.cpp"):
        backend = load_backend(ModelSpec(path=path, backend=kind, device="cpu"))
        try:
            assert backend.info.backend == kind
            ids = backend.tokenize(text, add_bos=False)
            tokens = backend.iter_token_ids(ids, SamplingParams(), threading.Event())
            runs.append((ids, [next(tokens) for _ in range(8)]))
            tokens.close()
        finally:
            backend.close()
    assert runs[0] == runs[1]
    assert "de-quantizing" not in capfd.readouterr().err


async def test_each_generated_token_carries_its_log_probability_before_the_filters(
    engine: Engine, backend: TransformersBackend, reference: Any
) -> None:
    request = sampled(seed=3, top_k=5, top_p=0.9)
    ids: list[int] = []
    logprobs: list[float] = []
    async with contextlib.aclosing(engine.generate(request)) as deltas:
        async for delta in deltas:
            ids.extend(delta.token_ids)
            assert delta.logprobs is not None
            logprobs.extend(delta.logprobs)
    assert len(logprobs) == len(ids) == 24
    assert all(p <= 0 for p in logprobs)
    prompt_ids = backend.tokenize(PROMPT, add_bos=True)
    assert logprobs == pytest.approx(reference_log_probs(reference, prompt_ids, ids), abs=1e-4)
