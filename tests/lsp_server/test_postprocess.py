"""Mode decision and post-processing, case by case.

Documents are written with `‸` where the cursor is. Every fitted case is checked by applying
it: `prefix + text + suffix[replace_chars:]` must be the expected document, and the replaced
range must stay on the cursor line.
"""

from __future__ import annotations

import random
import re
import unicodedata
from dataclasses import dataclass

import pytest

from lsp_server.postprocess import (
    TAB_WIDTH,
    CompletionMode,
    CursorContext,
    Fitted,
    block_ended,
    decide_mode,
    fit_completion,
)

CURSOR = "‸"
SINGLE = CompletionMode.SINGLE_LINE
MULTI = CompletionMode.MULTI_LINE
LINE_END = re.compile(r"\r\n|\r|\n")


def ctx_of(doc: str) -> CursorContext:
    assert doc.count(CURSOR) == 1, "a document holds exactly one cursor"
    prefix, suffix = doc.split(CURSOR)
    return CursorContext(prefix=prefix, suffix=suffix)


def apply(ctx: CursorContext, fitted: Fitted) -> str:
    """The document after accepting `fitted`, checking the range it may touch."""
    assert 0 <= fitted.replace_chars <= len(ctx.line_suffix)
    return ctx.prefix + fitted.text + ctx.suffix[fitted.replace_chars :]


# --- CursorContext ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "line_prefix", "line_suffix"),
    [
        pytest.param("a\nb = ‸1\nc", "b = ", "1", id="lf"),
        pytest.param("a\r\nb = ‸1\r\nc", "b = ", "1", id="crlf"),
        pytest.param("a\rb = ‸1\rc", "b = ", "1", id="lone-cr"),
        pytest.param(
            "s = 'x\x0cy\x85z\u2028w' + ‸q\u2029r\x0b",
            "s = 'x\x0cy\x85z\u2028w' + ",
            "q\u2029r\x0b",
            id="only-cr-and-lf-end-lines-not-unicode-separators",
        ),
        pytest.param("‸", "", "", id="empty-document"),
    ],
)
def test_cursor_line_splits_only_at_lsp_line_ends(
    doc: str, line_prefix: str, line_suffix: str
) -> None:
    ctx = ctx_of(doc)
    assert (ctx.line_prefix, ctx.line_suffix) == (line_prefix, line_suffix)


def test_neighbouring_nonblank_lines_skip_blank_ones() -> None:
    ctx = ctx_of("def f():\r\n  \r\n\r\n    ‸\r\n\t\r\n    return 1\r\n")
    assert ctx.previous_nonblank_line == "def f():"
    assert ctx.next_nonblank_line == "    return 1"
    assert ctx_of("‸x").previous_nonblank_line is None
    assert ctx_of("x‸\n\n").next_nonblank_line is None


@pytest.mark.parametrize(
    ("indent", "width"),
    [
        pytest.param("    ", 4, id="spaces"),
        pytest.param("\t", TAB_WIDTH, id="tab"),
        pytest.param("  \t", TAB_WIDTH, id="spaces-then-tab-reach-the-tab-stop"),
        pytest.param("\t  \t", 2 * TAB_WIDTH, id="tab-spaces-tab"),
    ],
)
def test_indent_width_expands_tabs_to_tab_stops(indent: str, width: int) -> None:
    ctx = ctx_of(f"x\n{indent}‸\n")
    assert ctx.indent == indent
    assert ctx.indent_width == width


