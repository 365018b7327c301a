"""The plain functions of ranking candidate lines by the code after the cursor."""

from __future__ import annotations

import pytest

from lsp_server.rerank import following_code, hint_prompt, holds_code


@pytest.mark.parametrize(
    ("prefix", "suffix", "expected"),
    [
        # The cursor at the end of its line: the code from the next line on.
        ("def f(x):\n    y = ", "\n    return y\n", "    return y\n"),
        # Only blanks after the cursor on its line count as the end of it.
        ("x = ", "   \nprint(x)\n", "print(x)\n"),
        # At a line's start (before that line's code): all of it follows the new line.
        ("def f(x):\n", "    return x\n", "    return x\n"),
        ("", "print(1)\n", "print(1)\n"),
        # Code after the cursor on its line: the line is not the model's alone to write.
        ("y = f(", ", 2)\nprint(y)\n", None),
        # Nothing follows, or only blank lines.
        ("x = ", "", None),
        ("x = ", "\n\n  \n", None),
    ],
)
def test_the_code_a_line_at_the_cursor_is_followed_by(
    prefix: str, suffix: str, expected: str | None
) -> None:
    assert following_code(prefix, suffix) == expected


def test_the_second_prompt_shows_the_code_after_the_cursor_in_the_languages_comments() -> None:
    prompt = hint_prompt("let x = ", "print(x)\n\nfoo()\n", "typescript")
    assert prompt == "// The code after the missing line:\n// print(x)\n//\n// foo()\n\nlet x = "
    assert hint_prompt("x = ", "y\n", "a-language-nobody-knows") is None


@pytest.mark.parametrize(
    ("line", "language", "expected"),
    [
        ("    return x", "python", True),
        ("   ", "python", False),
        ("    # a comment", "python", False),
        ("// a comment", "rust", False),
        ("# not a comment in C", "c", True),
        ("x", "unknown", True),
    ],
)
def test_a_candidate_holds_code_unless_blank_or_a_comment_alone(
    line: str, language: str, expected: bool
) -> None:
    assert holds_code(line, language) is expected
