"""A next-edit format on a real model's tokenizer: a tiny random Llama, loaded by the
transformers backend, whose tokenizer carries Zeta v1's markers as special tokens (built here,
nothing downloaded). Its answers would be noise; what is proved is the prompt: the format is
detected from the tokenizer, each marker is one id, and code that spells a marker out is
tokenized as plain text; and that a rewrite runs on it through the engine, ending where the
format says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from engine.backends.transformers import TransformersBackend  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.next_edit import (  # noqa: E402
    NEXT_EDIT_FAMILIES,
    ZETA1,
    NextEditInput,
    RecentEdit,
    apply_region_edits,
    build_next_edit_prompt,
    detect_next_edit_format,
    render_next_edit_text,
)
from engine.next_edit_model import NextEditModel, RewriteOutcome  # noqa: E402
from engine.specs import ModelSpec  # noqa: E402
from engine.types import StopConditions  # noqa: E402

pytestmark = pytest.mark.slow

MARKERS = [
    "<|start_of_file|>",
    "<|editable_region_start|>",
    "<|user_cursor_is_here|>",
    "<|editable_region_end|>",
]
CORPUS = ["def add(a, b):\n    return a + b\n", "MARK = 'text'\nx = 1\n"]


#: Zeta 2's own tokens: Seed-Coder's FIM tokens and the cursor marker (engine/next_edit.py).
ZETA2_MARKERS = ["<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>", "<|user_cursor|>"]
#: Sweep's: Qwen2.5-Coder's file separator and end of text, and the cursor marker as a token.
SWEEP_MARKERS = ["<|file_sep|>", "<|cursor|>", "<|endoftext|>"]


def tiny_model(folder: Path, markers: list[str]) -> TransformersBackend:
    """A random one-layer Llama whose tokenizer has `markers` as special tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        CORPUS * 4,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<s>", "</s>", *markers],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    hf_tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>"
    )
    hf_tokenizer.save_pretrained(folder)
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=len(hf_tokenizer),
        max_position_embeddings=1024,
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return TransformersBackend(ModelSpec(path=folder, device="cpu"))


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> TransformersBackend:
    return tiny_model(tmp_path_factory.mktemp("tiny-zeta1-llama"), MARKERS)


@pytest.fixture(scope="module")
def zeta2_backend(tmp_path_factory: pytest.TempPathFactory) -> TransformersBackend:
    return tiny_model(tmp_path_factory.mktemp("tiny-zeta2-llama"), ZETA2_MARKERS)


@pytest.fixture(scope="module")
def sweep_backend(tmp_path_factory: pytest.TempPathFactory) -> TransformersBackend:
    return tiny_model(tmp_path_factory.mktemp("tiny-sweep-llama"), SWEEP_MARKERS)


def test_the_format_is_found_in_the_models_tokenizer(backend: TransformersBackend) -> None:
    assert detect_next_edit_format(backend.special_token_id) is ZETA1


def test_markers_are_single_ids_and_the_codes_spelling_stays_text(
    backend: TransformersBackend,
) -> None:
    spelled = "MARK = '<|editable_region_end|>'\n"
    text = spelled + "x = 1\n"
    given = NextEditInput(
        path="m.py",
        text=text,
        region_start=len(spelled),
        region_end=len(text) - 1,
        cursor=len(spelled) + 1,
        at_file_start=True,
    )
    prompt = build_next_edit_prompt(backend, ZETA1, given)
    assert prompt.token_ids is not None
    ids = {marker: backend.special_token_id(marker) for marker in MARKERS}
    # Each marker the format writes is there once, as its id; the code's spelling is not.
    for marker, token_id in ids.items():
        assert prompt.token_ids.count(token_id) == 1, marker
    spelled_ids = backend.tokenize(spelled, add_bos=False, special=False)
    assert len(spelled_ids) > 1
    assert not set(spelled_ids) & set(ids.values())
    assert prompt.text == render_next_edit_text(ZETA1, given).text
    end_id = ids["<|editable_region_end|>"]
    assert end_id is not None
    assert prompt.stops == StopConditions(stop_token_ids_visible=(end_id,))


@pytest.mark.parametrize("family", ["zeta1", "zeta2", "sweep"])
async def test_a_rewrite_runs_on_the_model_with_its_own_prompt_and_stop(
    family: str, request: pytest.FixtureRequest
) -> None:
    """The whole model path on a real model: the format found from the tokenizer, the prompt
    the engine runs is the format's ids, the rewrite ends at the end marker's id or at its
    token limit, and what comes back is read as the format says (a random model's answer is
    no valid rewrite, or a rewrite whose edits rebuild it)."""
    fixture = {"zeta1": "backend", "zeta2": "zeta2_backend", "sweep": "sweep_backend"}[family]
    backend = request.getfixturevalue(fixture)
    fmt = NEXT_EDIT_FAMILIES[family]
    engine = Engine(backend)
    try:
        model = NextEditModel.of(engine, None)
        assert model is not None
        assert model.format is fmt  # found from the tokenizer's special tokens
        text = "def add(a, b):\n    return a + b\n"
        given = NextEditInput(
            path="m.py",
            text=text,
            region_start=0,
            region_end=len(text) - 1,
            cursor=4,
            edits=(
                RecentEdit(path="m.py", diff="@@ -1 +1 @@\n-def sum(a, b):\n+def add(a, b):\n"),
            ),
            at_file_start=True,
        )
        generation, _ = model.request(given)
        assert generation.prompt_token_ids == build_next_edit_prompt(backend, fmt, given).token_ids
        end_id = backend.special_token_id(fmt.end)
        if family == "zeta1":  # its end marker is a special token here: stopped by id
            assert end_id is not None
            assert generation.stops == StopConditions(stop_token_ids_visible=(end_id,))
        elif family == "sweep":  # at either of its ends, both special tokens here
            also = backend.special_token_id("<|endoftext|>")
            assert end_id is not None
            assert also is not None
            assert generation.stops == StopConditions(stop_token_ids_visible=(end_id, also))
        else:  # Zeta 2 ends at a line of text
            assert end_id is None
            assert generation.stops == StopConditions(
                stop=(">>>>>>> UPDATED",), include_stop_str_in_output=True
            )
        assert generation.sampling.temperature == 0.0
        rewrite = await model.rewrite(given)
        assert 0 < rewrite.output_tokens <= model.max_tokens(given)
        assert rewrite.prompt_tokens == len(generation.prompt_token_ids or ())
        if rewrite.outcome is RewriteOutcome.INVALID:
            assert (rewrite.region, rewrite.edits) == (None, ())
        else:
            assert rewrite.region is not None
            assert apply_region_edits(given.region, rewrite.edits) == rewrite.region
        assert rewrite.outcome is not RewriteOutcome.FAILED, rewrite.error
    finally:
        engine.close()


def test_a_model_without_next_edit_tokens_is_none_unless_its_format_is_named(
    backend: TransformersBackend,
) -> None:
    engine = Engine(backend)
    try:
        assert NextEditModel.of(engine, "none") is None
        named = NextEditModel.of(engine, "zeta2")
        assert named is not None
        assert named.format.family == "zeta2"
        with pytest.raises(ValueError, match="nextEditFormat 'instinct'"):
            NextEditModel.of(engine, "instinct")
    finally:
        engine.close()
