"""Code actions' plain parts: the block an action is about, fences, re-indentation."""

from __future__ import annotations

import ast
import re
from typing import TypedDict

import pytest

from lsp_server.action_logic import (
    UnusableAnswer,
    code_from_answer,
    document_uses_tabs,
    explain_messages,
    extract_code,
    fix_instruction,
    reindent,
    rewrite_messages,
)
from lsp_server.blocks import LineSpan, enclosing_block

PY = """import os

@cache
def f(x):
    y = 1

    if x:
        return y
    return 2

class A:
    def m(self):
        pass
"""

JS = """function g(a) {
  if (a) {
    return 1;
  }
  return 2;
}
"""


RUST = """use std::io;
pub fn clamp(value: i32, low: i32) -> i32 {
    let v = value;
    if v < low {
        return low;
    }
    v
}
fn twice(x: i32) -> i32 {
    x * 2
}
"""
GO = """package main

func sum(xs []int) int {
	total := 0
	for _, x := range xs {
		total += x
	}
	return total
}
"""
C = """#include <stdio.h>

static int count_lines(const char *s) {
    int n = 0;
    while (*s) {
        n += *s++ == '\\n';
    }
    return n;
}
"""
JAVA = """class Counter {
    public int next(int step) {
        int n = step;
        if (n > 0) { n++; }
        return n;
    }
}
"""
RUBY = """class Greeter
  def greet(name)
    if name
      puts "hi #{name}"
    end
  end
end
"""
LUA = """local function greet(name)
  if name then
    print("hi " .. name)
  end
end
"""


@pytest.mark.parametrize(
    ("text", "line", "span"),
    [
        pytest.param(PY, 0, None, id="top-level statement: no block"),
        pytest.param(PY, 4, LineSpan(start=2, end=8), id="inside a function: it and its decorator"),
        pytest.param(PY, 5, LineSpan(start=2, end=8), id="blank line inside a function"),
        pytest.param(PY, 7, LineSpan(start=2, end=8), id="nested block: the function wins"),
        pytest.param(PY, 2, LineSpan(start=2, end=8), id="on the decorator"),
        pytest.param(PY, 3, LineSpan(start=2, end=8), id="on the def line"),
        pytest.param(PY, 12, LineSpan(start=11, end=12), id="method: the nearest function"),
        pytest.param(PY, 10, LineSpan(start=10, end=12), id="on the class line"),
        pytest.param(JS, 2, LineSpan(start=0, end=5), id="braces: up to the closing brace"),
        pytest.param(JS, 5, LineSpan(start=0, end=5), id="on the closing brace"),
        pytest.param(
            "x = 0\nif x:  # why\n    y = 1\nz = 2\n",
            2,
            LineSpan(start=1, end=2),
            id="a header's trailing comment does not hide it",
        ),
        pytest.param(
            "xs = [\n    1,\n    2,\n]\n", 1, LineSpan(start=0, end=3), id="a list literal"
        ),
        # README: the nearest opener that starts `def`, `class`, `function`, `fn`, `func` or a
        # C-like signature wins over the blocks inside it; a closing `}` belongs to it.
        pytest.param(RUST, 3, LineSpan(start=1, end=7), id="rust: the pub fn, not its if"),
        pytest.param(RUST, 9, LineSpan(start=8, end=10), id="rust: a plain fn"),
        pytest.param(GO, 3, LineSpan(start=2, end=8), id="go: the func, not its for"),
        pytest.param(C, 3, LineSpan(start=2, end=8), id="c: a signature, not its while"),
        pytest.param(JAVA, 3, LineSpan(start=1, end=5), id="java: the method, not the class"),
        pytest.param(LUA, 2, LineSpan(start=0, end=4), id="lua: local function ... end"),
        pytest.param(RUBY, 2, LineSpan(start=1, end=5), id="ruby: def ... end, not its if"),
        pytest.param("", 0, None, id="empty document"),
        pytest.param(PY, 99, None, id="line past the end"),
    ],
)
def test_enclosing_block_is_found_by_indentation(
    text: str, line: int, span: LineSpan | None
) -> None:
    assert enclosing_block(text, line) == span


@pytest.mark.parametrize(
    ("answer", "language", "code"),
    [
        pytest.param("```python\nx = 1\n```", "python", "x = 1", id="one fence"),
        pytest.param(
            "Here:\n```js\nf()\n```\nand\n```python\ny = 2\n```\n",
            "python",
            "y = 2",
            id="the document's language is preferred",
        ),
        pytest.param(
            "```\na\n```\n```rust\nb\n```", "python", "a", id="no tag matches: the first fence"
        ),
        pytest.param("```py\nz\n```", "python", "z", id="a short tag for the language"),
        pytest.param("Just say x = 1", "python", "Just say x = 1", id="no fence: the whole answer"),
        pytest.param(
            "```python\ndef f():\n    pass", "python", "def f():\n    pass", id="unterminated fence"
        ),
        pytest.param(
            '```python\ns = "```"\nt = 1\n```',
            "python",
            's = "```"\nt = 1',
            id="fence inside a string",
        ),
        pytest.param(
            "````markdown\n```python\nx\n```\n````",
            "markdown",
            "```python\nx\n```",
            id="longer outer fence",
        ),
        pytest.param("~~~python\nq\n~~~", "python", "q", id="tilde fence"),
        pytest.param("```python\r\nx = 1\r\n```\r\n", "python", "x = 1", id="CRLF answer"),
        pytest.param(
            "  ```python\n  x\n  ```", "python", "  x", id="indented fence keeps the code"
        ),
    ],
)
def test_code_is_taken_from_the_answers_fence(answer: str, language: str, code: str) -> None:
    assert extract_code(answer, language) == code