# --- decide_mode ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "mode"),
    [
        # Nothing to suggest inside a word.
        pytest.param("pri‸nt(x)", None, id="inside-identifier-gives-nothing"),
        pytest.param("x = ‸value", None, id="right-before-identifier-gives-nothing"),
        pytest.param("x = ‸名前", None, id="right-before-cjk-identifier-gives-nothing"),
        pytest.param("s = e‸\u0301", None, id="between-letter-and-combining-mark-gives-nothing"),
        # Code after the cursor on the line.
        pytest.param("foo(‸, b)", SINGLE, id="code-after-cursor-is-single-line"),
        pytest.param("x = ‸+ 1", SINGLE, id="operator-after-cursor-is-single-line"),
        pytest.param("if ‸ {\n}", SINGLE, id="brace-opening-after-cursor-is-single-line"),
        # End of a non-blank line, closers allowed after the cursor.
        pytest.param("x = ‸", SINGLE, id="end-of-line-is-single-line"),
        pytest.param("foo(‸)", SINGLE, id="only-closers-after-cursor-is-single-line"),
        pytest.param('print("‸");  ', SINGLE, id="quote-paren-semicolon-after-is-single-line"),
        pytest.param("def f():‸", SINGLE, id="end-of-opener-line-is-single-line"),
        pytest.param("x = '😀漢字' + ‸", SINGLE, id="end-of-line-with-emoji-cjk-is-single"),
        # A blank line right after a block opener.
        pytest.param("def f():\n    ‸", MULTI, id="python-def-body-is-multi-line"),
        pytest.param("function f() {\n  ‸\n}", MULTI, id="brace-body-is-multi-line"),
        pytest.param("func main() {\n\t‸\n}\n", MULTI, id="go-tab-body-is-multi-line"),
        pytest.param("const f = () =>\n  ‸\n", MULTI, id="arrow-body-is-multi-line"),
        pytest.param("match x {\n    1 =>\n        ‸", MULTI, id="rust-arm-is-multi-line"),
        pytest.param("foo(\n    ‸\n)", MULTI, id="open-call-is-multi-line"),
        pytest.param("x = [\n    ‸\n]", MULTI, id="open-list-is-multi-line"),
        pytest.param("loop do\n  ‸\nend", MULTI, id="ruby-do-is-multi-line"),
        pytest.param("if true; then\n  ‸\nfi", MULTI, id="shell-then-is-multi-line"),
        pytest.param(
            "if x:  # see (y)\n    ‸\ny()", MULTI, id="opener-before-comment-is-multi-line"
        ),
        pytest.param(
            "def f(n):\n    if n // 2:\n        ‸\n    g()",
            MULTI,
            id="python-floor-division-is-not-a-comment",
        ),
        pytest.param(
            "def f(n):\n    ‸\n    return n",
            SINGLE,
            id="opener-whose-body-exists-adds-a-line-single-line",
        ),
        pytest.param("def f():\r\n    ‸\r\n", MULTI, id="crlf-opener-is-multi-line"),
        pytest.param("def f():\r    ‸\r", MULTI, id="lone-cr-opener-is-multi-line"),
        pytest.param("def f():\n  ‸  \n", MULTI, id="whitespace-after-cursor-still-blank"),
        # A blank line at the end of a block or of the file.
        pytest.param(
            "def f():\n    x = 1\n    ‸\ndef g():\n    pass",
            MULTI,
            id="end-of-block-is-multi-line",
        ),
        pytest.param("x = 1\n‸", MULTI, id="end-of-file-is-multi-line"),
        pytest.param("x = 1\n‸\n\n  \n", MULTI, id="only-blank-lines-below-is-multi-line"),
        pytest.param(
            "\t\tx = 1\n\t\t‸\n    y = 2", MULTI, id="two-tabs-are-deeper-than-four-spaces"
        ),
        # A blank line with code at the same depth below.
        pytest.param(
            "def f():\n    x = 1\n    ‸\n    return x",
            SINGLE,
            id="statement-inserted-into-block-is-single-line",
        ),
        pytest.param(
            "def f():\n    pass\n‸\ndef g():\n    pass",
            SINGLE,
            id="top-level-line-between-functions-is-single-line",
        ),
        pytest.param(
            "\tx = 1\n\t‸\n    y = 2", SINGLE, id="tab-and-four-spaces-are-the-same-depth"
        ),
    ],
)
def test_decide_mode(doc: str, mode: CompletionMode | None) -> None:
    assert decide_mode(ctx_of(doc)) is mode


