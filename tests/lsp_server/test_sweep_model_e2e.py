"""Sweep Next-Edit through the real server on the transformers backend, with a tiny Llama
built here (nothing downloaded) whose tokenizer is laid out as a Qwen2.5-Coder's is for Sweep:
`<|file_sep|>` and `<|endoftext|>` special (the latter its end of generation, no BOS), and
`<|cursor|>` a special token too, which is what names the format without `nextEditFormat`.

The model's last norm is zeroed, so every logit is equal and greedy decoding takes the first
id, `<|file_sep|>`: the model ends the rewrite at once, with the region unchanged. What is
proved is what the server must guarantee with any model: the format found from the tokenizer,
the rewrite run as the document's next-edit job and stopped at the format's end token, the
answer read back (an unchanged region proposes nothing) and the request answered.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_helpers import completion_engine, ready_session, settled_jobs
from next_edit_client import Document
from pytest_lsp import client_capabilities

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

#: The first is id 0, the one an all-equal greedy step takes.
SWEEP_TOKENS = ["<|file_sep|>", "<|endoftext|>", "<|cursor|>"]
BEFORE = "def scale(points):\n    xs = [p.x for p in points]\n    ys = [p.y for p in points]\n"


def sweep_model_folder(folder: Path) -> Path:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        [BEFORE] * 4,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=SWEEP_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    hf_tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>"
    )
    hf_tokenizer.save_pretrained(folder)
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=len(hf_tokenizer),
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=hf_tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    model.save_pretrained(folder)
    return folder


async def test_a_sweep_model_is_found_by_its_tokens_and_its_rewrite_read_back(
    tmp_path: Path,
) -> None:
    folder = sweep_model_folder(tmp_path / "tiny-sweep")
    settings = {
        "infill": {
            "backend": "transformers",
            "model": str(folder),
            "device": "cpu",
            "debounceMs": 0,
        }
    }
    async with ready_session(client_capabilities("neovim"), settings) as session:
        document = Document(session, BEFORE, "file:///tmp/sweep/m.py", "python")
        document.replace("[p.x for", "[p.x * 2 for")
        cursor = document.text.index(" for p in points]")
        # Propagation has nothing to repeat: the model is asked, and answers "unchanged".
        assert await document.next_edits(cursor) == []
        engine = await completion_engine(session)
        assert sorted(engine["roles"]) == ["completion", "next_edit"]  # found, not named
        (job,) = await settled_jobs(session, document.uri, 0)
        # One token, the format's end, and generation stopped there.
        assert (job["generated_tokens"], job["finish_reasons"]) == (1, ["stop"])
        assert job["prompt_tokens"] > 0
