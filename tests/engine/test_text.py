"""Lines and indentation (`engine.text`): the one definition the prompts, post-processing,
documents and code actions share."""

from __future__ import annotations

import pytest

from engine.text import (
    TAB_WIDTH,
    first_line,
    indent_width,
    leading_whitespace,
    line_start,
    lines_and_endings,
    newline_of,
    opens_block,
    split_lines,
    strip_ending,
)
from lsp_server.postprocess import line_opens_block


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        pytest.param("", [], id="empty"),
        pytest.param("a", ["a"], id="no break"),
        pytest.param("a\n", ["a\n"], id="final break, no empty line after it"),
        pytest.param("a\nb", ["a\n", "b"], id="lf"),
        pytest.param("a\r\nb\rc\n", ["a\r\n", "b\r", "c\n"], id="all three endings"),
        pytest.param("\n\n", ["\n", "\n"], id="blank lines"),
        pytest.param("a\u2028b\x0cc\x85d", ["a\u2028b\x0cc\x85d"], id="not LSP line ends"),
    ],
)
def test_split_lines_breaks_only_where_lsp_does(text: str, lines: list[str]) -> None:
    assert split_lines(text) == lines
    assert "".join(lines) == text


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        pytest.param("", [("", "")], id="empty: one empty line"),
        pytest.param("a\n", [("a", "\n"), ("", "")], id="the empty line after a final break"),
        pytest.param("a\r\nb\rc", [("a", "\r\n"), ("b", "\r"), ("c", "")], id="mixed"),
        pytest.param("a\u2028b", [("a\u2028b", "")], id="U+2028 is no line end"),
    ],
)
def test_lines_and_endings_always_end_with_the_last_line(
    text: str, pairs: list[tuple[str, str]]
) -> None:
    assert lines_and_endings(text) == pairs
    assert "".join(content + ending for content, ending in pairs) == text


@pytest.mark.parametrize(
    ("line", "content"),
    [("a\n", "a"), ("a\r\n", "a"), ("a\r", "a"), ("a", "a"), ("a \u2028", "a \u2028")],
)
def test_strip_ending(line: str, content: str) -> None:
    assert strip_ending(line) == content


@pytest.mark.parametrize(
    ("text", "end", "start"),
    [
        ("abc", None, 0),
        ("a\nbc", None, 2),
        ("a\r\nbc", None, 3),
        ("a\rbc", None, 2),
        ("a\n", None, 2),
        ("a\nb\nc", 3, 2),  # the line holding position 3
        ("a\nb\nc", 2, 2),
        ("a\nb\nc", 1, 0),
    ],
)
def test_line_start_is_just_after_the_last_break_before_the_position(
    text: str, end: int | None, start: int
) -> None:
    assert line_start(text, end) == start


@pytest.mark.parametrize(
    ("text", "line"), [("", ""), ("abc", "abc"), ("ab\ncd", "ab"), ("ab\r\ncd", "ab"), ("\r", "")]
)
def test_first_line(text: str, line: str) -> None:
    assert first_line(text) == line


@pytest.mark.parametrize(
    ("text", "newline"),
    [
        ("", "\n"),
        ("one line", "\n"),
        ("a\nb", "\n"),
        ("a\r\nb\r\n", "\r\n"),
        ("a\rb", "\r"),
        ("a\r\nb\nc", "\r\n"),  # mixed: the first one
    ],
)
def test_newline_of_is_the_first_line_break(text: str, newline: str) -> None:
    assert newline_of(text) == newline


@pytest.mark.parametrize(
    ("line", "indent", "width"),
    [
        ("x", "", 0),
        ("    x", "    ", 4),
        ("\tx", "\t", TAB_WIDTH),
        ("  \tx", "  \t", TAB_WIDTH),  # a tab advances to the next tab stop
        ("\t  x", "\t  ", TAB_WIDTH + 2),
        ("     \tx", "     \t", 2 * TAB_WIDTH),
        ("   ", "   ", 3),  # a blank line is all indentation
        ("\u3000x", "", 0),  # only spaces and tabs indent
    ],
)
def test_indentation_and_its_width(line: str, indent: str, width: int) -> None:
    assert leading_whitespace(line) == indent
    assert indent_width(line) == width
    assert indent_width(indent) == width


@pytest.mark.parametrize(
    ("code", "opens"),
    [
        ("def f(x):", True),
        ("if x:", True),
        ("function f() {", True),
        ("foo(", True),
        ("xs = [", True),  # a literal's items follow, one a line
        ("fn f() ->", True),  # a return type on the next line (Rust), a clause body (Elixir)
        ("const f = () =>", True),
        ("items.each do", True),
        ("if x then", True),
        ("begin", True),
        ("else", True),
        ("if x: ", True),  # trailing whitespace aside
        ("return x", False),
        ("foo()", False),
        ("x = [1, 2]", False),
        ("}", False),
        ("", False),
        ("undo", False),  # a word that ends in `do` is not `do`
    ],
)
def test_opens_block(code: str, opens: bool) -> None:
    assert opens_block(code) is opens


@pytest.mark.parametrize(
    ("line", "document", "opens"),
    [
        pytest.param("if x:  # why", "x = 1\n", True, id="python comment after a colon"),
        pytest.param("f() {  // why", "int x;\n", True, id="slash comment after a brace"),
        pytest.param("x = 1  # ends with a colon:", "x = 1\n", False, id="colon in a comment"),
        pytest.param("s = 'a:'", "x = 1\n", False, id="colon in a string"),
        pytest.param("n = a // (", "def f():\n", True, id="python floor division is code"),
    ],
)
def test_a_lines_trailing_comment_does_not_decide(line: str, document: str, opens: bool) -> None:
    assert line_opens_block(line, document) is opens
