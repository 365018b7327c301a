"""Prompts: FIM templates per family, the token-budgeted window, chat rendering.

FIM tests run on in-memory Hugging Face tokenizers that carry each family's special tokens
(`hf_tokenizer.py`); the user's code always holds the family's own special-token text, which
must reach the model as plain text, never as the special ids.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import random
import re
from dataclasses import dataclass

import pytest
from fake_backend import SPECIAL_TOKENS, FakeBackend, byte_ids
from hf_tokenizer import HFTokenizerBackend

from engine.chat_template import render_chat, render_chat_template
from engine.context_window import MAX_CHARS_PER_TOKEN, ContextWindow, context_window
from engine.errors import ChatTemplateError
from engine.fim import (
    FIM_FAMILIES,
    FIM_TEMPLATES,
    FimOrder,
    FimPrompt,
    build_fim_prompt,
    detect_fim_template,
)
from engine.types import ChatMessage

# --- FIM families -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    family: str
    special_tokens: tuple[str, ...]  # a sketch of the real tokenizer's special tokens
    psm: str  # the expected prompt text; {P} and {S} stand for the prefix and suffix
    spm: str  # the same in suffix-first order (the only order, where the family has one)
    stops: tuple[str, ...]  # the fill-ending tokens, in the template's order
    bos: str | None = None  # the model wants this BOS first

    def backend(self) -> HFTokenizerBackend:
        return HFTokenizerBackend(
            self.special_tokens, bos_token=self.bos, adds_bos=self.bos is not None
        )


FAMILIES = [
    Family(
        "qwen",  # Qwen2.5-Coder
        (
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
        ),
        psm="<|fim_prefix|>{P}<|fim_suffix|>{S}<|fim_middle|>",
        spm="<|fim_prefix|><|fim_suffix|>{S}<|fim_middle|>{P}",
        stops=("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|im_end|>"),
    ),
    Family(
        "codegemma",
        (
            "<pad>",
            "<eos>",
            "<bos>",
            "<start_of_turn>",
            "<end_of_turn>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|file_separator|>",
        ),
        psm="<bos><|fim_prefix|>{P}<|fim_suffix|>{S}<|fim_middle|>",
        spm="<bos><|fim_prefix|><|fim_suffix|>{S}<|fim_middle|>{P}",
        stops=("<|file_separator|>", "<eos>", "<end_of_turn>"),
        bos="<bos>",
    ),
    Family(
        "fim-pipes",  # the <|fim_prefix|> shape without Qwen's or CodeGemma's extra tokens
        ("<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|eot_id|>"),
        psm="<|fim_prefix|>{P}<|fim_suffix|>{S}<|fim_middle|>",
        spm="<|fim_prefix|><|fim_suffix|>{S}<|fim_middle|>{P}",
        stops=("<|endoftext|>", "<|eot_id|>"),
    ),
    Family(
        "starcoder",  # StarCoder2
        (
            "<|endoftext|>",
            "<fim_prefix>",
            "<fim_middle>",
            "<fim_suffix>",
            "<fim_pad>",
            "<repo_name>",
            "<file_sep>",
            "<issue_start>",
        ),
        psm="<fim_prefix>{P}<fim_suffix>{S}<fim_middle>",
        spm="<fim_prefix><fim_suffix>{S}<fim_middle>{P}",
        stops=("<|endoftext|>", "<file_sep>", "<fim_pad>", "<fim_prefix>"),
    ),
    Family(
        "santacoder",
        ("<|endoftext|>", "<fim-prefix>", "<fim-middle>", "<fim-suffix>", "<fim-pad>"),
        psm="<fim-prefix>{P}<fim-suffix>{S}<fim-middle>",
        spm="<fim-prefix><fim-suffix>{S}<fim-middle>{P}",
        stops=("<|endoftext|>", "<fim-pad>"),
    ),
    Family(
        "codellama",  # the tokenizer spells its FIM tokens with sentencepiece's "▁"
        ("<unk>", "<s>", "</s>", "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"),
        psm="<s>▁<PRE>{P}▁<SUF>{S}▁<MID>",
        spm="<s>▁<PRE>▁<SUF>{S}▁<MID>{P}",
        stops=("▁<EOT>", "</s>"),
        bos="<s>",
    ),
    Family(
        "deepseek",  # no suffix-first format: SPM gives the PSM prompt
        (
            "<｜begin▁of▁sentence｜>",
            "<｜end▁of▁sentence｜>",
            "<｜fim▁hole｜>",
            "<｜fim▁begin｜>",
            "<｜fim▁end｜>",
            "<|EOT|>",
        ),
        psm="<｜begin▁of▁sentence｜><｜fim▁begin｜>{P}<｜fim▁hole｜>{S}<｜fim▁end｜>",
        spm="<｜begin▁of▁sentence｜><｜fim▁begin｜>{P}<｜fim▁hole｜>{S}<｜fim▁end｜>",
        stops=("<|EOT|>", "<｜end▁of▁sentence｜>"),
        bos="<｜begin▁of▁sentence｜>",
    ),
    Family(
        "codestral",  # trained suffix-first only: every order gives [SUFFIX]...[PREFIX]...
        ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]"),
        psm="<s>[SUFFIX]{S}[PREFIX]{P}",
        spm="<s>[SUFFIX]{S}[PREFIX]{P}",
        stops=("</s>",),
        bos="<s>",
    ),
]
FAMILY_IDS = [f.family for f in FAMILIES]


def test_every_template_family_has_a_case() -> None:
    assert [t.family for t in FIM_TEMPLATES] == FAMILY_IDS


def user_code(family: Family) -> tuple[str, str]:
    """A prefix and a suffix that spell out every special token of the family as text."""
    marks = " ".join(family.special_tokens)
    prefix = f'def f(self):\n    """{marks}"""\n    return '
    suffix = f'\n\nprint(f("<fim_middle>"))  # {marks}\n'
    return prefix, suffix


def ids(prompt: FimPrompt) -> tuple[int, ...]:
    """A prompt's token ids: any local backend's has them (a server's alone has text only)."""
    assert prompt.token_ids is not None
    return prompt.token_ids


def expected_ids(backend: HFTokenizerBackend, layout: str, prefix: str, suffix: str) -> list[int]:
    """The ids `layout` stands for: special tokens by id, everything else as plain text."""
    specials = sorted(backend.special_token_texts, key=len, reverse=True)
    pattern = "(" + "|".join(map(re.escape, ["{P}", "{S}", *specials])) + ")"
    ids: list[int] = []
    for piece in re.split(pattern, layout):
        special_id = backend.special_token_id(piece)
        if special_id is not None:
            ids.append(special_id)
        elif piece:
            code = {"{P}": prefix, "{S}": suffix}.get(piece, piece)
            ids += backend.tokenize(code, add_bos=False, special=False)
    return ids


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_family_is_detected_from_its_special_tokens(family: Family) -> None:
    template = detect_fim_template(family.backend().special_token_id)
    assert template is not None
    assert template.family == family.family


LAYOUTS = [(None, "psm"), (FimOrder.PSM, "psm"), (FimOrder.SPM, "spm")]


@pytest.mark.parametrize(("order", "layout_name"), LAYOUTS, ids=["default", "psm", "spm"])
@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_fim_prompt_is_the_familys_format(
    family: Family, order: FimOrder | None, layout_name: str
) -> None:
    backend = family.backend()
    prefix, suffix = user_code(family)
    layout = getattr(family, layout_name)

    prompt = build_fim_prompt(
        backend, prefix, suffix, template=FIM_FAMILIES[family.family], order=order
    )

    assert prompt.text == layout.format(P=prefix, S=suffix)
    assert list(ids(prompt)) == expected_ids(backend, layout, prefix, suffix)
    assert backend.decode(ids(prompt)) == prompt.text
    assert prompt.family == family.family


@pytest.mark.parametrize("order", [FimOrder.PSM, FimOrder.SPM])
@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_special_token_text_in_the_code_stays_plain_text(family: Family, order: FimOrder) -> None:
    backend = family.backend()
    prefix, suffix = user_code(family)
    layout = getattr(family, order.value)

    prompt = build_fim_prompt(
        backend, prefix, suffix, template=FIM_FAMILIES[family.family], order=order
    )

    # Each special id occurs exactly as often as the format has the marker, although the
    # code spells every one of them out; the model sees all of the code as text.
    for token in family.special_tokens:
        token_id = backend.special_token_id(token)
        assert ids(prompt).count(token_id) == layout.count(token), token
    without_markers = functools.reduce(lambda s, t: s.replace(t, ""), family.special_tokens, layout)
    assert backend.detokenize(ids(prompt)) == without_markers.format(P=prefix, S=suffix)


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_fim_stop_ids_are_the_familys_fill_ending_tokens_present(family: Family) -> None:
    backend = family.backend()
    prompt = build_fim_prompt(backend, "a = ", "\n", template=FIM_FAMILIES[family.family])
    assert prompt.stop_token_ids == tuple(backend.special_token_id(t) for t in family.stops)


DETECT_CASES = [
    ("starcoder markers", {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"}, "starcoder"),
    ("one marker missing", {"<fim_prefix>", "<fim_suffix>"}, None),
    ("mixed families", {"<fim_prefix>", "<fim-suffix>", "<fim_middle>"}, None),
    ("pipes alone", {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"}, "fim-pipes"),
    (
        "pipes + fim_pad",
        {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>"},
        "qwen",
    ),
    (
        "pipes + file_separator",
        {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_separator|>"},
        "codegemma",
    ),
    ("codellama without <MID>", {"▁<PRE>", "▁<SUF>", "▁<EOT>"}, None),
    ("codestral needs no middle", {"[PREFIX]", "[SUFFIX]"}, "codestral"),
    ("chat tokens only", {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}, None),
    ("nothing", set(), None),
]


@pytest.mark.parametrize(
    ("tokens", "family"), [c[1:] for c in DETECT_CASES], ids=[c[0] for c in DETECT_CASES]
)
def test_detect_fim_template_needs_all_required_tokens(
    tokens: set[str], family: str | None
) -> None:
    ids = {token: i for i, token in enumerate(sorted(tokens))}
    template = detect_fim_template(ids.get)
    assert (template.family if template else None) == family


def test_fim_prompt_leaves_out_an_empty_slot() -> None:
    backend = FAMILIES[FAMILY_IDS.index("starcoder")].backend()
    special = backend.special_token_id
    template = FIM_FAMILIES["starcoder"]

    at_start = build_fim_prompt(backend, "", "x = 1\n", template=template)
    at_end = build_fim_prompt(backend, "x = ", "", template=template)

    plain = functools.partial(backend.tokenize, add_bos=False, special=False)
    assert list(ids(at_start)) == [
        special("<fim_prefix>"),
        special("<fim_suffix>"),
        *plain("x = 1\n"),
        special("<fim_middle>"),
    ]
    assert list(ids(at_end)) == [
        special("<fim_prefix>"),
        *plain("x = "),
        special("<fim_suffix>"),
        special("<fim_middle>"),
    ]


def test_fim_prompt_for_a_family_the_tokenizer_lacks_names_the_missing_token() -> None:
    backend = FAMILIES[FAMILY_IDS.index("starcoder")].backend()
    with pytest.raises(ValueError, match=r"no '<\|fim_prefix\|>' token for FIM family qwen"):
        build_fim_prompt(backend, "a", "b", template=FIM_FAMILIES["qwen"])


# --- models without FIM tokens ----------------------------------------------------------------

PREFIX = 'def greet(name):\n    return f"<fim_middle> {name}"  # <|fim_prefix|>\n\ngreet('
SUFFIX = ")\n"

NO_FIM = [
    # (name, special tokens, BOS token, adds BOS, expected leading text)
    ("SmolLM2-like, no BOS", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), None, False, ""),
    (
        "Gemma-3-like, adds BOS",
        ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"),
        "<bos>",
        True,
        "<bos>",
    ),
    ("has a BOS it does not add", ("<s>", "</s>"), "<s>", False, ""),
]


@pytest.mark.parametrize(
    ("tokens", "bos", "adds_bos", "lead"), [c[1:] for c in NO_FIM], ids=[c[0] for c in NO_FIM]
)
def test_without_fim_tokens_the_prompt_is_bos_and_the_prefix(
    tokens: tuple[str, ...], bos: str | None, adds_bos: bool, lead: str
) -> None:
    backend = HFTokenizerBackend(tokens, bos_token=bos, adds_bos=adds_bos)
    assert detect_fim_template(backend.special_token_id) is None

    prompt = build_fim_prompt(backend, PREFIX, SUFFIX, template=None)

    lead_ids = [backend.special_token_id(lead)] if lead else []
    assert list(ids(prompt)) == lead_ids + backend.tokenize(PREFIX, add_bos=False, special=False)
    assert prompt.text == lead + PREFIX
    assert prompt.family is None
    assert prompt.stop_token_ids == ()


def test_fake_backend_without_template_gets_bos_and_prefix_bytes() -> None:
    prompt = build_fim_prompt(FakeBackend(), PREFIX, SUFFIX, template=None)
    assert list(ids(prompt)) == [SPECIAL_TOKENS["<bos>"], *byte_ids(PREFIX)]
    assert prompt.text == "<bos>" + PREFIX


def test_fake_backend_is_a_starcoder_tokenizer() -> None:
    backend = FakeBackend()
    template = detect_fim_template(backend.special_token_id)
    assert template is not None
    assert template.family == "starcoder"

    prompt = build_fim_prompt(backend, "x = ", "\n", template=template)

    assert list(ids(prompt)) == [0, 2, *byte_ids("x = "), 3, *byte_ids("\n"), 4]
    assert prompt.stop_token_ids == (
        SPECIAL_TOKENS["<|endoftext|>"],
        SPECIAL_TOKENS["<fim_prefix>"],
    )


# --- the test tokenizer itself ----------------------------------------------------------------


def test_hf_tokenizer_keeps_special_token_text_plain_without_special() -> None:
    backend = HFTokenizerBackend(["<s>", "<fim_middle>"], bos_token="<s>", adds_bos=True)
    text = 'x = "<fim_middle>"  # é 😀'
    middle = backend.special_token_id("<fim_middle>")
    assert middle is not None

    plain = backend.tokenize(text, add_bos=True, special=False)
    parsed = backend.tokenize(text, add_bos=False, special=True)

    assert plain[0] == backend.special_token_id("<s>")
    assert middle not in plain
    assert backend.decode(plain) == "<s>" + text
    assert parsed.count(middle) == 1
    assert backend.detokenize(plain) == text  # special tokens are not shown


def test_hf_tokenizer_knows_only_its_added_special_tokens() -> None:
    backend = HFTokenizerBackend(["<fim_middle>"])
    assert backend.special_token_id("<fim_middle>") is not None
    assert backend.tokenizer.token_to_id("def") is not None  # a plain vocabulary entry...
    assert backend.special_token_id("def") is None  # ...is no special token
    assert backend.special_token_id("<fim_prefix>") is None


# --- context window ---------------------------------------------------------------------------


def words(text: str) -> int:
    """A token count for tables: one per word, one for the line (its end)."""
    return len(text.split()) + 1


def lines(n: int) -> str:
    return "".join(f"l{i}\n" for i in range(n))


@dataclass(frozen=True)
class WindowCase:
    name: str
    prefix: str
    suffix: str
    want: ContextWindow
    prefix_budget: int = 100
    suffix_budget: int = 100
    align_lines: int = 1


def window(prefix: str, suffix: str, first: int, ptok: int, stok: int) -> ContextWindow:
    return ContextWindow(
        prefix=prefix, suffix=suffix, first_line=first, prefix_tokens=ptok, suffix_tokens=stok
    )


WINDOW_CASES = [
    WindowCase("everything fits", "a\nb\nx", "y\nz\n", window("a\nb\nx", "y\nz\n", 0, 6, 4)),
    WindowCase("empty prefix and suffix", "", "", window("", "", 0, 0, 0)),
    WindowCase(
        "cursor mid-line", "a\n    re", "turn x\nb\n", window("a\n    re", "turn x\nb\n", 0, 4, 5)
    ),
    WindowCase(
        "prefix cut at a line to the budget",
        "a\nb\nc\nx",
        "",
        window("c\nx", "", 2, 4, 0),
        prefix_budget=5,
    ),
    WindowCase(
        "prefix that exactly fits the budget",
        "a\nb\nc\nx",
        "",
        window("b\nc\nx", "", 1, 6, 0),
        prefix_budget=6,
    ),
    WindowCase(
        "cursor line over budget: its end is kept",
        "a\nb\nx = compute(alpha, beta)",
        "",
        window(" compute(alpha, beta)", "", 2, 3, 0),
        prefix_budget=3,
    ),
    WindowCase(
        "a zero budget clips the cursor line away",
        "a\nx",
        "y\nb\n",
        window("", "", 1, 1, 1),  # `words` counts one for the empty text
        prefix_budget=0,
        suffix_budget=0,
    ),
    WindowCase(
        "prefix ending with a newline: the cursor is on the next, empty line",
        "a\nb\n",
        "",
        window("b\n", "", 1, 3, 0),
        prefix_budget=3,
    ),
    WindowCase(
        "prefix ending with a newline, only the cursor line fits",
        "a\nb\n",
        "",
        window("", "", 2, 1, 0),
        prefix_budget=1,
    ),
    WindowCase(
        "suffix cut at a line to the budget",
        "x",
        "y)\nb\nc\n",
        window("x", "y)\nb\n", 0, 2, 4),
        suffix_budget=4,
    ),
    WindowCase(
        "suffix cursor line over budget: its start is kept",
        "x",
        " + 1 for i in range(9)\nb\n",
        window("x", " + ", 0, 2, 2),
        suffix_budget=2,
    ),
    WindowCase(
        "CRLF line endings",
        "a\r\nb\r\nc\r\nx",
        "y\r\nb\r\nc\r\n",
        window("c\r\nx", "y\r\nb\r\n", 2, 4, 4),
        prefix_budget=4,
        suffix_budget=4,
    ),
    WindowCase(
        "CRLF prefix ending with a line end",
        "a\r\nb\r\n",
        "",
        window("b\r\n", "", 1, 3, 0),
        prefix_budget=3,
    ),
    WindowCase("CR line endings", "a\rb\rx", "y\rb\rc", window("b\rx", "y\rb\r", 1, 4, 4), 4, 4),
    # Alignment: 10 lines l0..l9 of 2 tokens, then the cursor line "x" (line 10).
    WindowCase(
        "start moved forward to a multiple of align_lines",
        lines(20) + "x",
        "",
        window("".join(f"l{i}\n" for i in range(12, 20)) + "x", "", 12, 18, 0),  # 9.. fit
        prefix_budget=24,
        align_lines=4,
    ),
    WindowCase(
        "a small window is aligned on a grid of at most half its lines",
        lines(10) + "x",
        "",
        window("l6\nl7\nl8\nl9\nx", "", 6, 10, 0),  # lines 6..: a grid of 2
        prefix_budget=10,
        align_lines=4,
    ),
    WindowCase(
        "a smaller budget in the same block starts at the same line",
        lines(20) + "x",
        "",
        window("".join(f"l{i}\n" for i in range(12, 20)) + "x", "", 12, 18, 0),  # 10.. fit
        prefix_budget=22,
        align_lines=4,
    ),
    WindowCase(
        "start already aligned",
        lines(10) + "x",
        "",
        window("l4\nl5\nl6\nl7\nl8\nl9\nx", "", 4, 14, 0),
        prefix_budget=14,
        align_lines=4,
    ),
    WindowCase(
        "no alignment when everything fits",
        lines(10) + "x",
        "",
        window(lines(10) + "x", "", 0, 22, 0),
        prefix_budget=100,
        align_lines=4,
    ),
    WindowCase(
        "no alignment that would leave only the cursor line",
        lines(10) + "x",
        "",
        window("l9\nx", "", 9, 4, 0),  # the next multiple of 4 is past the cursor line
        prefix_budget=4,
        align_lines=4,
    ),
    WindowCase(
        "no alignment onto the cursor line itself",
        lines(10) + "x",
        "",
        window("l9\nx", "", 9, 4, 0),  # the next multiple of 5 is the cursor line
        prefix_budget=4,
        align_lines=5,
    ),
]


@pytest.mark.parametrize("case", WINDOW_CASES, ids=[c.name for c in WINDOW_CASES])
def test_context_window(case: WindowCase) -> None:
    got = context_window(
        case.prefix,
        case.suffix,
        words,
        prefix_budget=case.prefix_budget,
        suffix_budget=case.suffix_budget,
        align_lines=case.align_lines,
    )
    assert got == case.want
    assert case.prefix.endswith(got.prefix)
    assert case.suffix.startswith(got.suffix)


def test_typing_at_the_end_keeps_the_window_start_for_kv_reuse() -> None:
    backend = FAMILIES[FAMILY_IDS.index("qwen")].backend()

    @functools.cache
    def count(text: str) -> int:
        return len(backend.tokenize(text, add_bos=False, special=False))

    rng = random.Random(7)
    vocabulary = ["x", "value", "self", "return", "def", "items", "=", "+", "(", ")", "0", "if"]
    doc_lines = [" ".join(rng.choices(vocabulary, k=rng.randint(1, 8))) + "\n" for _ in range(600)]
    doc = "".join(doc_lines)
    typed = "    result = compute(alpha, beta) + gamma * delta - epsilon / zeta ** eta"
    # A budget that fits lines 543.. (57 lines) and an empty cursor line: the grid is 16 lines
    # (at most half the window), so the window starts at line 544 until the typing pushes
    # line 544 out; then at 560.
    budget = count("") + sum(count(line) for line in doc_lines[543:])

    def windows(align_lines: int) -> list[ContextWindow]:
        return [
            context_window(
                doc + typed[:n],
                "",
                count,
                prefix_budget=budget,
                suffix_budget=64,
                align_lines=align_lines,
            )
            for n in range(len(typed) + 1)
        ]

    aligned = windows(32)
    firsts = [w.first_line for w in aligned]
    assert firsts[0] == 544
    assert firsts[-1] == 560
    assert sorted(firsts) == firsts
    changes = sum(a != b for a, b in itertools.pairwise(firsts))
    assert changes == 1  # once in the whole line, not on the first keystroke
    assert firsts[1] == 544
    # Without alignment the start moves line after line, and the KV cache is lost each time.
    unaligned = [w.first_line for w in windows(1)]
    assert sum(a != b for a, b in itertools.pairwise(unaligned)) >= 3

    template = FIM_FAMILIES["qwen"]
    previous = None
    for n, w in enumerate(aligned):
        assert w.prefix == "".join(doc_lines[w.first_line :]) + typed[:n]
        assert w.prefix_tokens <= budget
        prompt = build_fim_prompt(backend, w.prefix, w.suffix, template=template)
        if previous is not None and previous[0].first_line == w.first_line:
            # The whole lines before the cursor line are a shared token prefix: KV reuse.
            stable = 1 + count("".join(doc_lines[w.first_line :]))
            assert ids(prompt)[:stable] == ids(previous[1])[:stable]
        previous = (w, prompt)


def test_window_budget_holds_and_only_a_lone_cursor_line_is_clipped() -> None:
    rng = random.Random(11)
    for _ in range(500):
        n = rng.randint(0, 12)
        doc = "".join(
            " ".join("w" * rng.randint(1, 3) for _ in range(rng.randint(0, 5))) + "\n"
            for _ in range(n)
        )
        text = doc + "x " * rng.randint(0, 6)
        budget = rng.randint(0, 30)
        align = rng.choice([1, 2, 4, 32])

        w = context_window(
            text, "", words, prefix_budget=budget, suffix_budget=0, align_lines=align
        )

        assert w.prefix_tokens <= budget or w.prefix == "", (text, budget, align)
        whole_lines = "".join(text.splitlines(keepends=True)[w.first_line :])
        if w.first_line < n:
            assert w.prefix == whole_lines
        else:
            assert whole_lines.endswith(w.prefix)


# --- chat -------------------------------------------------------------------------------------

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Gemma's: BOS first, no system role, roles must alternate, "assistant" is called "model".
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

SMOLLM2_SYSTEM = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n"
)


def chat_backend(template: str | None, name: str = "tiny-chat") -> HFTokenizerBackend:
    return HFTokenizerBackend(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        chat_template=template,
        name=name,
    )


def test_chatml_template_renders_smollm2_prompt() -> None:
    messages = [ChatMessage("user", "Explain `x += 1`.")]
    assert render_chat(chat_backend(SMOLLM2_TEMPLATE), messages) == (
        SMOLLM2_SYSTEM + "<|im_start|>user\nExplain `x += 1`.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chatml_template_keeps_a_given_system_message_and_a_dialogue() -> None:
    messages = [
        ChatMessage("system", "Answer in one line."),
        ChatMessage("user", "What is 2+2?"),
        ChatMessage("assistant", "4"),
        ChatMessage("user", "And 3+3?"),
    ]
    rendered = render_chat_template(
        SMOLLM2_TEMPLATE, messages, bos_token=None, eos_token=None, add_generation_prompt=False
    )
    assert rendered == (
        "<|im_start|>system\nAnswer in one line.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
    )


def test_gemma_template_uses_bos_and_model_role() -> None:
    messages = [
        ChatMessage("user", "hi "),
        ChatMessage("assistant", "hello"),
        ChatMessage("user", "?"),
    ]
    rendered = render_chat_template(GEMMA_TEMPLATE, messages, bos_token="<bos>", eos_token="<eos>")
    assert rendered == (
        "<bos><start_of_turn>user\nhi<end_of_turn>\n"
        "<start_of_turn>model\nhello<end_of_turn>\n"
        "<start_of_turn>user\n?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        (
            [ChatMessage("system", "be brief"), ChatMessage("user", "hi")],
            "System role not supported",
        ),
        ([ChatMessage("user", "a"), ChatMessage("user", "b")], "Conversation roles must alternate"),
    ],
    ids=["system role", "roles not alternating"],
)
def test_template_refusal_is_a_chat_template_error_with_its_reason(
    messages: list[ChatMessage], reason: str
) -> None:
    with pytest.raises(ChatTemplateError, match=f"refused the messages: {re.escape(reason)}"):
        render_chat_template(GEMMA_TEMPLATE, messages, bos_token="<bos>", eos_token="<eos>")


HI = [ChatMessage("user", "hi")]


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__['os'] }}",
        "{{ messages.__class__.__base__.__subclasses__() }}",
        "{{ messages.append({'role': 'system', 'content': 'x'}) }}",  # immutable sandbox
        "{% set m = messages[0] %}{{ m.update({'role': 'x'}) }}",
    ],
)
def test_sandbox_refuses_unsafe_access(source: str) -> None:
    with pytest.raises(ChatTemplateError, match=r"chat template failed: .*unsafe"):
        render_chat_template(source, HI, bos_token=None, eos_token=None)