# --- fit_completion ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    id: str
    doc: str
    raw: str
    mode: CompletionMode
    want: str | None  # the document after accepting the suggestion; None: no suggestion
    replace_chars: int | None = None  # checked when given


FIT_CASES = [
    # Brackets after the cursor are merged, never duplicated.
    Fit("duplicate-closer-is-not-doubled", "foo(‸)", "x))", SINGLE, "foo(x)", 1),
    Fit("model-closer-replaces-the-lines-closer", "foo(‸)", "x)", SINGLE, "foo(x)", 1),
    Fit("missing-closer-is-carried-in-the-text", "foo(‸)", "x", SINGLE, "foo(x)", 1),
    Fit("only-the-existing-closer-gives-nothing", "foo(‸)", ")", SINGLE, None),
    Fit("nested-closers-extra-one-cut", "foo(bar(‸))", "x)))", SINGLE, "foo(bar(x))", 2),
    Fit("nested-closers-one-written", "foo(bar(‸))", "x)", SINGLE, "foo(bar(x))", 2),
    Fit("outer-closer-nobody-closes-is-kept", "foo(bar(‸)", "x))", SINGLE, "foo(bar(x))", 1),
    Fit("semicolon-after-closer-merged", "foo(‸);", "x);", SINGLE, "foo(x);", 2),
    Fit("semicolon-kept-when-model-stops-at-paren", "foo(‸);", "x)", SINGLE, "foo(x);", 2),
    Fit("space-before-closer-kept", "foo(‸ )", "x", SINGLE, "foo(x )", 2),
    Fit("trailing-space-after-closers-untouched", "foo(‸)  ", "x))", SINGLE, "foo(x)  ", 1),
    Fit("index-and-condition-closers", "if (a[‸])", "i] > 0) {", SINGLE, "if (a[i] > 0) {"),
    Fit("model-own-parens-are-not-the-lines", "foo(‸) + 1", "f()", SINGLE, "foo(f()) + 1", 0),
    Fit("mismatched-closer-ends-suggestion", "foo(‸)", "x]", SINGLE, "foo(x)"),
    Fit("closer-on-earlier-line-is-kept", "foo(a,\n    b‸", ")", SINGLE, "foo(a,\n    b)"),
    Fit(
        "closer-already-below-is-not-repeated",
        "foo(a,\n    b‸\n)\n",
        ", c)",
        SINGLE,
        "foo(a,\n    b, c\n)\n",
    ),
    Fit(
        "closers-before-the-prefix-window-are-ignored",
        "    }\n}\nfoo(‸)",
        "x))",
        SINGLE,
        "    }\n}\nfoo(x)",
    ),
    Fit(
        "python-floor-division-does-not-hide-a-paren",
        "def f(n):\n    for i in range(n // 2):\n        print(foo(‸))",
        "i)))",
        SINGLE,
        "def f(n):\n    for i in range(n // 2):\n        print(foo(i))",
    ),
    Fit(
        "c-comment-brackets-are-ignored",
        "// c\nint f(int a) { // see (\n    return g(‸);",
        "a));",
        SINGLE,
        "// c\nint f(int a) { // see (\n    return g(a);",
    ),
    # Quotes.
    Fit("closing-quote-and-paren-merged", 'print("‸")', 'hi")', SINGLE, 'print("hi")', 2),
    Fit("closing-quote-only-written", 'print("‸")', 'hi"', SINGLE, 'print("hi")', 2),
    Fit("no-closing-quote-written", 'print("‸")', "hi", SINGLE, 'print("hi")', 2),
    Fit("single-quotes", "x = '‸'", "abc'", SINGLE, "x = 'abc'", 1),
    Fit("brackets-inside-string-are-text", 'print("‸")', 'a)")', SINGLE, 'print("a)")'),
    Fit("trailing-space-inside-string-kept", 'print("‸")', "hi ", SINGLE, 'print("hi ")'),
    Fit(
        "template-literal",
        "const s = `‸`;",
        "hi ${name}`;",
        SINGLE,
        "const s = `hi ${name}`;",
    ),
    # The rest of the line repeated by the model.
    Fit(
        "rest-of-line-repeated-is-dropped",
        "value = compute(‸, flag=True)",
        "data, flag=True)",
        SINGLE,
        "value = compute(data, flag=True)",
        0,
    ),
    Fit("overlap-with-start-of-rest-removed", "x = ‸.strip()", "name.", SINGLE, "x = name.strip()"),
    Fit("overlap-keeps-the-models-separator", "x = ‸+ 1", "a + 1", SINGLE, "x = a + 1"),
    Fit("separator-before-following-code-kept", "x = ‸+ 1", "a ", SINGLE, "x = a + 1"),
    Fit("only-the-rest-of-the-line-gives-nothing", "return ‸+ 1", "+ 1", SINGLE, None),
    # Lines, blocks and indentation.
    Fit("single-line-keeps-the-first-line", "x = ‸", "1\ny = 2\n", SINGLE, "x = 1"),
    Fit("single-line-starting-with-a-newline-gives-nothing", "x = 1‸", "\ny = 2", SINGLE, None),
    Fit(
        "python-dedent-ends-the-block",
        "def f(x):\n    ‸",
        "return x * 2\n\ndef g():\n    pass\n",
        MULTI,
        "def f(x):\n    return x * 2",
    ),
    Fit(
        "python-nested-block-ends-at-the-opener-depth",
        "def f(x):\n    if x:\n        ‸\n    return 0\n",
        "x += 1\n        y = 2\n    else:\n        y = 3\n",
        MULTI,
        "def f(x):\n    if x:\n        x += 1\n        y = 2\n    return 0\n",
    ),
    Fit(
        "blank-lines-inside-the-block-kept",
        "def f():\n    ‸",
        "a = 1\n\n    b = 2\n\nc = 3",
        MULTI,
        "def f():\n    a = 1\n\n    b = 2",
    ),
    Fit(
        "end-of-block-without-opener-uses-the-cursor-depth",
        "def f():\n    x = 1\n    ‸\ndef g():\n    pass\n",
        "return x\ndef h():\n    pass",
        MULTI,
        "def f():\n    x = 1\n    return x\ndef g():\n    pass\n",
    ),
    Fit(
        "braces-closing-line-kept-when-nothing-closes-the-block",
        "function f() {\n  ‸",
        "return 1;\n}\n\nfunction g() {",
        MULTI,
        "function f() {\n  return 1;\n}",
    ),
    Fit(
        "braces-brace-below-is-not-repeated",
        "function f() {\n  ‸\n}\n",
        "return 1;\n}\nfunction g() {}",
        MULTI,
        "function f() {\n  return 1;\n}\n",
    ),
    Fit(
        "braces-extra-closing-line-cut",
        "function f() {\n  ‸",
        "return 1;\n}\n}\n",
        MULTI,
        "function f() {\n  return 1;\n}",
    ),
    Fit(
        "braces-class-brace-below-leaves-the-method-brace-owed",
        "class A {\n    void f() {\n        ‸\n}\n",
        "x();\n    }\n}\n",
        MULTI,
        "class A {\n    void f() {\n        x();\n    }\n}\n",
    ),
    Fit(
        "braces-callback-closes-its-own-brackets",
        "describe(() => {\n  it(() => {\n    ‸\n});\n",
        "expect(1);\n  });\n});\n",
        MULTI,
        "describe(() => {\n  it(() => {\n    expect(1);\n  });\n});\n",
    ),
    Fit(
        "braces-object-literal-closed-at-end-of-file",
        "const o = {\n  a: 1,\n  ‸",
        "b: 2,\n};\n\nconsole.log(o);",
        MULTI,
        "const o = {\n  a: 1,\n  b: 2,\n};",
    ),
    Fit(
        "go-tab-indented-block",
        "func main() {\n\t‸\n}\n",
        'fmt.Println("hi")\n\tx := 1\n}\n',
        MULTI,
        'func main() {\n\tfmt.Println("hi")\n\tx := 1\n}\n',
    ),
    Fit(
        "rust-lifetimes-are-not-quotes",
        "impl<'a> Foo<'a> {\n    ‸\n}\n",
        "fn get(&self, x: &'a str) -> &'a str {\n        x\n    }\n}\n",
        MULTI,
        "impl<'a> Foo<'a> {\n    fn get(&self, x: &'a str) -> &'a str {\n        x\n    }\n}\n",
    ),
    Fit(
        "repeated-suffix-line-stops-the-block",
        "def f():\n    x = 1\n    ‸\n    return y\n",
        "y = 2\n    return y\n",
        MULTI,
        "def f():\n    x = 1\n    y = 2\n    return y\n",
    ),
    Fit("first-line-equal-to-next-line-gives-nothing", "x = 1\n‸\ny = 2\n", "y = 2", SINGLE, None),
    Fit(
        "repeat-loop-cut",
        "def f():\n    ‸",
        "foo()\n    foo()\n    foo()\n",
        MULTI,
        "def f():\n    foo()",
    ),
    Fit(
        "trailing-whitespace-stripped-per-line",
        "def f():\n    ‸",
        "a = 1   \n    b = 2\t \n  \n",
        MULTI,
        "def f():\n    a = 1\n    b = 2",
    ),
    Fit("trailing-whitespace-stripped-single-line", "x = ‸", "1   ", SINGLE, "x = 1"),
    Fit("whitespace-only-gives-nothing", "x = ‸", "  \t", SINGLE, None),
    Fit("empty-gives-nothing", "x = ‸", "", SINGLE, None),
    Fit("blank-lines-only-give-nothing", "def f():\n    ‸", "\n\n   \n", MULTI, None),
    Fit(
        "indentation-kept-as-the-model-wrote-it",
        "if x:\n    ‸",
        "a()\n    if y:\n        b()\n    c()\nd()",
        MULTI,
        "if x:\n    a()\n    if y:\n        b()\n    c()",
    ),
    Fit(
        "mixed-tabs-and-spaces-compare-by-width",
        "def f():\n\tif x:\n\t\t‸",
        "a()\n        b()\n    c()\n",
        MULTI,
        "def f():\n\tif x:\n\t\ta()\n        b()",
    ),
    Fit(
        "crlf-completion-cut-on-crlf",
        "def f():\r\n    ‸\r\nx = 1\r\n",
        "a = 1\r\n    b = 2  \r\nc = 3\r\n",
        MULTI,
        "def f():\r\n    a = 1\r\n    b = 2\r\nx = 1\r\n",
    ),
    Fit(
        "lf-completion-in-crlf-document-kept-as-written",
        "def f():\r\n    ‸\r\nx = 1\r\n",
        "a = 1\n    b = 2\nc = 3\n",
        MULTI,
        "def f():\r\n    a = 1\n    b = 2\r\nx = 1\r\n",
    ),
    Fit("crlf-single-line-cut", "x = ‸\r\ny\r\n", "1\r\nz", SINGLE, "x = 1\r\ny\r\n"),
    Fit("lone-cr-ends-a-line", "x = ‸", "1\r2", SINGLE, "x = 1"),
    # Text beyond ASCII.
    Fit(
        "emoji-and-cjk-before-the-cursor",
        's = "😀漢字" + f(‸)',
        "名前))",
        SINGLE,
        's = "😀漢字" + f(名前)',
        1,
    ),
    Fit("cjk-inside-a-string", 'print("😀‸")', '字")', SINGLE, 'print("😀字")', 2),
    Fit("combining-mark-in-completion", 'name = "‸"', 'e\u0301t"', SINGLE, 'name = "e\u0301t"'),
    Fit(
        "unicode-line-separator-is-not-a-line-end",
        "x = ‸",
        "'a\u2028b'\nnext",
        SINGLE,
        "x = 'a\u2028b'",
    ),
]


