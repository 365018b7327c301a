"""Blocks of code around a line, the one definition code actions and next edits share: the
function (else the innermost block) around a line, from the syntax tree where the language has a
grammar (`postprocess/syntax.py`), else by indentation.

Code actions take `enclosing_code` (what an action with an empty selection is about);
propagation of next edits takes `enclosing_scope` (where the same change is due): both answer
from the tree first and fall back to `enclosing_block`, the indentation rule, where there is no
grammar or the tree has an error on the line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tree_sitter import Node, Tree

from engine.text import indent_width, split_lines, strip_ending
from lsp_server.postprocess import line_opens_block
from lsp_server.postprocess.syntax import (
    ANONYMOUS_TYPES,
    FUNCTION_TYPES,
    WRAPPER_TYPES,
    enclosing_function,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class LineSpan:
    """Whole lines `start`..`end` (0-based, inclusive)."""

    start: int
    end: int


def _is_blank(line: str) -> bool:
    return not strip_ending(line).strip()


_FUNCTION = re.compile(
    r"^\s*(?:@|(?:async\s+)?def\s|class\s|(?:export\s+)?(?:async\s+)?function\b|"
    r"(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?fn\s|func\s|local\s+function\s|"
    r"(?:public|private|protected|static|\w[\w<>\[\],\s]*)\s+\w+\s*\([^;]*\)\s*(?:throws\s[^{]*)?\{\s*$)"
)


def enclosing_code(text: str, line: int, language_id: str) -> LineSpan | None:
    """What an action with an empty selection is about: the function around `line`, found in
    the syntax tree where the language has a grammar (`syntax.enclosing_function`), else by
    indentation (`enclosing_block`, which also gives the innermost block when no function
    holds the line)."""
    found = enclosing_function(text, line, language_id)
    if found is not None:
        return LineSpan(start=found.start, end=found.end)
    return enclosing_block(text, line)


def enclosing_block(text: str, line: int) -> LineSpan | None:
    """The function (else the innermost block) around `line`, found by indentation.

    Going up from the cursor line, every line less indented than everything below it so far
    is a block header if it opens a block (`engine.text.opens_block`: ends with `:`, `{`,
    `(`, `[`, `=>`, `->`, or `do`, `then`, ..., a trailing comment aside). The nearest header
    that starts a function or class (`def`, `function`, `fn`, `func`, a C-like signature) is
    taken, else the nearest header. The block runs down while lines are more indented than
    its header (blank lines included), plus a closing line at the header's indentation that
    starts with a closing bracket (`}`, `end`). Decorators right above a `def` belong to it.
    """
    lines = split_lines(text)
    if not lines or not 0 <= line < len(lines):
        return None
    # The line whose indentation counts: the cursor line, or the next non-blank one.
    anchor = line
    while anchor < len(lines) and _is_blank(lines[anchor]):
        anchor += 1
    if anchor == len(lines):
        anchor = line
        while anchor >= 0 and _is_blank(lines[anchor]):
            anchor -= 1
        if anchor < 0:
            return None
    # A decorator belongs to the definition below it.
    while anchor + 1 < len(lines) and strip_ending(lines[anchor]).lstrip().startswith("@"):
        anchor += 1
    level = indent_width(lines[anchor])
    if strip_ending(lines[anchor]).lstrip().startswith(("}", ")", "]", "end")):
        level += 1  # a closing line belongs to the block it closes
    # The cursor may be on a header itself: then its own block is meant.
    headers: list[int] = []
    if _is_header(lines, anchor, text) and _next_is_deeper(lines, anchor):
        headers.append(anchor)
    for i in range(anchor - 1, -1, -1):
        if _is_blank(lines[i]):
            continue
        width = indent_width(lines[i])
        if width < level:
            level = width
            if _is_header(lines, i, text):
                headers.append(i)
        if width == 0 and headers:
            break
    if not headers:
        return None
    header = next((h for h in headers if _FUNCTION.match(lines[h])), headers[0])
    start = header
    while start > 0 and strip_ending(lines[start - 1]).lstrip().startswith("@"):
        start -= 1
    return LineSpan(start=start, end=_block_end(lines, header))


def _is_header(lines: Sequence[str], i: int, text: str) -> bool:
    """Whether line `i` opens a block: by its last token, or, for languages whose function
    header ends in nothing special (Lua's `function f(x)`, Ruby's `def f`), by starting a
    function with a deeper body below it."""
    if line_opens_block(strip_ending(lines[i]), text):
        return True
    stripped = strip_ending(lines[i]).lstrip()
    return (
        not stripped.startswith("@")
        and bool(_FUNCTION.match(lines[i]))
        and (_next_is_deeper(lines, i))
    )


def _next_is_deeper(lines: Sequence[str], header: int) -> bool:
    width = indent_width(lines[header])
    for line in lines[header + 1 :]:
        if not _is_blank(line):
            return indent_width(line) > width
    return False


def _block_end(lines: Sequence[str], header: int) -> int:
    width = indent_width(lines[header])
    end = header
    for i in range(header + 1, len(lines)):
        if _is_blank(lines[i]):
            continue
        if indent_width(lines[i]) > width:
            end = i
            continue
        stripped = strip_ending(lines[i]).strip()
        if stripped.startswith(("}", ")", "]", "end")):
            end = i
        break
    return end


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """A function or class around a line: whole lines `start`..`end` (0-based, inclusive), its
    decorators included, and `header`, the last line before its body (its signature's end)."""

    start: int
    end: int
    header: int


#: Node types that are a class (or a type's body of methods) in the pack's grammars: the scope
#: of a line inside no function.
CLASS_TYPES = frozenset(
    {
        "class_definition",  # Python
        "class_declaration",  # JS, TS, Java, C#
        "class",  # JS class expressions, Ruby
        "interface_declaration",
        "enum_declaration",
        "impl_item",  # Rust
        "trait_item",
        "module",  # Ruby
    }
)


def enclosing_scope(text: str, line: int, tree: Tree | None) -> Scope | None:
    """Where a change on `line` is due, for next edits: the innermost declared function around
    it, else the innermost anonymous one, else the innermost class, by `tree` (the document's
    syntax tree); by indentation (`enclosing_block`, whose header skips decorators) where there
    is no tree or an error on the line makes the tree's answer a guess. None: no block holds
    the line (the whole document)."""
    lines = split_lines(text)
    if tree is not None and 0 <= line < len(lines):
        column = len(lines[line].encode("utf-8")) - len(lines[line].lstrip().encode("utf-8"))
        found = _tree_scope(tree, line, column)
        if found is not _DOUBTED:
            return found if isinstance(found, Scope) else None
    block = enclosing_block(text, line)
    if block is None:
        return None
    header = block.start
    while header < block.end and strip_ending(lines[header]).lstrip()[:1] == "@":
        header += 1
    return Scope(start=block.start, end=block.end, header=header)


_DOUBTED = object()


def scope_at(tree: Tree, line: int, column: int) -> Scope | None:
    """The scope around the (0-based) `line` and byte `column` by the tree alone; None where
    no block holds it or an error on the line makes the tree's answer a guess."""
    found = _tree_scope(tree, line, column)
    return found if isinstance(found, Scope) else None


def _tree_scope(tree: Tree, line: int, column: int) -> Scope | object | None:
    root = tree.root_node
    if not 0 <= line <= root.end_point.row:
        return None
    if root.has_error and _error_on_row(root, line):
        return _DOUBTED
    node: Node | None = root.descendant_for_point_range((line, column), (line, column))
    declared = anonymous = cls = None
    while node is not None:
        kind = node.type
        if kind in FUNCTION_TYPES and kind not in ANONYMOUS_TYPES:
            declared = node
            break
        if kind in ANONYMOUS_TYPES:
            anonymous = anonymous or node
        elif kind in CLASS_TYPES and cls is None and anonymous is None:
            cls = node
        node = node.parent
    found = declared or anonymous or cls
    if found is None:
        return None
    body = found.child_by_field_name("body")
    header = found.start_point.row
    if body is not None:
        opens = (body.text or b"")[:1] in (b"{", b"(")
        header = max(header, body.start_point.row if opens else body.start_point.row - 1)
    outer = found
    while outer.parent is not None and outer.parent.type in WRAPPER_TYPES:
        outer = outer.parent
    return Scope(start=outer.start_point.row, end=found.end_point.row, header=header)


def _error_on_row(root: Node, row: int) -> bool:
    """Whether an ERROR or MISSING node touches `row`; only subtrees holding one are walked."""
    stack = [root]
    while stack:
        item = stack.pop()
        if item.start_point.row > row or item.end_point.row < row:
            continue
        if item.is_error or item.is_missing:
            return True
        if item.has_error:
            stack.extend(item.children)
    return False
