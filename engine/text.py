"""Lines and indentation of source text, and what two versions of a text share: the one
definition of each, for prompts and next-edit rewrites (here in the engine) and for
post-processing, documents, code actions and the edit history (the language server).

Conventions:

- Lines end at `\\r\\n`, `\\r` or `\\n` only (LSP's rule). `str.splitlines` is never used on
  document text: it also splits at `\\x0b`, `\\x0c`, `\\x1c`-`\\x1e`, `\\x85`, `\\u2028` and
  `\\u2029`, which LSP does not count as line ends.
- Indentation is compared by width, with tabs advancing to the next multiple of `TAB_WIDTH`
  (4, the default tab size of VS Code and most editors' displays), so a tab and four spaces
  count as the same depth; mixed indentation is compared, never rejected.
"""

from __future__ import annotations

import re

#: Tab stops for comparing indentation (see the module docstring).
TAB_WIDTH = 4

#: One line break, as LSP counts them.
LINE_BREAK = re.compile(r"\r\n|\r|\n")

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")

#: A line whose code ends in one of these opens a block whose body follows on the next lines:
#: Python's `:`, brace languages' `{`, an open call or literal `(` `[`, JS arrows `=>`, and
#: `->` (Rust return types, Erlang/Elixir/Haskell clauses).
_BLOCK_OPENER_ENDINGS = (":", "{", "(", "[", "=>", "->")
#: Ruby, Lua and shell block openers, as a line's last word.
_BLOCK_OPENER_WORDS = frozenset({"do", "then", "begin", "else"})
_LAST_WORD = re.compile(r"(\w+)$")


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split where LSP splits them: only at \\n, \\r\\n and \\r.
    A text that ends with a line break has no empty line after it; "" has no lines."""
    return _LINE.findall(text)


def lines_and_endings(text: str) -> list[tuple[str, str]]:
    """(content, line ending) pairs; there is always a last pair, and its ending is empty
    (the possibly empty line after the last break)."""
    lines: list[tuple[str, str]] = []
    start = 0
    for match in LINE_BREAK.finditer(text):
        lines.append((text[start : match.start()], match.group()))
        start = match.end()
    lines.append((text[start:], ""))
    return lines


def strip_ending(line: str) -> str:
    """The line without its line ending."""
    return line.rstrip("\r\n")


def line_start(text: str, end: int | None = None) -> int:
    """Where the line holding position `end` (default: the end of `text`) starts: just after
    the last line break before it, or 0."""
    stop = len(text) if end is None else end
    return max(text.rfind("\n", 0, stop), text.rfind("\r", 0, stop)) + 1


def first_line(text: str) -> str:
    """The text up to its first line break."""
    match = LINE_BREAK.search(text)
    return text if match is None else text[: match.start()]


def newline_of(text: str, default: str = "\n") -> str:
    """The document's line ending: its first line break, else `default`."""
    match = LINE_BREAK.search(text)
    return default if match is None else match.group()


def leading_whitespace(line: str) -> str:
    """The spaces and tabs a line starts with."""
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_width(line: str) -> int:
    """Display width of a line's indentation: tabs advance to the next multiple of TAB_WIDTH."""
    column = 0
    for char in leading_whitespace(line):
        column = (column // TAB_WIDTH + 1) * TAB_WIDTH if char == "\t" else column + 1
    return column


def opens_block(code: str) -> bool:
    """Does this line's code (its trailing comment already removed) end by opening a block?

    It does when it ends in `:`, `{`, `(`, `[`, `=>` or `->`, or its last word is `do`,
    `then`, `begin` or `else`.
    """
    code = code.rstrip()
    if code.endswith(_BLOCK_OPENER_ENDINGS):
        return True
    word = _LAST_WORD.search(code)
    return word is not None and word.group(1) in _BLOCK_OPENER_WORDS


# --- two versions of a text -------------------------------------------------------------

#: The first chunk compared when looking for a common prefix or suffix; chunks double from
#: there, so two texts of n characters differing at offset p cost about 2p compared
#: characters, in C, plus a binary search inside the last chunk.
_FIRST_CHUNK = 256


def common_prefix_length(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share; no per-character Python loop, and
    only `b`'s chunks are copied (`startswith` at an offset compares `a` in place)."""
    limit = min(len(a), len(b))
    lo, step = 0, _FIRST_CHUNK
    while lo < limit:
        hi = min(limit, lo + step)
        if not a.startswith(b[lo:hi], lo):
            while hi - lo > 1:  # a[:lo] == b[:lo], and they differ within [lo, hi)
                mid = (lo + hi) // 2
                if a.startswith(b[lo:mid], lo):
                    lo = mid
                else:
                    hi = mid
            return lo
        lo, step = hi, step * 2
    return limit


def common_suffix_length(a: str, b: str, limit: int | None = None) -> int:
    """How many trailing characters `a` and `b` share, at most `limit`."""
    la, lb = len(a), len(b)
    limit = min(la, lb) if limit is None else min(limit, la, lb)
    lo, step = 0, _FIRST_CHUNK
    while lo < limit:
        hi = min(limit, lo + step)
        if not a.endswith(b[lb - hi : lb - lo], 0, la - lo):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if a.endswith(b[lb - mid : lb - lo], 0, la - lo):
                    lo = mid
                else:
                    hi = mid
            return lo
        lo, step = hi, step * 2
    return limit


def common_affixes(a: str, b: str) -> tuple[int, int]:
    """The common prefix and suffix lengths of `a` and `b`, which never overlap."""
    prefix = common_prefix_length(a, b)
    return prefix, common_suffix_length(a, b, min(len(a), len(b)) - prefix)
