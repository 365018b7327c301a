"""Post-processing and code actions by the syntax tree, so that they are right in every language
with a grammar: where a multi-line suggestion ends, suggestions that break the code cut or dropped,
the function around the cursor, repeated blocks, and the lexer's rules where there is no grammar.

Documents are written with `‸` where the cursor is; the model's raw text continues after it.
"""

from __future__ import annotations

import pytest
from tree_sitter import Tree

from lsp_server.blocks import LineSpan, enclosing_block, enclosing_code
from lsp_server.postprocess import (
    CompletionMode,
    CursorContext,
    block_ended,
    fit_completion,
    syntax,
)
from lsp_server.postprocess.syntax import (
    DOCUMENT_LIMIT,
    WINDOW_AFTER,
    WINDOW_BEFORE,
    Place,
    Window,
    cursor_place,
    enclosing_function,
    error_count,
    errors_added,
    grammar_of,
    lexed_place,
    place_at,
)

CURSOR = "‸"
MULTI = CompletionMode.MULTI_LINE
SINGLE = CompletionMode.SINGLE_LINE


def ctx_of(doc: str, language_id: str) -> CursorContext:
    prefix, suffix = doc.split(CURSOR)
    return CursorContext(prefix=prefix, suffix=suffix, language_id=language_id)


def fitted_text(raw: str, doc: str, language_id: str, mode: CompletionMode = MULTI) -> str | None:
    fitted = fit_completion(raw, ctx_of(doc, language_id), mode)
    return None if fitted is None else fitted.text


@pytest.mark.parametrize(
    "language_id", ["typescript", "typescriptreact", "javascript", "go", "rust", "java", "c"]
)
def test_the_six_languages_have_a_grammar_offline(language_id: str) -> None:
    assert grammar_of(language_id) is not None
    assert error_count("", language_id) == 0


def test_a_language_without_a_grammar_has_no_tree() -> None:
    assert grammar_of("cobol") is None
    assert error_count("IDENTIFICATION DIVISION.", "cobol") is None


# --- a block the suggestion opens ends where its node ends -----------------------------------

#: (language, document, the model's text: a loop, then more statements; the loop alone).
LOOPS = [
    pytest.param(
        "javascript",
        "function total(items) {\n  let n = 0;\n  ‸\n}\n",
        "for (const x of items) {\n    n += x;\n  }\n  return n;\n",
        "for (const x of items) {\n    n += x;\n  }",
        id="javascript",
    ),
    pytest.param(
        "typescript",
        "export function total(xs: number[]): number {\n  let n = 0;\n  ‸\n}\n",
        "for (const x of xs) {\n    n += x;\n  }\n  return n;\n",
        "for (const x of xs) {\n    n += x;\n  }",
        id="typescript",
    ),
    pytest.param(
        "go",
        "func total(xs []int) int {\n\tn := 0\n\t‸\n}\n",
        "for _, x := range xs {\n\t\tn += x\n\t}\n\treturn n\n",
        "for _, x := range xs {\n\t\tn += x\n\t}",
        id="go",
    ),
    pytest.param(
        "rust",
        "fn total(xs: &[i32]) -> i32 {\n    let mut n = 0;\n    ‸\n}\n",
        "for x in xs {\n        n += x;\n    }\n    n\n",
        "for x in xs {\n        n += x;\n    }",
        id="rust",
    ),
    pytest.param(
        "java",
        "class Sum {\n    int total(int[] xs) {\n        int n = 0;\n        ‸\n    }\n}\n",
        "for (int x : xs) {\n            n += x;\n        }\n        return n;\n",
        "for (int x : xs) {\n            n += x;\n        }",
        id="java",
    ),
    pytest.param(
        "c",
        "int total(const int *xs, int len) {\n    int n = 0;\n    ‸\n}\n",
        "for (int i = 0; i < len; i++) {\n        n += xs[i];\n    }\n    return n;\n",
        "for (int i = 0; i < len; i++) {\n        n += xs[i];\n    }",
        id="c",
    ),
    pytest.param(
        "python",
        "def total(xs):\n    n = 0\n    ‸\n",
        "for x in xs:\n        n += x\n    return n\n",
        "for x in xs:\n        n += x",
        id="python",
    ),
]


