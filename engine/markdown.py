"""Code out of a markdown answer: models wrap code in fenced blocks among prose, and both the
engine server's /generate and /extract-code and the language server's code actions want the
code alone. One reading of fences for both sides.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from engine.text import LINE_BREAK, split_lines, strip_ending

#: An opening fence: a line of three or more backticks or tildes, then an optional tag (the
#: language); a backtick fence's tag holds no backtick, so a line of inline code is no fence.
_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")


def fenced_code(text: str, tags: Collection[str] = ()) -> str | None:
    """The code of the first fenced block whose tag is one of `tags` (lower case), else of the
    first fenced block; None when `text` has no fence.

    A block closes on a line of its fence's character alone, at least as long as its fence;
    so a fence written inside a string on a line with other code neither opens nor closes a
    block. An unterminated fence runs to the end of the text. The code has its line breaks as
    `\\n`, without the breaks before the closing fence.
    """
    blocks: list[tuple[str, str]] = []  # (tag, code)
    lines = split_lines(text)
    i = 0
    while i < len(lines):
        opening = _FENCE.match(strip_ending(lines[i]))
        if opening is None:
            i += 1
            continue
        fence, tag = opening["fence"], opening["info"].lower()
        body: list[str] = []
        i += 1
        while i < len(lines):
            stripped = strip_ending(lines[i]).strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                break
            body.append(lines[i])
            i += 1
        blocks.append((tag, LINE_BREAK.sub("\n", "".join(body)).rstrip("\n")))
        i += 1
    if not blocks:
        return None
    return next((code for tag, code in blocks if tag in tags), blocks[0][1])


def code_or_text(text: str) -> str:
    """The code of the first fenced block in `text`, or `text` untouched when it has none."""
    code = fenced_code(text)
    return text if code is None else code
