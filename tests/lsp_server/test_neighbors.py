"""Context beyond the current file: chunking, ranking, budget, stability and the prompt formats, on
plain functions and the scripted backend."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

import pytest
from fake_backend import SPECIAL_TOKENS, FakeBackend, byte_ids

from engine.completion import CompletionModel
from engine.engine import Engine
from engine.fim import FIM_FAMILIES, RepoFile, build_fim_prompt, render_fim_text
from lsp_server.documents import DocumentSnapshot, lines_at
from lsp_server.inline.prompt import build_prompt
from lsp_server.neighbors import (
    MAX_DOCUMENTS,
    REGION_LINES,
    RING_REGIONS,
    WINDOW_LINES,
    WINDOW_STRIDE,
    NeighborContext,
    OtherDocument,
    PlainStyle,
    PromptContext,
    Snippet,
    comment,
    display_path,
    identifiers,
    jaccard,
    render_plain,
    select_snippets,
    windows,
)
from lsp_server.settings import Settings

ROOT = "file:///home/me/shop"
BILLING = (
    "import math\n\n\n"
    "def compute_invoice_total(items, tax_rate):\n"
    "    subtotal = sum(item.price * item.quantity for item in items)\n"
    "    return math.ceil(subtotal * (1 + tax_rate))\n"
)
UNRELATED = "".join(f"def draw_{i}(canvas):\n    canvas.paint({i})\n" for i in range(40))
CART = (
    "from billing import compute_invoice_total\n\n\ndef checkout(items, tax_rate):\n    total = |\n"
)


def chars(text: str) -> int:
    """A token counter for tests: one token per 4 characters, rounded up."""
    return -(-len(text) // 4)


def snap_at(text: str, uri: str = f"{ROOT}/cart.py") -> DocumentSnapshot:
    offset = text.index("|")
    return DocumentSnapshot.at(text.replace("|", "", 1), offset, uri=uri)


def others(version: int = 1, **texts: str) -> dict[str, OtherDocument]:
    return documents(texts, version)


def documents(texts: Mapping[str, str], version: int = 1) -> dict[str, OtherDocument]:
    """Open documents under ROOT, by name (without `.py`): their text, all at `version`."""
    return {
        f"{ROOT}/{name}.py": OtherDocument(uri=f"{ROOT}/{name}.py", version=version, text=text)
        for name, text in texts.items()
    }


# --- paths ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "roots", "label", "repo"),
    [
        (f"{ROOT}/pkg/mod.py", [ROOT], "pkg/mod.py", "shop"),
        ("file:///elsewhere/tool.py", [ROOT], "tool.py", None),
        ("file:///c%3A/Users/me/proj/src/a.py", ["file:///C:/Users/me/proj"], "src/a.py", "proj"),
        (
            "file:///home/me/my%20dir/caf%C3%A9.py",
            ["file:///home/me/my%20dir"],
            "café.py",
            "my dir",
        ),
        ("file:///home/me/100%25/x.py", ["file:///home/me/100%25"], "x.py", "100%"),
        ("untitled:Untitled-1", [ROOT], "Untitled-1", None),
        (f"{ROOT}/a.py", [], "a.py", None),
    ],
)
def test_a_document_is_labelled_by_its_path_in_the_workspace_else_its_name(
    uri: str, roots: list[str], label: str, repo: str | None
) -> None:
    assert display_path(uri, roots) == (label, repo)


@pytest.mark.parametrize(
    ("language", "line"),
    [
        ("python", "# a.py"),
        ("typescript", "// a.py"),
        ("lua", "-- a.py"),
        ("html", "<!-- a.py -->"),
        ("some-new-language", "// a.py"),
    ],
)
def test_the_path_comment_is_in_the_current_languages_syntax(language: str, line: str) -> None:
    assert comment(language, "a.py") == line


# --- chunking and ranking ---------------------------------------------------------------------


def test_windows_slide_over_the_document_and_cover_its_end() -> None:
    text = "".join(f"line{i}\n" for i in range(45))
    found = windows("u", "a.py", text)
    assert [w.first_line for w in found] == list(range(0, 45 - WINDOW_STRIDE, WINDOW_STRIDE))
    assert all(w.line_count == WINDOW_LINES for w in found[:-1])
    assert found[-1].text.endswith("line44\n")


def test_identifiers_leave_out_keywords_and_jaccard_is_their_overlap() -> None:
    assert identifiers("def f(self, x): return x.y") == {"f", "x", "y"}
    assert jaccard(frozenset("ab"), frozenset("bc")) == pytest.approx(1 / 3)
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_the_document_that_shares_the_cursors_names_is_chosen() -> None:
    context = NeighborContext().context_for(
        snap_at(CART),
        others(billing=BILLING, canvas=UNRELATED),
        budget=512,
        count_tokens=chars,
        roots=[ROOT],
    )
    assert context is not None
    assert [s.path for s in context.snippets] == ["billing.py"]
    assert "def compute_invoice_total(items, tax_rate):" in context.snippets[0].text
    assert (context.path, context.repo) == ("cart.py", "shop")


def test_the_chosen_snippets_fit_the_budget_with_their_headers() -> None:
    candidates = [
        (1.0 - i / 100, Snippet(uri="u", path="a.py", first_line=30 * i, text="x" * 400))
        for i in range(10)
    ]
    chosen = select_snippets(
        candidates, budget=250, count_tokens=chars, header=lambda s: f"# {s.path}\n"
    )
    assert len(chosen) == 2  # 100 tokens of code and 2 of header each
    assert select_snippets(candidates, budget=50, count_tokens=chars, header=lambda s: "") == ()


def test_snippets_are_ordered_by_document_and_line_not_by_score_and_adjacent_ones_merge() -> None:
    def snippet(path: str, first: int) -> Snippet:
        return Snippet(uri=path, path=path, first_line=first, text=f"{path}{first}\n")

    scored = [(0.9, snippet("b.py", 50)), (0.8, snippet("a.py", 2)), (0.7, snippet("b.py", 51))]
    chosen = select_snippets(scored, budget=1000, count_tokens=chars, header=lambda s: "")
    assert [(s.path, s.first_line, s.text) for s in chosen] == [
        ("a.py", 2, "a.py2\n"),
        ("b.py", 50, "b.py50\nb.py51\n"),
    ]


def test_overlapping_windows_are_not_both_chosen() -> None:
    text = "".join(f"total_{i} = {i}\n" for i in range(60))
    scored = [(1.0, w) for w in windows("u", "a.py", text)]
    chosen = select_snippets(scored, budget=10_000, count_tokens=chars, header=lambda s: "")
    lines = [line for s in chosen for line in s.text.splitlines()]
    assert len(lines) == len(set(lines))


def test_the_ring_keeps_the_newest_regions_merges_near_ones_and_forgets_closed_documents() -> None:
    ring = NeighborContext()
    ring.note("a", 100)
    ring.note("a", 103)  # the same region: replaced, not added
    for i in range(RING_REGIONS):
        ring.note(f"d{i}", 0)
    assert "a" not in ring.recent_uris()  # the oldest was evicted
    assert ring.recent_uris()[0] == f"d{RING_REGIONS - 1}"
    ring.forget(f"d{RING_REGIONS - 1}")
    assert f"d{RING_REGIONS - 1}" not in ring.recent_uris()


def test_a_recently_edited_region_is_preferred_to_an_equally_similar_window() -> None:
    # Two copies of the same function, far apart: the one the user just edited wins.
    body = "def compute_invoice_total(items, tax_rate):\n    return items, tax_rate\n"
    text = body + "\n" * 200 + body
    neighbors = NeighborContext()
    neighbors.note(f"{ROOT}/billing.py", 202)
    context = neighbors.context_for(
        snap_at(CART), others(billing=text), budget=40, count_tokens=chars, roots=[ROOT]
    )
    assert context is not None
    assert [s.first_line for s in context.snippets] == [192]  # the ring's region, 10 above


def test_a_recent_region_that_shares_no_name_with_the_cursor_is_not_offered() -> None:
    # Unrelated code misleads a small model: recency alone does not make a snippet.
    neighbors = NeighborContext()
    neighbors.note(f"{ROOT}/canvas.py", 5)
    context = neighbors.context_for(
        snap_at(CART), others(canvas=UNRELATED), budget=512, count_tokens=chars
    )
    assert context is not None
    assert context.snippets == ()


def test_a_copy_of_the_code_near_the_cursor_is_not_offered_again() -> None:
    # The same file open twice (or a duplicate): the model would only repeat it.
    copy = CART.replace("|", "")
    context = NeighborContext().context_for(
        snap_at(CART), others(copy=copy, billing=BILLING), budget=512, count_tokens=chars
    )
    assert context is not None
    assert [s.path for s in context.snippets] == ["billing.py"]


def test_no_budget_no_context() -> None:
    context = NeighborContext().context_for(
        snap_at(CART), others(billing=BILLING), budget=0, count_tokens=chars
    )
    assert context is None


# --- stability --------------------------------------------------------------------------------


def test_typing_keeps_the_selection_until_the_cursor_leaves_its_region() -> None:
    neighbors = NeighborContext()
    docs = others(billing=BILLING, canvas=UNRELATED)
    first = neighbors.context_for(snap_at(CART), docs, budget=512, count_tokens=chars)
    for typed in ("c", "co", "compute_", "compute_invoice_total(items"):
        again = neighbors.context_for(
            snap_at(CART.replace("|", typed + "|")), docs, budget=512, count_tokens=chars
        )
        assert again is first
    assert neighbors.selections == 1
    far = CART.replace("|", "\n" * (REGION_LINES + 1) + "    |")
    neighbors.context_for(snap_at(far), docs, budget=512, count_tokens=chars)
    assert neighbors.selections == 2


def test_a_small_edit_in_a_chosen_document_keeps_the_selection() -> None:
    neighbors = NeighborContext()
    uri = f"{ROOT}/billing.py"
    first = neighbors.context_for(
        snap_at(CART), others(billing=BILLING), budget=512, count_tokens=chars
    )
    small = {uri: OtherDocument(uri=uri, version=2, text=BILLING.replace("ceil", "floor"))}
    assert neighbors.context_for(snap_at(CART), small, budget=512, count_tokens=chars) is first
    assert neighbors.selections == 1


@pytest.mark.parametrize(
    "now",
    [
        {},  # closed
        others(2, billing="".join(f"value_{i} = {i}\n" for i in range(30))),  # rewritten
    ],
)
def test_a_chosen_document_closed_or_changed_a_lot_makes_a_new_selection(
    now: dict[str, OtherDocument],
) -> None:
    neighbors = NeighborContext()
    first = neighbors.context_for(
        snap_at(CART), others(billing=BILLING), budget=512, count_tokens=chars
    )
    assert neighbors.context_for(snap_at(CART), now, budget=512, count_tokens=chars) is not first
    assert neighbors.selections == 2


def test_only_the_16_most_recently_used_other_documents_are_read() -> None:
    """README "Prompts": the windows come from at most 16 other open documents, the most
    recently used first: the 17th is not read until the user works in it again."""
    neighbors = NeighborContext()
    fillers = {f"canvas_{i}": UNRELATED for i in range(MAX_DOCUMENTS)}
    docs = documents({"billing": BILLING, **fillers})  # billing is 17th once the others were used
    for i in range(MAX_DOCUMENTS):
        neighbors.note(f"{ROOT}/canvas_{i}.py", 0)
    context = neighbors.context_for(snap_at(CART), docs, budget=512, count_tokens=chars)
    assert context is not None
    assert "billing.py" not in [s.path for s in context.snippets]
    neighbors.note(f"{ROOT}/billing.py", 30)  # a region with no code: only the document counts
    far = CART.replace("|", "\n" * (REGION_LINES + 1) + "    total = |")
    context = neighbors.context_for(snap_at(far), docs, budget=512, count_tokens=chars)
    assert context is not None
    assert [s.path for s in context.snippets] == ["billing.py"]


def test_a_new_budget_makes_a_new_selection_that_fits_it() -> None:
    """README "Prompts": the selection is made again when the budget changes."""
    neighbors = NeighborContext()
    docs = others(billing=BILLING, canvas=UNRELATED)
    first = neighbors.context_for(snap_at(CART), docs, budget=512, count_tokens=chars)
    assert first is not None
    assert first.snippets
    small = neighbors.context_for(snap_at(CART), docs, budget=8, count_tokens=chars)
    assert neighbors.selections == 2
    assert small is not None
    assert small.snippets == ()  # nothing fits 8 tokens with its header
    again = neighbors.context_for(snap_at(CART), docs, budget=512, count_tokens=chars)
    assert neighbors.selections == 3
    assert again is not None
    assert again.snippets == first.snippets


class FakeModel(Protocol):
    """The `fake_model` fixture: a model over a FakeBackend, with FIM tokens or without."""

    def __call__(self, fim: bool = True) -> CompletionModel: ...


@pytest.fixture
def fake_model() -> Iterator[FakeModel]:
    engines: list[Engine] = []

    def make(fim: bool = True) -> CompletionModel:
        engine = Engine(FakeBackend(script=["x"]))
        engines.append(engine)
        return CompletionModel.of(engine, None if fim else "none")

    yield make
    for engine in engines:
        engine.close()


@pytest.mark.parametrize("fim", [True, False])
def test_typing_a_few_characters_keeps_the_prompts_leading_context_byte_identical(
    fake_model: FakeModel, fim: bool
) -> None:
    model = fake_model(fim)
    neighbors = NeighborContext()
    docs = others(billing=BILLING)
    settings = Settings()
    prompts = []
    for typed in ("", "c", "co", "com"):
        snap = snap_at(CART.replace("|", typed + "|"))
        context = neighbors.context_for(
            snap, docs, budget=512, count_tokens=model.format.count_tokens, roots=[ROOT]
        )
        prompts.append(build_prompt(model, snap, settings, context))
    lead = render_plain(
        PromptContext(path="cart.py", repo="shop", language_id="python", snippets=())
    )
    start = prompts[0].text.index(lead)  # where the current file starts
    assert "def compute_invoice_total" in prompts[0].text[:start]
    for prompt in prompts[1:]:
        assert prompt.text[: start + len(lead)] == prompts[0].text[: start + len(lead)]
    # The same in token ids: the special tokens, then the context's bytes, one id each.
    head = prompts[0].text[:start]
    specials = [t for t in ("<bos>", "<fim_prefix>") if t in head]
    shared = len(specials) + len(byte_ids(head.replace("<bos>", "").replace("<fim_prefix>", "")))
    first_ids = prompts[0].token_ids
    assert first_ids is not None
    for prompt in prompts[1:]:
        assert prompt.token_ids is not None
        assert prompt.token_ids[:shared] == first_ids[:shared]


# --- formats ----------------------------------------------------------------------------------


def test_without_file_markers_the_snippets_are_a_path_comment_and_the_code(
    fake_model: FakeModel,
) -> None:
    model = fake_model(fim=False)
    snippet = Snippet(uri="u", path="billing.py", first_line=3, text=BILLING.split("\n\n\n")[1])
    context = PromptContext(path="cart.py", repo="shop", language_id="python", snippets=(snippet,))
    snap = snap_at(CART)
    prompt = build_prompt(model, snap, Settings(), context)
    expected = "<bos># billing.py\n" + snippet.text + "# cart.py\n" + snap.prefix
    assert prompt.text == expected


def test_the_commented_plain_style_comments_out_every_line() -> None:
    snippet = Snippet(uri="u", path="b.js", first_line=0, text="let a = 1;\n\nf(a);\n")
    context = PromptContext(path="c.js", repo=None, language_id="javascript", snippets=(snippet,))
    assert render_plain(context, PlainStyle.COMMENTS) == (
        "// Compare this snippet from b.js:\n// let a = 1;\n//\n// f(a);\n// c.js\n"
    )


FILES = (RepoFile(path="pkg/a.py", text="A = 1"), RepoFile(path="pkg/b.py", text="B = 2\n"))


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (
            "qwen",
            "<|repo_name|>shop\n<|file_sep|>pkg/a.py\nA = 1\n<|file_sep|>pkg/b.py\nB = 2\n"
            "<|file_sep|>cart.py\n<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|>",
        ),
        (
            "starcoder",
            "<repo_name>shop<file_sep>pkg/a.py\nA = 1\n<file_sep>pkg/b.py\nB = 2\n"
            "<file_sep><fim_prefix>cart.py\nx = <fim_suffix>\n<fim_middle>",
        ),
        (
            "codegemma",
            "pkg/a.py\nA = 1\n<|file_separator|>pkg/b.py\nB = 2\n<|file_separator|>"
            "cart.py\n<|fim_prefix|>x = <|fim_suffix|>\n<|fim_middle|>",
        ),
    ],
)
def test_each_family_gets_its_own_repository_format(family: str, expected: str) -> None:
    prompt = render_fim_text(
        "x = ", "\n", template=FIM_FAMILIES[family], files=FILES, path="cart.py", repo="shop"
    )
    assert prompt.text == expected


def test_the_repository_format_puts_the_markers_in_as_special_token_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(SPECIAL_TOKENS, "<file_sep>", 7)
    backend = FakeBackend()
    prompt = build_fim_prompt(
        backend, "x = ", "", template=FIM_FAMILIES["starcoder"], files=FILES[:1], path="c.py"
    )
    assert list(prompt.token_ids or ()) == [
        SPECIAL_TOKENS["<bos>"],
        7,
        *byte_ids("pkg/a.py\nA = 1\n"),
        7,
        SPECIAL_TOKENS["<fim_prefix>"],
        *byte_ids("c.py\nx = "),
        SPECIAL_TOKENS["<fim_suffix>"],
        SPECIAL_TOKENS["<fim_middle>"],
    ]


def test_a_family_without_file_markers_is_told_apart(
    monkeypatch: pytest.MonkeyPatch, fake_model: FakeModel
) -> None:
    assert not fake_model(fim=True).format.repo_files  # the fake tokenizer has no <file_sep>
    monkeypatch.setitem(SPECIAL_TOKENS, "<file_sep>", 7)
    assert fake_model(fim=True).format.repo_files


def test_lines_at_takes_whole_lines_and_stops_at_the_end() -> None:
    text = "a\nb\r\nc\nd"
    assert lines_at(text, 1, 2) == "b\r\nc\n"
    assert lines_at(text, 3, 5) == "d"
    assert lines_at(text, 9, 1) == ""