class ReindentOptions(TypedDict, total=False):
    """What a `reindent` case sets beside the code, its indent and its first line."""

    newline: str
    use_tabs: bool | None


@pytest.mark.parametrize(
    ("code", "indent", "first", "kw", "expected"),
    [
        pytest.param(
            "def f():\n    return 1\n",
            "    ",
            True,
            {},
            "    def f():\n        return 1",
            id="spaces",
        ),
        pytest.param(
            "    a = 1\n    if a:\n        b = 2\n",
            "",
            True,
            {},
            "a = 1\nif a:\n    b = 2",
            id="dedent to column 0",
        ),
        pytest.param(
            "def f():\n    return 1",
            "\t",
            True,
            {},
            "\tdef f():\n\t\treturn 1",
            id="tabs in the document",
        ),
        pytest.param(
            "def f():\n\treturn 1",
            "  ",
            True,
            {},
            "  def f():\n      return 1",
            id="tabs from the model, spaces here",
        ),
        pytest.param(
            "if x:\n  \ty = 1", "", True, {}, "if x:\n    y = 1", id="mixed tabs and spaces"
        ),
        pytest.param(
            "x = 1\ny = 2",
            "    ",
            False,
            {},
            "x = 1\n    y = 2",
            id="selection starts after the indentation",
        ),
        pytest.param(
            "a\n\n\nb\n\n",
            "  ",
            True,
            {},
            "  a\n\n\n  b",
            id="blank lines kept empty, ends trimmed",
        ),
        pytest.param("a\nb", "", True, {"newline": "\r\n"}, "a\r\nb", id="CRLF document"),
        pytest.param("a\r\n  b\r\n", "", True, {}, "a\n  b", id="CRLF answer into an LF document"),
        pytest.param("\n\n", "    ", True, {}, "", id="nothing"),
    ],
)
def test_reindent(code: str, indent: str, first: bool, kw: ReindentOptions, expected: str) -> None:
    assert reindent(code, indent, first_line_indented=first, **kw) == expected


def test_a_reindented_method_parses_in_its_class() -> None:
    answer = "```python\ndef area(self) -> float:\n    return self.w * self.h\n```"
    body = reindent(extract_code(answer, "python"), "    ", first_line_indented=True)
    ast.parse("class R:\n" + body + "\n")


class Placement(TypedDict):
    """Where the selected code sits, as `code_from_answer` is told it."""

    indent: str
    first_line_indented: bool
    newline: str
    use_tabs: bool


#: How the selection sits: a method body in a CRLF document, its last line's end selected.
IN_METHOD: Placement = {
    "indent": "    ",
    "first_line_indented": True,
    "newline": "\r\n",
    "use_tabs": False,
}


@pytest.mark.parametrize(
    ("answer", "selected", "language", "text"),
    [
        pytest.param(
            "Sure:\n```python\nif x:\n    y = 1\n```\nDone.",
            "    if x: y = 1\r\n",
            "python",
            "    if x:\r\n        y = 1\r\n",
            id="fenced code, re-indented, the selected line end kept",
        ),
        pytest.param(
            "```python\nreturn 2\n```",
            "    return 1",
            "python",
            "    return 2",
            id="a method's line",
        ),
        pytest.param("x <- 1", "    x = 1", "r", "    x <- 1", id="no fence: the whole answer"),
    ],
)
def test_code_from_answer_fits_the_selection(
    answer: str, selected: str, language: str, text: str
) -> None:
    assert code_from_answer(answer, selected=selected, language_id=language, **IN_METHOD) == text


@pytest.mark.parametrize(
    ("answer", "language", "reason"),
    [
        pytest.param("```python\n\n```", "python", "held no code", id="an empty fence"),
        pytest.param("\n \n", "", "held no code", id="a blank answer"),
        pytest.param(
            "```python\ndef f(:\n```",
            "python",
            "not valid Python (",
            id="python that does not parse",
        ),
    ],
)
def test_code_from_answer_refuses_an_unusable_answer(
    answer: str, language: str, reason: str
) -> None:
    with pytest.raises(UnusableAnswer, match=re.escape(reason)):
        code_from_answer(answer, selected="    x = 1", language_id=language, **IN_METHOD)


def test_tabs_are_detected_from_the_document() -> None:
    assert document_uses_tabs("a\n\tb\n\tc\n  d\n")
    assert not document_uses_tabs("a\n    b\n")


def test_messages_carry_code_language_file_and_instruction() -> None:
    (system, user) = rewrite_messages(
        "x=1", language_id="python", file_name="m.py", instruction="add type hints"
    )
    assert system.role == "system"
    assert user.role == "user"
    for part in ("x=1", "python", "m.py", "add type hints", "```python"):
        assert part in user.content
    (_, explain) = explain_messages("x=1", language_id="python", file_name="m.py")
    assert "x=1" in explain.content
    assert "m.py" in explain.content
    assert "undefined name 'y'" in fix_instruction(["undefined name 'y'"])