@pytest.mark.parametrize(("language_id", "doc", "raw", "expected"), LOOPS)
def test_a_block_the_suggestion_opens_ends_where_its_node_ends(
    language_id: str, doc: str, raw: str, expected: str
) -> None:
    assert fitted_text(raw, doc, language_id) == expected
    # The model can be stopped there: the streamed text already ends the suggestion.
    assert block_ended(raw, ctx_of(doc, language_id))


@pytest.mark.parametrize(("language_id", "doc", "raw", "expected"), LOOPS)
def test_without_a_grammar_the_indentation_rules_keep_todays_cut(
    language_id: str, doc: str, raw: str, expected: str
) -> None:
    """An unknown language (or none) keeps today's rules: the statement after the loop is as
    deep as the loop, so it stays."""
    del language_id, expected
    whole = fitted_text(raw, doc, "")
    assert whole is not None
    assert whole.rstrip().endswith(("return n;", "return n", "n"))
    assert fitted_text(raw, doc, "cobol") == whole


#: (language, document with the cursor at the end of a body, the model's text that closes the
#: function and writes another one; what is left: the statement alone).
OVERRUNS = [
    pytest.param(
        "javascript",
        "function f() {\n  a();\n  ‸\n}\n\nfunction g() {}\n",
        "b();\n}\n\nfunction h() {\n  c();\n}\n",
        id="javascript",
    ),
    pytest.param(
        "typescript",
        "function f(): void {\n  a();\n  ‸\n}\n",
        "b();\n}\n\nexport function h(): void {\n  c();\n}\n",
        id="typescript",
    ),
    pytest.param("go", "func f() {\n\ta()\n\t‸\n}\n", "b()\n}\n\nfunc h() {\n\tc()\n}\n", id="go"),
    pytest.param(
        "rust", "fn f() {\n    a();\n    ‸\n}\n", "b();\n}\n\nfn h() {\n    c();\n}\n", id="rust"
    ),
    pytest.param(
        "java",
        "class A {\n    void f() {\n        a();\n        ‸\n    }\n}\n",
        "b();\n    }\n\n    void h() {\n        c();\n    }\n",
        id="java",
    ),
    pytest.param(
        "c",
        "void f(void) {\n    a();\n    ‸\n}\n",
        "b();\n}\n\nvoid h(void) {\n    c();\n}\n",
        id="c",
    ),
    pytest.param("python", "def f():\n    a()\n    ‸\n", "b()\n\ndef h():\n    c()\n", id="python"),
]


@pytest.mark.parametrize(("language_id", "doc", "raw"), OVERRUNS)
def test_a_suggestion_that_overruns_its_block_ends_with_it(
    language_id: str, doc: str, raw: str
) -> None:
    assert fitted_text(raw, doc, language_id) in ("b();", "b()")


# --- suggestions that add syntax errors -----------------------------------------------------

#: (language, document, a good first line, a broken second line).
BROKEN = [
    pytest.param("javascript", "function f() {\n  let n = 0;\n  ‸\n}\n", "n += 1;", id="js"),
    pytest.param("typescript", "function f(): void {\n  let n = 0;\n  ‸\n}\n", "n += 1;", id="ts"),
    pytest.param("go", "func f() {\n\tn := 0\n\t‸\n}\n", "n += 1", id="go"),
    pytest.param("rust", "fn f() {\n    let mut n = 0;\n    ‸\n}\n", "n += 1;", id="rust"),
    pytest.param(
        "java",
        "class A {\n    void f() {\n        int n = 0;\n        ‸\n    }\n}\n",
        "n += 1;",
        id="java",
    ),
    pytest.param("c", "void f(void) {\n    int n = 0;\n    ‸\n}\n", "n += 1;", id="c"),
    pytest.param("python", "def f():\n    n = 0\n    ‸\n", "n += 1", id="python"),
]


@pytest.mark.parametrize(("language_id", "doc", "good"), BROKEN)
def test_a_suggestion_that_adds_a_syntax_error_is_cut_to_its_clean_lines(
    language_id: str, doc: str, good: str
) -> None:
    indent = doc.split(CURSOR)[0].rsplit("\n", 1)[1]
    raw = f"{good}\n{indent}n = n + + ;\n"
    assert fitted_text(raw, doc, language_id) == good
    # Today's rules alone keep the broken line.
    assert fitted_text(raw, doc, "") == f"{good}\n{indent}n = n + + ;"