def test_sandbox_renders_a_lone_unsafe_attribute_as_nothing() -> None:
    # Jinja's sandbox turns an unsafe attribute into an undefined value that prints as "";
    # only using it further raises. Either way nothing of the object reaches the prompt.
    assert render_chat_template("[{{ ''.__class__ }}]", HI, bos_token=None, eos_token=None) == "[]"


@pytest.mark.parametrize(
    "source",
    [
        "{{ 1 / 0 }}",
        "{{ messages[0]['content'] + 1 }}",
        "{% for i in range(10 ** 9) %}{% endfor %}",
        "{{ undefined_name.attribute }}",
    ],
    ids=["division by zero", "type error", "range over the sandbox limit", "undefined"],
)
def test_template_failing_at_render_is_a_chat_template_error(source: str) -> None:
    with pytest.raises(ChatTemplateError, match="the model's chat template failed: "):
        render_chat_template(source, HI, bos_token=None, eos_token=None)


@pytest.mark.parametrize("source", ["{% if %}", "{% for m in messages %}", "{{ 'a' }"])
def test_template_that_does_not_compile_is_a_chat_template_error(source: str) -> None:
    with pytest.raises(ChatTemplateError, match="chat template does not compile"):
        render_chat_template(source, HI, bos_token=None, eos_token=None)


