"""Next-edit formats (engine/next_edit.py): exact prompts per format, detection from special
tokens, the stops, reading answers back, and a rewrite as minimal edits.

The golden prompts are derived from the tests beside the code each format follows: Zed's
crates/zeta_prompt/src/zeta_prompt.rs (`test_seed_coder_basic_format`,
`test_seed_coder_no_context`, `test_format_zeta1_from_input_basic`; Zeta v1's event path is
quoted here as crates/zeta/src/zeta.rs wrote it, see the module). Sweep's are written from its
server's `prompt` and `diff_format` templates (sweep-autocomplete, cited in the module), which
have no tests of their own.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest
from hf_tokenizer import HFTokenizerBackend

from engine.next_edit import (
    NEXT_EDIT_FORMAT_SETTINGS,
    SWEEP,
    ZETA1,
    ZETA2,
    NextEditFormat,
    NextEditInput,
    RecentEdit,
    RegionEdit,
    apply_region_edits,
    build_next_edit_prompt,
    detect_next_edit_format,
    next_edit_format,
    next_edit_pieces,
    parse_rewrite,
    region_edits,
    render_next_edit_text,
)
from engine.types import StopConditions

QWEN_SPECIALS = ("<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
ZETA1_MARKERS = ("<|editable_region_start|>", "<|user_cursor_is_here|>", "<|editable_region_end|>")
SEED_FIM = ("<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>", "<filename>")
#: Qwen2.5-Coder's repository tokens: every Qwen2.5-Coder has them, Sweep's models too.
QWEN_REPO = ("<|repo_name|>", "<|file_sep|>")


def special_ids(*tokens: str) -> Callable[[str], int | None]:
    table = {token: i for i, token in enumerate(tokens)}
    return table.get


# --- exact prompts ----------------------------------------------------------------------------

SWEEP_TEXT = "def f(a):\n    x = h(a)\n    y = g(a)\n    return x\n"
#: The user changed `g` to `h` on the second line (in another file before that); the cursor
#: is at the third line's `g`; the region is the last three lines.
SWEEP_EDITED = NextEditInput(
    path="m.py",
    text=SWEEP_TEXT,
    region_start=SWEEP_TEXT.index("    x"),
    region_end=len(SWEEP_TEXT) - 1,
    cursor=SWEEP_TEXT.index("g(a)"),
    edits=(
        RecentEdit(path="other.py", diff="@@ -7 +7 @@\n-old\n+new\n"),
        RecentEdit(
            path="m.py",
            diff="--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n def f(a):\n"
            "-    x = g(a)\n+    x = h(a)\n     y = g(a)\n",
        ),
    ),
)
ZETA2_WITH_HISTORY = NextEditInput(
    path="test.rs",
    text="prefix\neditable\nsuffix",
    region_start=7,
    region_end=15,
    cursor=10,
    edits=(RecentEdit(path="a.rs", diff="-old\n+new\n"),),
)
ZETA1_AT_FILE_START = NextEditInput(
    path="src/main.rs",
    text="fn before() {}\nfn foo() {\n    let x = 1;\n}\nfn after() {}\n",
    region_start=15,
    region_end=41,
    cursor=30,
    edits=(RecentEdit(path="other.rs", diff="-old\n+new\n"),),
    at_file_start=True,
)


@pytest.mark.parametrize(
    ("fmt", "given", "expected"),
    [
        pytest.param(
            ZETA2,
            ZETA2_WITH_HISTORY,
            "<[fim-suffix]>\nsuffix\n"
            "<[fim-prefix]><filename>edit_history\n--- a/a.rs\n+++ b/a.rs\n-old\n+new\n\n"
            "<filename>test.rs\nprefix\n<<<<<<< CURRENT\nedi<|user_cursor|>table\n=======\n"
            "<[fim-middle]>",
            id="zeta2-history",
        ),
        pytest.param(
            ZETA2,
            NextEditInput(
                path="test.rs",
                text="before\nmiddle\nafter",
                region_start=7,
                region_end=13,
                cursor=10,
            ),
            "<[fim-suffix]>\nafter\n<[fim-prefix]><filename>test.rs\nbefore\n"
            "<<<<<<< CURRENT\nmid<|user_cursor|>dle\n=======\n<[fim-middle]>",
            id="zeta2-no-history",
        ),
        pytest.param(
            ZETA2,
            NextEditInput(path="/abs/x.py", text="code", region_start=0, region_end=4, cursor=4),
            "<[fim-suffix]>\n<[fim-prefix]><filename>/abs/x.py\n"
            "<<<<<<< CURRENT\ncode<|user_cursor|>\n=======\n<[fim-middle]>",
            id="zeta2-whole-text-cursor-at-end",
        ),
        pytest.param(
            ZETA1,
            ZETA1_AT_FILE_START,
            "### Instruction:\n"
            "You are a code completion assistant and your task is to analyze user edits and "
            "then rewrite an excerpt that the user provides, suggesting the appropriate edits "
            "within the excerpt, taking into account the cursor location.\n\n"
            "### User Edits:\n\n"
            'User edited "other.rs":\n```diff\n-old\n+new\n\n```\n\n'
            "### User Excerpt:\n\n"
            "```src/main.rs\n<|start_of_file|>\nfn before() {}\n<|editable_region_start|>\n"
            "fn foo() {\n    <|user_cursor_is_here|>let x = 1;\n\n<|editable_region_end|>}\n"
            "fn after() {}\n\n```\n\n### Response:\n",
            id="zeta1-at-file-start",
        ),
        pytest.param(
            ZETA1,
            NextEditInput(
                path="a.py",
                text="x = 1\ny = 2\nz = 3\n",
                region_start=6,
                region_end=11,
                cursor=6,
                edits=(
                    RecentEdit(path="a.py", diff="--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+x = 1"),
                    RecentEdit(path='we"ird\\.py', diff="@@ -2 +2 @@\n-a\n+b\n"),
                ),
            ),
            "### Instruction:\n"
            "You are a code completion assistant and your task is to analyze user edits and "
            "then rewrite an excerpt that the user provides, suggesting the appropriate edits "
            "within the excerpt, taking into account the cursor location.\n\n"
            "### User Edits:\n\n"
            'User edited "a.py":\n```diff\n@@ -1 +1 @@\n-x\n+x = 1\n\n```\n\n'
            'User edited "we\\"ird\\\\.py":\n```diff\n@@ -2 +2 @@\n-a\n+b\n\n```\n\n'
            "### User Excerpt:\n\n"
            "```a.py\nx = 1\n<|editable_region_start|>\n<|user_cursor_is_here|>y = 2\n"
            "<|editable_region_end|>\nz = 3\n\n```\n\n### Response:\n",
            id="zeta1-two-edits-header-dropped-path-quoted",
        ),
        pytest.param(
            SWEEP,
            SWEEP_EDITED,
            "<|file_sep|>m.py\n"
            "def f(a):\n    x = g(a)\n    y = g(a)\n    return x\n"
            "\n"
            "<|file_sep|>other.py:7:7\noriginal:\nold\nupdated:\nnew\n"
            "<|file_sep|>m.py:1:2\noriginal:\ndef f(a):\n    x = g(a)\n    y = g(a)\n"
            "updated:\ndef f(a):\n    x = h(a)\n    y = g(a)\n"
            "<|file_sep|>original/m.py:2:5\n    x = g(a)\n    y = g(a)\n    return x\n"
            "<|file_sep|>current/m.py:2:5\n    x = h(a)\n    y = <|cursor|>g(a)\n"
            "    return x\n"
            "<|file_sep|>updated/m.py:2:5\n",
            id="sweep-edits-undone-in-the-original-sections",
        ),
        pytest.param(
            SWEEP,
            NextEditInput(
                path="src/a.go",
                text="package a\n\nvar x = 1\n",
                region_start=11,
                region_end=21,
                cursor=11,
                edits=(RecentEdit(path="src/a.go", diff="@@ -3 +3 @@\n-var x = 1 \n+var x = 1\n"),),
            ),
            "<|file_sep|>src/a.go\npackage a\n\nvar x = 1\n"
            "\n\n"
            "<|file_sep|>original/src/a.go:1:2\nvar x = 1\n"
            "<|file_sep|>current/src/a.go:1:2\n<|cursor|>var x = 1\n"
            "<|file_sep|>updated/src/a.go:1:2\n",
            id="sweep-whitespace-edit-left-out-region-ending-a-line",
        ),
    ],
)
def test_the_prompt_is_the_formats_own(
    fmt: NextEditFormat, given: NextEditInput, expected: str
) -> None:
    """The remote text, and the local pieces without any special token, are the golden text."""
    assert render_next_edit_text(fmt, given).text == expected
    pieces = next_edit_pieces(fmt, given, has_token=lambda _: False)
    assert pieces == [(False, expected)]


def test_an_input_with_the_cursor_outside_the_region_is_refused() -> None:
    with pytest.raises(ValueError, match="region_start"):
        NextEditInput(path="a", text="abcdef", region_start=2, region_end=4, cursor=5)


# --- detection and the setting ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("specials", "family"),
    [
        pytest.param((*QWEN_SPECIALS, *ZETA1_MARKERS), "zeta1", id="zeta1-markers-special"),
        pytest.param((*SEED_FIM, "<|user_cursor|>"), "zeta2", id="seed-fim-and-cursor"),
        # A base coder's own tokens name no next-edit model: the published Zeta models keep
        # their markers as text, so these are what their tokenizers look like.
        pytest.param(QWEN_SPECIALS, None, id="qwen-coder"),
        pytest.param(SEED_FIM, None, id="seed-coder"),
        pytest.param(
            (*QWEN_SPECIALS, *QWEN_REPO, "<|cursor|>"), "sweep", id="sweep-cursor-special"
        ),
        pytest.param((*QWEN_SPECIALS, *QWEN_REPO), None, id="qwen-coder-repo-tokens"),
        pytest.param(ZETA1_MARKERS[:2], None, id="part-of-the-markers"),
        pytest.param((), None, id="nothing"),
    ],
)
def test_detection_needs_the_formats_own_markers_as_special_tokens(
    specials: tuple[str, ...], family: str | None
) -> None:
    fmt = detect_next_edit_format(special_ids(*specials))
    assert (fmt.family if fmt else None) == family
    assert next_edit_format(None, special_ids(*specials)) is fmt


def test_the_setting_names_a_format_or_none() -> None:
    nothing = special_ids()
    assert NEXT_EDIT_FORMAT_SETTINGS == ("zeta1", "zeta2", "sweep", "none")
    assert next_edit_format("zeta1", nothing) is ZETA1
    assert next_edit_format("zeta2", nothing) is ZETA2
    assert next_edit_format("sweep", nothing) is SWEEP
    assert next_edit_format("none", special_ids(*ZETA1_MARKERS)) is None
    with pytest.raises(ValueError, match="instinct"):
        next_edit_format("instinct", nothing)


# --- local ids, remote text, stops ------------------------------------------------------------


def test_a_local_prompt_has_its_markers_by_id_and_the_codes_spelling_as_text() -> None:
    """Markers the tokenizer has are single ids; code that spells a marker stays plain text."""
    backend = HFTokenizerBackend((*QWEN_SPECIALS, *ZETA1_MARKERS), eos_token="<|endoftext|>")
    spelled = 'MARK = "<|editable_region_end|>"\n'
    given = NextEditInput(
        path="m.py",
        text=spelled + "a = 1\n",
        region_start=len(spelled),
        region_end=len(spelled) + 5,
        cursor=len(spelled) + 1,
    )
    prompt = build_next_edit_prompt(backend, ZETA1, given)
    assert prompt.token_ids is not None
    found = [backend.special_token_id(m) for m in ZETA1_MARKERS]
    assert None not in found  # every marker is a special token
    marker_ids = {i for i in found if i is not None}
    assert sorted(i for i in prompt.token_ids if i in marker_ids) == sorted(marker_ids)
    assert prompt.text == render_next_edit_text(ZETA1, given).text
    assert backend.decode(prompt.token_ids) == prompt.text
    assert len(backend.tokenize("<|editable_region_end|>", add_bos=False, special=False)) > 1
    # The end marker is a token here: generation stops at its id, kept for parsing.
    end_id = backend.special_token_id("<|editable_region_end|>")
    assert end_id is not None
    assert prompt.stops == StopConditions(stop_token_ids_visible=(end_id,))


def test_a_tokenizer_without_the_markers_reads_them_as_text() -> None:
    """The published Zeta models: markers are plain text, the end a stop string kept."""
    backend = HFTokenizerBackend(QWEN_SPECIALS, eos_token="<|endoftext|>")
    prompt = build_next_edit_prompt(backend, ZETA2, ZETA2_WITH_HISTORY)
    text = render_next_edit_text(ZETA2, ZETA2_WITH_HISTORY).text
    assert prompt.token_ids == tuple(backend.tokenize(text, add_bos=False, special=False))
    expected = StopConditions(stop=(">>>>>>> UPDATED",), include_stop_str_in_output=True)
    assert prompt.stops == expected
    assert render_next_edit_text(ZETA2, ZETA2_WITH_HISTORY).stops == expected


def test_sweep_markers_are_ids_where_the_tokenizer_has_them_and_it_ends_at_either_end() -> None:
    """Sweep's model is Qwen2.5-Coder's: `<|file_sep|>` and `<|endoftext|>` are its special
    tokens, `<|cursor|>` is text unless the tokenizer has it; generation stops at both ends,
    kept for parsing (by id where they are tokens, as text for a remote server)."""
    backend = HFTokenizerBackend((*QWEN_SPECIALS, *QWEN_REPO), eos_token="<|endoftext|>")
    prompt = build_next_edit_prompt(backend, SWEEP, SWEEP_EDITED)
    assert prompt.token_ids is not None
    file_sep = backend.special_token_id("<|file_sep|>")
    end_of_text = backend.special_token_id("<|endoftext|>")
    assert file_sep is not None
    assert end_of_text is not None
    assert prompt.token_ids.count(file_sep) == 6  # the file, two edits, three sections
    assert prompt.text == render_next_edit_text(SWEEP, SWEEP_EDITED).text
    assert backend.decode(prompt.token_ids) == prompt.text
    assert prompt.stops == StopConditions(stop_token_ids_visible=(file_sep, end_of_text))
    assert render_next_edit_text(SWEEP, SWEEP_EDITED).stops == StopConditions(
        stop=("<|file_sep|>", "<|endoftext|>"), include_stop_str_in_output=True
    )


def test_a_local_prompt_starts_with_the_models_bos() -> None:
    backend = HFTokenizerBackend(
        ("<s>", *ZETA1_MARKERS), bos_token="<s>", eos_token="<s>", adds_bos=True
    )
    prompt = build_next_edit_prompt(backend, ZETA1, ZETA1_AT_FILE_START)
    assert prompt.token_ids is not None
    assert prompt.token_ids[0] == backend.special_token_id("<s>")
    assert prompt.text.startswith("<s>### Instruction:")


# --- reading answers back ---------------------------------------------------------------------

ZETA1_REGION = NextEditInput(
    path="a.py", text="x = 1\ny = 2\nz = 3\n", region_start=6, region_end=11, cursor=6
)


@pytest.mark.parametrize(
    ("answer", "region"),
    [
        pytest.param(
            "```a.py\nx = 1\n<|editable_region_start|>\ny = 20\n<|editable_region_end|>",
            "y = 20",
            id="rewrite",
        ),
        pytest.param(
            "<|editable_region_start|>\ny = <|user_cursor_is_here|>2\nw = 4\n"
            "<|editable_region_end|>",
            "y = 2\nw = 4",
            id="cursor-marker-removed-as-zed-does",
        ),
        pytest.param("<|editable_region_start|>\n<|editable_region_end|>", "", id="region-emptied"),
        pytest.param("y = 20\n<|editable_region_end|>", None, id="no-start-marker"),
        pytest.param("<|editable_region_start|>\ny = 20\n", None, id="cut-before-the-end"),
        pytest.param(
            "<|editable_region_end|><|editable_region_start|>\ny\n", None, id="out-of-order"
        ),
        pytest.param(
            "<|editable_region_start|>\n<|editable_region_start|>\ny\n<|editable_region_end|>",
            None,
            id="start-marker-twice",
        ),
        pytest.param(
            "<|editable_region_start|>\n<|start_of_file|>\ny\n<|editable_region_end|>",
            None,
            id="an-other-marker-inside",
        ),
    ],
)
def test_zeta1_answers(answer: str, region: str | None) -> None:
    assert parse_rewrite(ZETA1, answer, ZETA1_REGION) == region


ZETA2_REGION = NextEditInput(
    path="a.py", text="x = 1\ny = 2\nz = 3\n", region_start=6, region_end=12, cursor=6
)


@pytest.mark.parametrize(
    ("given", "answer", "region"),
    [
        pytest.param(ZETA2_REGION, "y = 20\n>>>>>>> UPDATED", "y = 20\n", id="rewrite"),
        pytest.param(ZETA2_REGION, "y = 20\n>>>>>>> UPDATED\n", "y = 20\n", id="with-newline"),
        pytest.param(
            ZETA2_REGION, "y = <|user_cursor|>2\n>>>>>>> UPDATED", "y = 2\n", id="cursor-removed"
        ),
        pytest.param(ZETA2_REGION, ">>>>>>> UPDATED", "", id="region-deleted"),
        pytest.param(
            ZETA2_WITH_HISTORY,
            "editable_thing\n>>>>>>> UPDATED",
            "editable_thing",
            id="the-line-end-the-prompt-added-is-dropped",
        ),
        pytest.param(ZETA2_REGION, "y = 20\n", None, id="cut-before-the-end"),
        pytest.param(ZETA2_REGION, "y = 20>>>>>>> UPDATED", None, id="end-not-on-its-own-line"),
        pytest.param(ZETA2_REGION, "y\n>>>>>>> UPDATED\nmore\n", None, id="text-after-the-end"),
        pytest.param(
            ZETA2_REGION,
            "y\n<<<<<<< CURRENT\nz\n>>>>>>> UPDATED",
            None,
            id="opens-another-block",
        ),
    ],
)
def test_zeta2_answers(given: NextEditInput, answer: str, region: str | None) -> None:
    assert parse_rewrite(ZETA2, answer, given) == region


SWEEP_REGION = NextEditInput(
    path="a.py", text="x = 1\ny = 2\nz = 3\n", region_start=6, region_end=11, cursor=6
)
SWEEP_LINE_REGION = NextEditInput(
    path="a.py", text="x = 1\ny = 2\nz = 3\n", region_start=6, region_end=12, cursor=6
)
SWEEP_BLANK_FIRST = NextEditInput(
    path="a.py", text="x = 1\n\ny = 2\n", region_start=6, region_end=12, cursor=7
)


@pytest.mark.parametrize(
    ("given", "answer", "region"),
    [
        pytest.param(SWEEP_REGION, "y = 20\n<|file_sep|>", "y = 20", id="rewrite"),
        pytest.param(SWEEP_REGION, "y = 20\nw = 4\n<|endoftext|>", "y = 20\nw = 4", id="eos"),
        pytest.param(SWEEP_REGION, "y = 20<|file_sep|>\n", "y = 20", id="no-line-end"),
        pytest.param(SWEEP_LINE_REGION, "y = 20\n<|file_sep|>", "y = 20\n", id="line-kept"),
        pytest.param(
            SWEEP_REGION, "y = <|cursor|>2\n<|file_sep|>", "y = 2", id="cursor-marker-removed"
        ),
        pytest.param(
            SWEEP_REGION, "\n\ny = 20\n<|file_sep|>", "y = 20", id="leading-blank-lines-dropped"
        ),
        pytest.param(
            SWEEP_BLANK_FIRST, "\ny = 3\n<|file_sep|>", "\ny = 3", id="the-regions-blank-kept"
        ),
        pytest.param(
            SWEEP_REGION,
            "y = 20\n No newline at end of file\n<|file_sep|>",
            "y = 20",
            id="training-datas-line-dropped",
        ),
        pytest.param(SWEEP_REGION, "<|file_sep|>", "y = 2", id="empty-is-unchanged"),
        pytest.param(SWEEP_REGION, "y = 20\n", None, id="cut-before-the-end"),
        pytest.param(SWEEP_REGION, "y\n<|file_sep|>b.py\nmore", None, id="text-after-the-end"),
        pytest.param(SWEEP_REGION, "<|im_start|>y\n<|file_sep|>", None, id="opens-with-a-token"),
        pytest.param(SWEEP_REGION, "y\n<|endoftext|><|file_sep|>", None, id="two-ends"),
    ],
)
def test_sweep_answers(given: NextEditInput, answer: str, region: str | None) -> None:
    assert parse_rewrite(SWEEP, answer, given) == region


# --- the rewrite as minimal edits -------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "edits"),
    [
        pytest.param("abc", "abc", (), id="unchanged"),
        pytest.param(
            "foo(a)\n", "foo(a, b)\n", (RegionEdit(start=5, end=5, text=", b"),), id="insert"
        ),
        pytest.param(
            "foo(a, b)\n", "foo(a)\n", (RegionEdit(start=5, end=8, text=""),), id="delete"
        ),
        pytest.param(
            "x = get(1)\n",
            "x = fetch(1)\n",
            (RegionEdit(start=4, end=7, text="fetch"),),
            id="replace",
        ),
        pytest.param(
            "a = get(1)\nkeep\nb = get(2)\n",
            "a = fetch(1)\nkeep\nb = fetch(2)\n",
            (
                RegionEdit(start=4, end=7, text="fetch"),
                RegionEdit(start=20, end=23, text="fetch"),
            ),
            id="two-lines-two-edits",
        ),
        pytest.param(
            "one\ntwo\nthree\n",
            "one\nthree\n",
            (RegionEdit(start=4, end=8, text=""),),
            id="line-deleted",
        ),
        pytest.param(
            "one\nthree\n",
            "one\ntwo\nthree\n",
            (RegionEdit(start=4, end=4, text="two\n"),),
            id="line-inserted",
        ),
        pytest.param(
            "naïve = 1\nπ = 3\n",
            "naïveté = 1\nπ = 3.14\n",
            (
                RegionEdit(start=5, end=5, text="té"),
                RegionEdit(start=15, end=15, text=".14"),
            ),
            id="unicode-in-code-points",
        ),
        pytest.param(
            "a = 1\r\nb = 2\r\n",
            "a = 1\r\nb = 20\r\nc = 3\r\n",
            (RegionEdit(start=12, end=12, text="0\r\nc = 3"),),
            id="crlf-kept",
        ),
        pytest.param(
            "a\r\nb\r\n",
            "a\nb\r\n",
            (RegionEdit(start=1, end=2, text=""),),
            id="only-a-crlf-changed",
        ),
        pytest.param("", "new\n", (RegionEdit(start=0, end=0, text="new\n"),), id="from-empty"),
        pytest.param("old\n", "", (RegionEdit(start=0, end=4, text=""),), id="to-empty"),
    ],
)
def test_a_rewrite_becomes_minimal_edits(old: str, new: str, edits: tuple[RegionEdit, ...]) -> None:
    assert region_edits(old, new) == edits
    assert apply_region_edits(old, edits) == new


def test_edits_always_rebuild_the_rewrite_without_overlapping() -> None:
    """Invariant, over random line edits: applied in order the edits give the new region;
    they are in order, apart, and none starts or ends with text it leaves unchanged."""
    rng = random.Random(24)
    words = ["a", "b", "é", "\r\n", "\n", "xy", " ", "ü\n"]
    for _ in range(500):
        old = "".join(rng.choice(words) for _ in range(rng.randrange(12)))
        new = "".join(rng.choice(words) for _ in range(rng.randrange(12)))
        edits = region_edits(old, new)
        assert apply_region_edits(old, edits) == new
        for first, second in itertools.pairwise(edits):
            assert first.end < second.start
        for edit in edits:
            replaced = old[edit.start : edit.end]
            assert replaced or edit.text
            if replaced and edit.text:
                assert replaced[0] != edit.text[0]
                assert replaced[-1] != edit.text[-1]


def test_edits_that_overlap_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        apply_region_edits(
            "abcdef", [RegionEdit(start=2, end=4, text=""), RegionEdit(start=3, end=5, text="")]
        )