@pytest.mark.parametrize(("language_id", "doc", "good"), BROKEN)
def test_a_suggestion_broken_from_its_first_line_is_dropped(
    language_id: str, doc: str, good: str
) -> None:
    del good
    indent = doc.split(CURSOR)[0].rsplit("\n", 1)[1]
    assert fitted_text(f"n = n + + ;\n{indent}n = 1;\n", doc, language_id) is None


@pytest.mark.parametrize(
    ("language_id", "doc", "raw"),
    [
        pytest.param("javascript", "let a = 1‸\nlet b = 2;\n", " + * 2;", id="javascript"),
        pytest.param("go", "package p\n\nvar a = 1‸\n", " + * / 2", id="go"),
        pytest.param("python", "a = 1‸\nb = 2\n", " + * 2", id="python"),
    ],
)
def test_a_single_line_that_breaks_the_code_is_dropped(
    language_id: str, doc: str, raw: str
) -> None:
    assert fitted_text(raw, doc, language_id, SINGLE) is None
    assert fitted_text(" + 2", doc, language_id, SINGLE) == " + 2"


def test_code_that_was_broken_before_the_suggestion_does_not_count_against_it() -> None:
    """The document's own errors (an unclosed call in the next function) are the baseline."""
    doc = "function f() {\n  ‸\n}\n\nfunction g() {\n  h(1, 2;\n}\n"
    prefix, suffix = doc.split(CURSOR)
    assert error_count(prefix + suffix, "javascript")
    assert errors_added(prefix, "let x = 1;", suffix, "javascript") == 0
    assert fitted_text("let x = 1;\n", doc, "javascript") == "let x = 1;"


# --- repeated blocks ------------------------------------------------------------------------


@pytest.mark.parametrize("language_id", ["java", ""])
def test_a_block_written_again_and_again_is_cut_after_its_first_copy(language_id: str) -> None:
    doc = "class A {\n    void f(Node next) {\n        ‸\n    }\n}\n"
    block = "if (next != null) {\n            next.remove();\n        }\n        "
    raw = block * 5
    assert fitted_text(raw, doc, language_id) == block.rstrip()


def test_lines_that_merely_look_alike_are_kept() -> None:
    doc = "void f(void) {\n    ‸\n}\n"
    raw = "a();\n    b();\n    a();\n    c();\n"
    assert fitted_text(raw, doc, "") == raw.rstrip()


# --- bounded work ---------------------------------------------------------------------------


def test_a_huge_document_is_checked_in_a_window_around_the_cursor() -> None:
    line = "  total += values[index] * weights[index];\n"
    prefix = "function f(values, weights) {\n  let total = 0;\n" + line * 60_000 + "  "
    suffix = "\n  return total;\n}\n" + line * 60_000
    window = Window.around(prefix, suffix)
    assert len(window.before) <= WINDOW_BEFORE
    assert len(window.after) <= WINDOW_AFTER
    assert prefix.endswith(window.before)
    assert suffix.startswith(window.after)
    ctx = CursorContext(prefix=prefix, suffix=suffix, language_id="javascript")
    fitted = fit_completion("total += 1;\n", ctx, MULTI)
    assert fitted is not None
    assert fitted.text == "total += 1;"


def test_a_minified_line_is_checked_in_a_window_too() -> None:
    minified = "var a=function(b){return b+1};" * 20_000
    doc = minified + "var c=‸" + minified
    prefix, suffix = doc.split(CURSOR)
    window = Window.around(prefix, suffix)
    assert len(window.before) <= WINDOW_BEFORE
    assert len(window.after) <= WINDOW_AFTER
    ctx = CursorContext(prefix=prefix, suffix=suffix, language_id="javascript")
    fitted = fit_completion("2;", ctx, SINGLE)
    assert fitted is not None
    assert fitted.text == "2;"