@pytest.mark.parametrize("case", FIT_CASES, ids=[case.id for case in FIT_CASES])
def test_fit_completion(case: Fit) -> None:
    ctx = ctx_of(case.doc)
    fitted = fit_completion(case.raw, ctx, case.mode)
    if case.want is None:
        assert fitted is None
        return
    assert fitted is not None
    assert apply(ctx, fitted) == case.want
    if case.replace_chars is not None:
        assert fitted.replace_chars == case.replace_chars


def test_replace_range_covers_the_whole_closer_run_every_time() -> None:
    """One rule for every closer-only rest of line: the range covers it, the text carries it."""
    ctx = ctx_of("foo(‸)")
    assert fit_completion("x", ctx, SINGLE) == Fitted(text="x)", replace_chars=1)
    assert fit_completion("x)", ctx, SINGLE) == Fitted(text="x)", replace_chars=1)
    assert fit_completion("x))", ctx, SINGLE) == Fitted(text="x)", replace_chars=1)


def test_nothing_after_the_cursor_is_ever_replaced_without_closers() -> None:
    ctx = ctx_of("value = compute(‸, flag=True)\nnext()")
    fitted = fit_completion("data, flag=True)\n", ctx, SINGLE)
    assert fitted == Fitted(text="data", replace_chars=0)