@pytest.mark.parametrize("template", [None, ""])
def test_model_without_chat_template_is_named(template: str | None) -> None:
    with pytest.raises(ChatTemplateError, match="model gemma-base has no chat template"):
        render_chat(chat_backend(template, name="gemma-base"), HI)


def test_tojson_keeps_non_ascii_text() -> None:
    messages = [ChatMessage("user", 'héllo → 世界 😀 "quoted"')]
    source = (
        "{% for m in messages %}{{ m | tojson }}|{{ m.content | tojson(indent=2) }}{% endfor %}"
    )
    assert render_chat_template(source, messages, bos_token=None, eos_token=None) == (
        '{"role": "user", "content": "héllo → 世界 😀 \\"quoted\\""}|"héllo → 世界 😀 \\"quoted\\""'
    )


def test_template_helpers_of_transformers_are_available() -> None:
    source = (
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{{ m.content }}{% endfor %}|{{ strftime_now('%Y') }}"
    )
    messages = [ChatMessage("user", "one"), ChatMessage("user", "two")]
    before = datetime.datetime.now().year
    rendered = render_chat_template(source, messages, bos_token=None, eos_token=None)
    after = datetime.datetime.now().year
    assert rendered in {f"one|{before}", f"one|{after}"}


@pytest.mark.parametrize("where", ["prefix", "suffix"])
def test_a_megabyte_long_cursor_line_is_clipped_to_the_budget_with_few_counts(where: str) -> None:
    """A minified file's one line: the window fits the budget, keeps the text next to the
    cursor, and counts tokens of no more than the budget's worth of characters, a few times."""
    line = "var a=function(b){return b+1};" * 40_000
    counted: list[int] = []

    def count(text: str) -> int:
        counted.append(len(text))
        return len(text) // 4

    prefix, suffix = ("x = 1\n" + line, "") if where == "prefix" else ("", line + "\n")
    w = context_window(prefix, suffix, count, prefix_budget=100, suffix_budget=100)
    if where == "prefix":
        assert 0 < w.prefix_tokens <= 100
        assert line.endswith(w.prefix)
    else:
        assert 0 < w.suffix_tokens <= 100
        assert line.startswith(w.suffix)
    assert max(counted) <= 100 * MAX_CHARS_PER_TOKEN
    assert len(counted) < 40