def test_a_document_over_the_limit_gets_todays_enclosing_block() -> None:
    body = "    x = 1\n" * (DOCUMENT_LIMIT // 10 + 1)
    text = "def f():\n" + body
    assert enclosing_function(text, 3, "python") is None
    assert enclosing_code(text, 3, "python") == enclosing_block(text, 3)


# --- the enclosing function for code actions ------------------------------------------------

FUNCTIONS = [
    pytest.param(
        "c",
        "#include <stdio.h>\n\nstatic int\nadd(int a,\n    int b)\n{\n    int s = a + b;\n"
        "    return s;\n}\n\nint main(void) { return add(1, 2); }\n",
        6,
        LineSpan(start=2, end=8),
        id="c: the signature over three lines, the brace on its own",
    ),
    pytest.param(
        "javascript",
        "class Store {\n  load(ids) {\n    return ids.map((id) => {\n      const item = get(id);\n"
        "      return item;\n    });\n  }\n}\n",
        3,
        LineSpan(start=1, end=6),
        id="javascript: the method around a callback",
    ),
    pytest.param(
        "typescript",
        "export function pick<T>(\n  items: T[],\n  keep: (x: T) => boolean,\n): T[] {\n"
        "  const out: T[] = [];\n  return out;\n}\n",
        4,
        LineSpan(start=0, end=6),
        id="typescript: exported, its parameters over lines",
    ),
    pytest.param(
        "go",
        "package p\n\nfunc (s *Server) Run() error {\n\tgo func() {\n\t\ts.loop()\n\t}()\n"
        "\treturn nil\n}\n",
        4,
        LineSpan(start=2, end=7),
        id="go: a method around a func literal",
    ),
    pytest.param(
        "rust",
        "fn apply<F>(xs: &[i32], f: F) -> Vec<i32>\nwhere\n    F: Fn(i32) -> i32,\n{\n"
        "    xs.iter().map(|x| {\n        f(*x)\n    }).collect()\n}\n",
        5,
        LineSpan(start=0, end=7),
        id="rust: a where clause, a closure inside",
    ),
    pytest.param(
        "java",
        "class A {\n    @Override\n    public String toString() {\n        Runnable r = () -> {\n"
        '            log();\n        };\n        return "A";\n    }\n}\n',
        4,
        LineSpan(start=1, end=7),
        id="java: an annotated method around a lambda",
    ),
    pytest.param(
        "python",
        "class A:\n    @property\n    def name(self):\n        return self._name\n",
        3,
        LineSpan(start=1, end=3),
        id="python: a decorated method",
    ),
]


@pytest.mark.parametrize(("language_id", "text", "line", "span"), FUNCTIONS)
def test_code_actions_find_the_enclosing_function_in_the_tree(
    language_id: str, text: str, line: int, span: LineSpan
) -> None:
    assert enclosing_code(text, line, language_id) == span


def test_an_unknown_language_gets_the_enclosing_block_by_indentation() -> None:
    text = "proc f {\n  set x 1\n  puts $x\n}\n"
    assert enclosing_code(text, 1, "tcl") == enclosing_block(text, 1)
    assert enclosing_code(text, 1, "tcl") is not None


def test_a_line_outside_every_function_falls_back_too() -> None:
    text = "const a = 1;\nif (a) {\n  b();\n}\n"
    assert enclosing_function(text, 2, "javascript") is None
    assert enclosing_code(text, 2, "javascript") == enclosing_block(text, 2)


def test_an_unclosed_brace_counts_in_a_window_that_ends_inside_a_class() -> None:
    """The window ends long before the class does; the brace the suggestion leaves open is
    still an added error, and the suggestion is dropped."""
    method = "    int get{n}(int x) {{\n        int y = x + {n};\n        return y;\n    }}\n\n"
    methods = "".join(method.format(n=n) for n in range(400))
    doc = (
        "class Big {\n"
        + method.format(n=0)
        + "    int last(Object e) {\n        int n = 0;\n        ‸\n"
        "        return n;\n    }\n\n" + methods + "}\n"
    )
    assert fitted_text("if (e == null) { n = 1;", doc, "java", SINGLE) is None
    assert fitted_text("n += 1;", doc, "java", SINGLE) == "n += 1;"


@pytest.mark.parametrize(
    ("language_id", "doc", "line"),
    [
        (
            "java",
            "class A {\n    int f(int n) {\n        ‸\n        return n;\n    }\n}\n",
            "if (n < 0) {",
        ),
        (
            "typescript",
            "function f(n: number) {\n  ‸\n  return n;\n}\n",
            "for (let i = 0; i < n; i++) {",
        ),
        ("go", "package a\n\nfunc f(n int) int {\n\t‸\n\treturn n\n}\n", "if n < 0 {"),
        ("rust", "fn f(n: i32) -> i32 {\n    ‸\n    n\n}\n", "if n < 0 {"),
        ("c", "int f(int n) {\n    ‸\n    return n;\n}\n", "while (n > 10) {"),
    ],
)
def test_a_line_that_ends_by_opening_a_block_is_offered(
    language_id: str, doc: str, line: str
) -> None:
    """The user goes on to write the block: the line is judged with its block closed, where
    judged as it stands every such line would be dropped. One that leaves a bracket open
    without ending on the block's brace is still dropped."""
    assert fitted_text(line, doc, language_id, SINGLE) == line
    assert fitted_text(line.replace("{", "{ (x"), doc, language_id, SINGLE) is None


@pytest.mark.parametrize(
    ("language_id", "doc", "raw"),
    [
        ("python", "import os\n\n\ndef describe(value):\n    text = str(‸", "value)"),
        ("javascript", "const a = 1;\nfunction f(x) {\n  return g(‸", "x, a);"),
        ("java", "class A {\n    int f(int n) {\n        return Math.max(‸", "n, 0);"),
    ],
)
def test_a_suggestion_that_closes_the_bracket_open_at_the_documents_end_is_offered(
    language_id: str, doc: str, raw: str
) -> None:
    """The user is writing the document's last lines: the brackets open at the cursor are the
    suggestion's to close, and closing them adds no error; leaving one of its own open does."""
    assert fitted_text(raw, doc, language_id, SINGLE) == raw
    assert fitted_text(raw.replace(")", ") + (1"), doc, language_id, SINGLE) is None


# --- what the cursor sits in: code, a comment or a string, by the tree -------------------------

CODE, COMMENT, STRING = Place.CODE, Place.COMMENT, Place.STRING

#: (language, document, where the cursor is by the tree).
PLACES = [
    pytest.param("python", "x = 1  # the count‸\ny = 2\n", COMMENT, id="python-comment-end"),
    pytest.param("python", 'name = "hel‸lo"\n', STRING, id="python-string"),
    pytest.param("python", 'name = "hello"‸\n', CODE, id="python-after-closing-quote"),
    pytest.param("python", 'def f():\n    """Return ‸the sum.\n    """\n', STRING, id="docstring"),
    pytest.param("python", 's = f"{d["k"]} and {n‸}"\n', CODE, id="python-nested-f-string"),
    pytest.param("python", 's = f"{d["k‸"]}"\n', STRING, id="python-string-in-f-string"),
    pytest.param("javascript", "let n = 1; /* a ‸note */\n", COMMENT, id="js-block-comment"),
    pytest.param("javascript", "let n = 1; /* a note */‸\n", CODE, id="js-after-block-comment"),
    pytest.param("javascript", "const s = `a ${b ? `x` : ‸y} c`;\n", CODE, id="js-template-code"),
    pytest.param("javascript", "const s = `a ${b} ‸c`;\n", STRING, id="js-template-text"),
    pytest.param("typescript", "const s: string = `t ${‸n}`;\n", CODE, id="ts-substitution"),
    pytest.param("typescript", "// TODO: ‸\nlet n: number = 1;\n", COMMENT, id="ts-comment"),
    pytest.param("go", "p := `C:\\dir\\` + ‸name\n", CODE, id="go-after-raw-string"),
    pytest.param("go", "p := `C:\\di‸r\\`\n", STRING, id="go-raw-string"),
    pytest.param("go", "r := '‸x'\n", STRING, id="go-rune"),
    pytest.param("rust", "fn f<'a, T>(x: &'a T) where T: 'a + ‸Clone {}\n", CODE, id="lifetime"),
    pytest.param("rust", 'let s = r#"a "b" ‸c"#;\n', STRING, id="rust-raw-string"),
    pytest.param("rust", "/// Adds ‸\nfn f() {}\n", COMMENT, id="rust-doc-comment"),
    pytest.param("rust", "/// Adds\n‸fn f() {}\n", CODE, id="rust-after-doc-comment"),
    pytest.param("java", 'String s = """\n  a "b" ‸c\n  """;\n', STRING, id="java-text-block"),
    pytest.param("java", "char c = 'x'; int n = ‸1;\n", CODE, id="java-after-char"),
    pytest.param("c", "char q = '\"‸';\n", STRING, id="c-char-literal"),
    pytest.param("c", "char q = '\"'; int n = ‸1;\n", CODE, id="c-after-char-literal"),
    pytest.param("c", "int n; // count‸", COMMENT, id="c-comment-at-document-end"),
    pytest.param("c", 'puts("a\\n"‸\n     "b");\n', CODE, id="c-between-concatenated"),
    pytest.param("python", 's = ("a "\n     "b‸")\n', STRING, id="python-concatenated-part"),
]


@pytest.mark.parametrize(("language_id", "doc", "place"), PLACES)
def test_the_tree_says_where_the_cursor_is(language_id: str, doc: str, place: Place) -> None:
    prefix, suffix = doc.split(CURSOR)
    assert place_at(prefix, suffix, language_id) is place
    assert cursor_place(prefix, suffix, language_id) is place


@pytest.mark.parametrize(
    ("language_id", "doc"),
    [
        pytest.param("go", "p := `C:\\dir\\` + ‸name\n", id="go-raw-string-backslash"),
        pytest.param("rust", "fn f<T>(x: T) where T: 'a + ‸Clone {}\n", id="rust-lifetime"),
        pytest.param("javascript", "const s = `a ${b ? `x` : ‸y} c`;\n", id="js-nested-template"),
        pytest.param("python", 's = f"{d["k"]} and {n‸}"\n', id="python-nested-f-string"),
    ],
)
def test_where_the_lexer_is_wrong_the_tree_is_right(language_id: str, doc: str) -> None:
    """The cases the tree is there for: the lexer, tuned on Python, puts each cursor in a
    string; it is in code."""
    prefix, suffix = doc.split(CURSOR)
    assert lexed_place(prefix) is STRING
    assert cursor_place(prefix, suffix, language_id) is CODE


def test_an_unclosed_quote_as_the_user_types_it_is_the_lexers_to_judge() -> None:
    """tree-sitter wraps an unclosed string in an ERROR node and answers at random there: the
    tree gives no answer, and the lexer's (a string) stands."""
    prefix, suffix = 'def f():\n    name = "hello ‸\n    return name\n'.split(CURSOR)
    assert place_at(prefix, suffix, "python") is None
    assert cursor_place(prefix, suffix, "python") is STRING


def test_a_c_macros_body_is_the_lexers_to_judge() -> None:
    """The C grammar leaves a macro's body unparsed (one `preproc_arg`, code by its type): the
    tree gives no answer there, and the lexer finds the string."""
    prefix, suffix = '#define GREETING "hello ‸world"\nint n;\n'.split(CURSOR)
    assert place_at(prefix, suffix, "c") is None
    assert cursor_place(prefix, suffix, "c") is STRING


def test_a_language_without_a_grammar_has_no_place_by_the_tree() -> None:
    prefix, suffix = "x = 1  # note‸\n".split(CURSOR)
    assert place_at(prefix, suffix, "cobol") is None
    assert place_at(prefix, suffix, "") is None
    assert cursor_place(prefix, suffix, "cobol") is COMMENT  # the lexer's


def test_the_place_reads_the_tree_the_syntax_check_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the syntax check of a suggestion, the place costs no parse of its own."""
    prefix, suffix = "function f(x) {\n  return g(‸);\n}\n".split(CURSOR)
    errors_added(prefix, "x", suffix, "javascript")
    parses: list[str] = []
    original = syntax.parse

    def counting(text: str, language_id: str) -> Tree | None:
        parses.append(text)
        return original(text, language_id)

    monkeypatch.setattr(syntax, "parse", counting)
    assert place_at(prefix, suffix, "javascript") is CODE
    assert parses == []


def test_trailing_space_inside_a_raw_string_is_kept_by_the_tree() -> None:
    """Fitting keeps a suggestion's trailing blanks where they end inside a string literal.
    In `r#"x" "#` the lexer sees `"x"` closed and the space in code, and strips the space from
    the user's string; the tree sees the raw string go on to `"#`."""
    doc = 'fn f() {\n    let s = ‸"#;\n}\n'
    assert fitted_text('r#"x" ', doc, "rust", SINGLE) == 'r#"x" '
    assert fitted_text('r#"x" ', doc, "", SINGLE) == 'r#"x"'  # no grammar: the lexer's rule
    assert fitted_text("value ", "fn f() {\n    let s = ‸\n}\n", "rust", SINGLE) == "value"