# --- block_ended ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "generated", "ended"),
    [
        pytest.param("def f():\n    ‸", "return 1\ndef g():\n", True, id="dedented-line-ends"),
        pytest.param(
            "def f():\n    ‸", "return 1\ndef g(", False, id="dedented-line-not-complete-yet"
        ),
        pytest.param("def f():\n    ‸", "a = 1\n    b = 2\n", False, id="body-lines-do-not-end"),
        pytest.param("def f():\n    ‸", "a = 1\n\n", False, id="blank-lines-do-not-end"),
        pytest.param(
            "def f():\n    x = 1\n    ‸\n    return y\n",
            "y = 2\n    return y\n",
            True,
            id="line-equal-to-the-next-suffix-line-ends",
        ),
        pytest.param("x = 1\n‸\ny = 2\n", "y = 2\n", True, id="first-line-equal-to-next-ends"),
        pytest.param("def f():\n    ‸", "g()\n    g()\n", True, id="repeat-loop-ends"),
        pytest.param("def f():\n    ‸", "}\n    }\n", False, id="repeated-closers-are-not-a-loop"),
        pytest.param("function f() {\n  ‸", "x();\n}\n", False, id="closing-brace-line-is-kept"),
        pytest.param(
            "function f() {\n  ‸",
            "x();\n}\nfoo();\n",
            True,
            id="line-after-closing-brace-ends",
        ),
        pytest.param("def f():\n    ‸", "a\rdef g():\r", False, id="trailing-cr-waits-for-its-lf"),
        pytest.param("def f():\n    ‸", "a\rdef g():\rx", True, id="lone-cr-completes-a-line"),
        pytest.param("def f():\r\n    ‸", "a\r\ndef g():\r\n", True, id="crlf-lines"),
        pytest.param("def f():\n    ‸", "", False, id="nothing-generated"),
    ],
)
def test_block_ended(doc: str, generated: str, ended: bool) -> None:
    assert block_ended(generated, ctx_of(doc)) is ended


AGREEMENT_CASES = [case for case in FIT_CASES if case.mode is MULTI]


@pytest.mark.parametrize("case", AGREEMENT_CASES, ids=[case.id for case in AGREEMENT_CASES])
def test_stopping_when_block_ended_says_so_changes_nothing(case: Fit) -> None:
    """The caller may stop the model at the first `block_ended`: every later text fits the
    same, so stopping early never changes the suggestion."""
    ctx = ctx_of(case.doc)
    final = fit_completion(case.raw, ctx, MULTI)
    for end in range(len(case.raw) + 1):
        if block_ended(case.raw[:end], ctx):
            assert fit_completion(case.raw[:end], ctx, MULTI) == final, case.raw[:end]


def test_block_ended_fires_on_streams_that_are_cut() -> None:
    ctx = ctx_of("def f(x):\n    ‸")
    raw = "return x * 2\n\ndef g():\n    pass\n"
    first = next(end for end in range(len(raw) + 1) if block_ended(raw[:end], ctx))
    assert raw[:first] == "return x * 2\n\ndef g():\n"


# --- Robustness -------------------------------------------------------------------------------

PIECES = [*"ab_ (){}[]\"'`;,:#/*\\\t\n\r=>-", "\r\n", "😀", "漢", "e\u0301", "    ", "\u2028", "//"]


def test_random_text_keeps_every_invariant() -> None:
    """Mixed brackets, quotes, comments, tabs, line ends and non-ASCII never crash the
    functions, never touch text beyond the cursor line, never yield a no-op suggestion, and
    stopping at `block_ended` never changes a suggestion."""
    rng = random.Random(3)

    def text(most: int) -> str:
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, most)))

    for _ in range(300):
        prefix, suffix, raw = text(25), text(25), text(25)
        if prefix.endswith("\r") and suffix.startswith("\n"):
            continue  # a cursor inside a CRLF is no LSP position
        ctx = CursorContext(prefix=prefix, suffix=suffix)
        check_mode(ctx, decide_mode(ctx))
        for mode in CompletionMode:
            fitted = fit_completion(raw, ctx, mode)
            if fitted is None:
                continue
            assert fitted.text.strip()
            assert apply(ctx, fitted) != prefix + suffix
            if mode is SINGLE:
                # One line; or, before code at the start of a statement, one line of its own.
                own_line = fitted.text.removesuffix(ctx.line_prefix)
                body = (
                    LINE_END.sub("", own_line, count=1)
                    if LINE_END.search(own_line[-2:])
                    else own_line
                )
                assert not LINE_END.search(body)
        whole = fit_completion(raw, ctx, MULTI)
        ended = [end for end in range(len(raw) + 1) if block_ended(raw[:end], ctx)]
        if ended:
            assert fit_completion(raw[: ended[0]], ctx, MULTI) == whole


def check_mode(ctx: CursorContext, mode: CompletionMode | None) -> None:
    """What a user sees of the mode, from the cursor's line alone (by hand, not through the
    helpers `decide_mode` uses): nothing inside a word; one line when code follows the cursor
    on its line or the cursor ends a line of code; several lines only on a blank line."""
    line_before = LINE_END.split(ctx.prefix)[-1]
    line_after = LINE_END.split(ctx.suffix)[0]
    first = line_after[:1]
    in_word = bool(first) and (
        first == "_" or first.isalnum() or unicodedata.category(first).startswith("M")
    )
    closers_only = all(c in ")]}\"'`;, \t" or c.isspace() for c in line_after)
    if in_word and line_before.strip():
        assert mode is None, (ctx, mode)
        return
    assert mode is not None, (ctx, mode)
    if not closers_only or line_before.strip():
        assert mode is SINGLE, (ctx, mode)


@pytest.mark.parametrize(
    ("doc", "raw", "expected"),
    [
        pytest.param(
            "def f(x):\n‸    return x\n",
            "    y = x + 1",
            "def f(x):\n    y = x + 1\n    return x\n",
            id="at column 0: a new line above the statement",
        ),
        pytest.param(
            "def f(x):\n    ‸return x\n",
            "y = x + 1",
            "def f(x):\n    y = x + 1\n    return x\n",
            id="after the indentation: the statement keeps its indentation",
        ),
        pytest.param(
            "def f(x):\r\n‸    return x\r\n",
            "    y = 1",
            "def f(x):\r\n    y = 1\r\n    return x\r\n",
            id="the document's line ending",
        ),
        pytest.param(
            "def f(x):\n‸    return x\n", "    return x", None, id="the same statement: none"
        ),
    ],
)
def test_a_suggestion_before_a_statement_is_a_line_of_its_own(
    doc: str, raw: str, expected: str | None
) -> None:
    ctx = ctx_of(doc)
    assert decide_mode(ctx) is SINGLE
    fitted = fit_completion(raw, ctx, SINGLE)
    if expected is None:
        assert fitted is None
    else:
        assert fitted is not None
        assert apply(ctx, fitted) == expected
