"""Syntax trees (tree-sitter, grammars bundled by `tree-sitter-language-pack` 0.13.0) for the
languages the pack knows: how many syntax errors a text has, where a suggestion's code leaves
the node it opened or the block it was written in, whether the cursor is in code, a comment
or a string (`place_at`), and the function around a line.

Every function answers None where no tree can be had (a language the pack does not know, a
grammar that fails to load): the callers then keep their indentation and lexer rules.

Bounded work: a suggestion is checked on a window of the document around the cursor
(`WINDOW_BEFORE` and `WINDOW_AFTER` characters, cut at line starts), never the whole file, so
a huge file costs what a small one does. A parse of such a window takes about 0.4 ms here
(tree-sitter 0.25, an 8,000-character TypeScript file; 1.7 ms for 32,000 characters).
"""

from __future__ import annotations

import enum
import functools
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tree_sitter import Node, Parser, Query, QueryCursor, Tree

from engine.text import common_affixes, line_start
from lsp_server.postprocess.brackets import scan_document
from lsp_server.postprocess.lexer import LexState, lex, slash_comments

log = logging.getLogger(__name__)

#: Editors' language ids (LSP's list, and VS Code's) to the pack's grammar names.
GRAMMARS: dict[str, str] = {
    "python": "python",
    "javascript": "javascript",
    "javascriptreact": "javascript",  # the JavaScript grammar parses JSX
    "typescript": "typescript",
    "typescriptreact": "tsx",
    "go": "go",
    "rust": "rust",
    "java": "java",
    "c": "c",
    "cpp": "cpp",
    "csharp": "csharp",
    "kotlin": "kotlin",
    "scala": "scala",
    "swift": "swift",
    "php": "php",
    "ruby": "ruby",
    "lua": "lua",
    "shellscript": "bash",
    "css": "css",
    "scss": "scss",
    "html": "html",
    "json": "json",
    "yaml": "yaml",
    "toml": "toml",
    "sql": "sql",
    "dart": "dart",
    "elixir": "elixir",
    "haskell": "haskell",
    "julia": "julia",
    "ocaml": "ocaml",
    "r": "r",
    "zig": "zig",
}

#: Characters of the document before and after the cursor that a suggestion is checked in.
#: Enough for the function around the cursor in most code; the counts are compared between
#: the same window with and without the suggestion, so a window that starts mid-function
#: adds the same errors to both.
WINDOW_BEFORE = 6_000
WINDOW_AFTER = 3_000
#: The most a code action parses (a whole document): about 50 ms a megabyte here.
DOCUMENT_LIMIT = 2_000_000

#: Node types that are a function (or a method, constructor, class) in the pack's grammars.
FUNCTION_TYPES = frozenset(
    {
        "function_definition",  # Python, C, C++, Lua, Bash
        "function_declaration",  # JS, TS, Go, Swift, Kotlin
        "generator_function_declaration",
        "method_definition",  # JS, TS
        "method_declaration",  # Java, Go, C#
        "constructor_declaration",  # Java, C#
        "function_item",  # Rust
        "function_signature_item",
        "method",  # Ruby
        "singleton_method",
        "func_literal",  # Go
        "arrow_function",  # JS, TS
        "function_expression",
        "function",
        "closure_expression",  # Rust
        "lambda_expression",
    }
)
#: Function-like nodes that are taken only when no declared function holds the line: a
#: callback inside a method is part of the method the user means.
ANONYMOUS_TYPES = frozenset(
    {
        "func_literal",
        "arrow_function",
        "function_expression",
        "closure_expression",
        "function",
        "lambda_expression",
    }
)
#: Wrappers that belong to the function they hold (Python's decorators, JS's export).
WRAPPER_TYPES = frozenset({"decorated_definition", "export_statement"})

_LINE_BREAKS = re.compile(r"\r\n?")


def grammar_of(language_id: str) -> str | None:
    """The pack's grammar for an editor's language id; None where it has none."""
    name = GRAMMARS.get(language_id)
    return name if name is not None and _parser(name) is not None else None


@functools.cache
def _parser(name: str) -> Parser | None:
    """One parser per grammar, made on first use; None (logged once) if it cannot load."""
    try:
        from tree_sitter_language_pack import get_parser

        return get_parser(name)  # type: ignore[arg-type]  # names are checked by the call
    except Exception as e:  # a grammar that fails to load means: no tree, today's rules
        log.warning("no syntax tree for %s: %s", name, e)
        return None


def parse(text: str, language_id: str) -> Tree | None:
    """`text`'s syntax tree in the language; None where there is no grammar for it."""
    name = GRAMMARS.get(language_id)
    parser = _parser(name) if name is not None else None
    return None if parser is None else parser.parse(text.encode("utf-8"))


def count_errors(node: Node) -> int:
    """The ERROR and MISSING nodes under `node`; only subtrees that hold an error are walked."""
    count = 0
    stack = [node]
    while stack:
        item = stack.pop()
        if item.is_error or item.is_missing:
            count += 1
            continue  # an ERROR node's inside is one mistake, not several
        if item.has_error:
            stack.extend(item.children)
    return count


def error_count(text: str, language_id: str) -> int | None:
    """How many syntax errors tree-sitter finds in `text`; None without a grammar."""
    tree = parse(text, language_id)
    return None if tree is None else count_errors(tree.root_node)


@dataclass(frozen=True, slots=True)
class Window:
    """The document around the cursor that a suggestion is checked in, line breaks as `\\n`
    (tree-sitter counts rows by `\\n` only)."""

    before: str
    after: str

    @classmethod
    def around(cls, prefix: str, suffix: str) -> Window:
        """At most `WINDOW_BEFORE` characters before the cursor and `WINDOW_AFTER` after it,
        cut at line boundaries where there are some. Each cut is at the least indented code
        line within the half of the window farthest from the cursor (not a comment's `*`
        line, nor a closer): a window that starts or ends mid-block or mid-comment parses
        with errors of its own, which a suggestion's brackets can pair with and hide."""
        before = prefix
        if len(prefix) > WINDOW_BEFORE:
            cut = len(prefix) - WINDOW_BEFORE
            start = _least_indented(prefix, cut, cut + WINDOW_BEFORE // 2, first=True)
            before = prefix[start:] if start is not None else prefix[cut:]
        after = suffix
        if len(suffix) > WINDOW_AFTER:
            end = _least_indented(suffix, WINDOW_AFTER // 2, WINDOW_AFTER, first=False)
            after = suffix[:end] if end is not None else suffix[:WINDOW_AFTER]
        return cls(_LINE_BREAKS.sub("\n", before), _LINE_BREAKS.sub("\n", after))


_LINE_START = re.compile(r"(?<=[\r\n])[ \t]*(?=[^\s*)\]}#])")


def _least_indented(text: str, low: int, high: int, *, first: bool) -> int | None:
    """Where to cut `text` between `low` and `high`: the start of the least indented code line
    that starts there (`first`: the first such line, the window's start; else the end of the
    last one, the window's end); None when no line starts there (a minified line)."""
    best: tuple[int, int] | None = None  # (indentation, where to cut)
    for match in _LINE_START.finditer(text, low, high):
        width = len(match.group().expandtabs(4))
        if first:
            cut = match.start()
        else:
            line_end = re.compile(r"[\r\n]").search(text, match.end(), high)
            if line_end is None:
                break
            cut = line_end.end()
        if best is None or width < best[0] or (width == best[0] and not first):
            best = (width, cut)
    return None if best is None else best[1]


_CLOSER_OF = {"(": ")", "[": "]", "{": "}"}


@functools.lru_cache(maxsize=16)
def _window(prefix: str, suffix: str) -> Window:
    """`Window.around`, once per document: each choice, cut and streamed line asks again."""
    return Window.around(prefix, suffix)


@functools.lru_cache(maxsize=16)
def _window_tree(window: Window, language_id: str) -> Tree | None:
    """The tree of the window without a suggestion, its open brackets closed after it: cached,
    every choice and cut asks for its errors again, and `place_at` reads the same tree.

    A window that ends inside a class or function leaves it open, and tree-sitter then wraps
    much of the window in one ERROR node, inside which a suggestion's own mistakes are not
    counted (seen on OpenJDK's AbstractMap: an unclosed `if (...) {` added no error). So the
    brackets still open at the window's end (by the lexer) are closed after it, with and
    without the suggestion; a bracket the suggestion opens and leaves open is counted on its
    own (`_left_open`).
    """
    if grammar_of(language_id) is None:
        return None
    text = window.before + window.after
    return parse(text + "\n" + closers_owed(text), language_id)


def _window_errors(window: Window, language_id: str) -> int | None:
    """The window's errors without a suggestion."""
    tree = _window_tree(window, language_id)
    return None if tree is None else count_errors(tree.root_node)


def closers_owed(text: str) -> str:
    """The closers of the brackets `text` leaves open (by the lexer), innermost first."""
    state = LexState(slash_comments=slash_comments(text))
    scan_document(state, text)
    return "".join(_CLOSER_OF.get(item.delim, "") for item in reversed(state.stack))


def errors_added(prefix: str, text: str, suffix: str, language_id: str) -> int | None:
    """How many more syntax errors the document has with `text` written between `prefix`
    and `suffix` than without it (negative: fewer); None without a grammar."""
    window = _window(prefix, suffix)
    before = _window_errors(window, language_id)
    if before is None:
        return None
    inserted = _LINE_BREAKS.sub("\n", text)
    written = window.before + inserted + window.after
    # The brackets still open at the window's end with the suggestion: fewer where it closes
    # some that were open at the cursor (`str(` + `value)` at a document's end), more where it
    # leaves its own open. Each left open is an error of its own; all are closed after the
    # window as before, so that tree-sitter does not wrap the rest in one ERROR node.
    owed = closers_owed(written)
    after = error_count(written + "\n" + owed, language_id)
    left_open = _left_open(window.before, inserted, window.after)
    return None if after is None else after - before + left_open


def _left_open(before: str, inserted: str, after: str) -> int:
    """How many brackets `inserted` opens that are still open at the end of `after` (by the
    lexer): those the closers after the window would otherwise close for it."""
    state = LexState(slash_comments=slash_comments(before + inserted + after))
    scan_document(state, before)
    held = {id(item) for item in state.stack}
    scan_document(state, inserted, starts_line=not before or before.endswith("\n"))
    own = {id(item) for item in state.stack} - held
    scan_document(state, after, starts_line=not inserted or inserted.endswith("\n"))
    return sum(1 for item in state.stack if id(item) in own)


class Place(enum.Enum):
    """What the cursor sits in."""

    CODE = "code"
    COMMENT = "comment"
    STRING = "string"


#: Named node types (by part of their name) that hold a string's text in the pack's grammars:
#: `string` (Python, JS, TS), `template_string` (JS, TS), `interpreted_string_literal` and
#: `raw_string_literal` (Go), `string_literal`, `raw_string_literal`, `char_literal` (Rust,
#: C), `character_literal` (Java), `rune_literal` (Go), heredocs (Ruby, Bash, PHP).
_STRING_PARTS = ("string", "char_literal", "character_literal", "rune_literal", "heredoc")
#: Node types of the code inside or between strings: `interpolation` (Python's f-strings,
#: Ruby), `template_substitution` (JS, TS), and the blanks between the parts of a
#: `concatenated_string` (Python's and C's `"a" "b"`, a string node over both).
_CODE_PARTS = ("interpolation", "substitution", "concatenated")
#: Node types whose text the grammar leaves unparsed: a C or C++ macro's body (`preproc_arg`),
#: where a string is a string all the same. The tree has no answer there.
_OPAQUE = frozenset({"preproc_arg"})
#: How block comments end: a comment that ends so is over after its last character, where a
#: line comment goes on to the line's end.
_BLOCK_COMMENT_ENDS = ("*/", "-->", "*)", "-}", "]]")


def place_at(prefix: str, suffix: str, language_id: str) -> Place | None:
    """Whether the cursor between `prefix` and `suffix` is in code, a comment or a string, by
    the tree of the window the syntax check parses (cached: after `errors_added` this costs a
    walk down the tree). None without a grammar, where an ERROR or MISSING node is on the
    cursor's line (an unclosed string as the user types it: `DOUBT`), and in a C macro's body:
    there the tree's answer is a guess, and the caller asks the lexer (`cursor_place`).

    The cursor is inside a node when it is after the node's first character and before its
    end: right after a closing quote is code. A line comment also holds the cursor at its end.
    The code inside a string (f-string `{...}`, template `${...}`) is code."""
    if grammar_of(language_id) is None:
        return None  # before the window is cut: the gate asks for every language
    window = _window(prefix, suffix)
    tree = _window_tree(window, language_id)
    if tree is None:
        return None
    offset = len(window.before.encode("utf-8"))
    line_begins = offset - len(window.before[line_start(window.before) :].encode("utf-8"))
    line_end = offset + len(window.after.partition("\n")[0].encode("utf-8"))
    found = place_in(tree.root_node, offset, (line_begins, line_end))
    return None if found is None else found[0]


def cursor_place(prefix: str, suffix: str, language_id: str) -> Place:
    """What the cursor sits in: the tree's answer (`place_at`) where there is one, else the
    lexer's (`lexed_place`)."""
    return place_at(prefix, suffix, language_id) or lexed_place(prefix)


def lexed_place(prefix: str) -> Place:
    """What the end of `prefix` sits in by the lexer (tuned on Python: it takes a Go raw
    string's `\\` before its closing backtick for an escape, a Rust `'a` after `:` for a
    character, and ends a JS template at the backtick of one nested in its `${...}`)."""
    state = LexState(slash_comments=slash_comments(prefix))
    for _ in lex(state, prefix):
        pass
    if state.comment is not None:
        return Place.COMMENT
    return Place.STRING if state.string is not None else Place.CODE


class Doubt(enum.Enum):
    """Where the tree's answer is not taken (`place_in`), the errors that make it a guess."""

    LINE = "an error on the cursor's line"  # an unclosed quote leaves one beside the cursor
    PATH = "an error node around the cursor"
    NEVER = "never"


#: The rule `place_at` follows, chosen in docs/decisions/cursor-place.md: with the lexer where
#: the tree is
#: doubted, on cursors whose line is being typed, LINE agreed with the whole file's tree at
#: 99.5-100% a language, PATH at 94.2-100%, NEVER at 89.7-100%.
DOUBT = Doubt.LINE


def place_in(
    root: Node, offset: int, line: tuple[int, int], doubt: Doubt = DOUBT
) -> tuple[Place, Node | None] | None:
    """What the byte `offset` of `root`'s text sits in, and the comment or string node that
    says so (None: code); None where `doubt` finds an error (`place_at`), and in text the
    grammar leaves unparsed (a C macro's body). `line`: the bytes where the offset's line
    starts and ends."""
    if doubt is Doubt.LINE and root.has_error and _error_within(root, *line):
        return None
    strict = doubt is not Doubt.NEVER
    path = [root]
    # Each child taken holds the offset strictly inside: it ends after it (what
    # `goto_first_child_for_byte` finds) and its first character is before it. (The cursor,
    # not `Node.first_child_for_byte`: on a leaf, tree-sitter 0.25.2's crashes the process.)
    cursor = root.walk()
    while cursor.goto_first_child_for_byte(offset) is not None:
        child = cursor.node
        if child is None or child.start_byte >= offset:
            break
        path.append(child)
    if strict and any(item.is_error or item.is_missing for item in path):
        return None
    if any(item.type in _OPAQUE for item in path):
        return None
    line_comment = _line_comment_ending_at(root, offset) if offset == line[1] else None
    if line_comment is not None:
        return None if strict and line_comment.has_error else (Place.COMMENT, line_comment)
    for item in reversed(path):
        if not item.is_named:
            continue
        kind = item.type
        if "comment" in kind:
            return None if strict and item.has_error else (Place.COMMENT, item)
        if any(part in kind for part in _CODE_PARTS):
            break
        if any(part in kind for part in _STRING_PARTS):
            return None if strict and item.has_error else (Place.STRING, item)
    return Place.CODE, None


def _error_within(root: Node, low: int, high: int) -> bool:
    """Whether an ERROR or MISSING node overlaps the bytes `low` to `high` (an unclosed quote
    on the cursor's line leaves one there, beside the cursor's nodes rather than above them);
    only subtrees that hold an error and overlap are walked."""
    stack = [root]
    while stack:
        item = stack.pop()
        if item.start_byte > high or item.end_byte < low:
            continue
        if item.is_error or item.is_missing:
            return True
        if item.has_error:
            stack.extend(item.children)
    return False


def _line_comment_ending_at(root: Node, offset: int) -> Node | None:
    """The line comment that ends at `offset` (a line's end), if there is one."""
    if offset == 0:
        return None
    node: Node | None = root.named_descendant_for_byte_range(offset - 1, offset)
    while node is not None and node.end_byte == offset:
        if "comment" in node.type:
            text = (node.text or b"").decode("utf-8", "replace")
            return None if text.endswith(("\n", *_BLOCK_COMMENT_ENDS)) else node
        node = node.parent
    return None


@dataclass(frozen=True, slots=True)
class TreeEnd:
    """What the tree says of a suggestion's lines: `line` is the index of the first line
    after the code ends (None: every line stays)."""

    line: int | None


def block_end(prefix: str, suffix: str, lines: Sequence[str], language_id: str) -> TreeEnd | None:
    """Where a multi-line suggestion's code ends by the tree of the document with it; None
    without a grammar (the caller's indentation rules decide).

    `lines` are the suggestion's lines without endings, the first one continuing the cursor
    line. The node the suggestion opened is the outermost one that starts at its first
    character. The suggestion ends after the line where that node ends, when the node spans
    lines (it opened a block: `if (x) {` and its body, up to `}`), and after the line where
    the node around it (the block it was written in) ends: past it, the model writes code
    that belongs elsewhere.
    """
    text = "\n".join(lines)
    start = len(text) - len(text.lstrip())
    if start == len(text):
        return TreeEnd(None)
    window = _window(prefix, suffix)
    tree = parse(window.before + text + window.after, language_id)
    if tree is None:
        return None
    first_row = window.before.count("\n")
    begin = len((window.before + text[:start]).encode("utf-8"))
    end = len((window.before + text.rstrip()).encode("utf-8"))
    root = tree.root_node
    opened = root.descendant_for_byte_range(begin, begin)
    if opened is None or opened == root:
        return TreeEnd(None)
    while (parent := opened.parent) is not None and parent != root and parent.start_byte == begin:
        opened = parent
    rows = []
    if (
        not opened.has_error
        and opened.end_point.row > opened.start_point.row
        and opened.end_byte <= end
    ):
        rows.append(opened.end_point.row)
    around = opened.parent
    if around is not None and around != root and not around.is_error and around.end_byte <= end:
        rows.append(around.end_point.row)
    if not rows:
        return TreeEnd(None)
    line = min(rows) - first_row + 1
    return TreeEnd(line if 0 < line < len(lines) else None)


@dataclass(frozen=True, slots=True)
class RowSpan:
    """Whole lines `start`..`end` (0-based, inclusive)."""

    start: int
    end: int


def enclosing_function(text: str, line: int, language_id: str) -> RowSpan | None:
    """The lines of the innermost declared function (method, constructor) around `line`,
    else of the innermost anonymous one (arrow function, closure), by the tree; with the
    decorators or `export` that belong to it. None without a grammar, for a document over
    `DOCUMENT_LIMIT`, or when no function holds the line."""
    if len(text) > DOCUMENT_LIMIT:
        return None
    tree = parse(_LINE_BREAKS.sub("\n", text), language_id)
    if tree is None:
        return None
    row_text = _LINE_BREAKS.sub("\n", text).split("\n")
    if not 0 <= line < len(row_text):
        return None
    column = len(row_text[line]) - len(row_text[line].lstrip())
    node: Node | None = tree.root_node.descendant_for_point_range((line, column), (line, column))
    declared = anonymous = None
    while node is not None:
        if node.type in FUNCTION_TYPES:
            if node.type in ANONYMOUS_TYPES:
                anonymous = anonymous or node
            else:
                declared = node
                break
        node = node.parent
    found = declared or anonymous
    if found is None:
        return None
    while found.parent is not None and found.parent.type in WRAPPER_TYPES:
        found = found.parent
    return RowSpan(found.start_point.row, found.end_point.row)


#: The last whole-document tree per grammar, for the next edit's parse: a small change re-parses
#: incrementally (tree-sitter reuses the unchanged subtrees). A 2,000-line Python file (62 KB)
#: takes 10 ms to parse whole here and 1-2 ms after a one-word change.
_DOCUMENT_TREES: dict[str, tuple[str, bytes, Tree]] = {}


def document_tree(text: str, language_id: str) -> Tree | None:
    """The syntax tree of a whole document (`text` encoded as UTF-8: its offsets are bytes),
    re-parsed from the last one of its grammar where it is kept; None without a grammar or
    over `DOCUMENT_LIMIT`."""
    name = GRAMMARS.get(language_id)
    parser = _parser(name) if name is not None else None
    if parser is None or name is None or len(text) > DOCUMENT_LIMIT:
        return None
    kept = _DOCUMENT_TREES.get(name)
    if kept is not None and kept[0] == text:
        return kept[2]
    source = text.encode("utf-8", "surrogatepass")
    if kept is None:
        tree = parser.parse(source)
    else:
        old_text, old, old_tree = kept
        prefix, suffix = common_affixes(old_text, text)
        start = len(text[:prefix].encode("utf-8", "surrogatepass"))
        tail = len(text[len(text) - suffix :].encode("utf-8", "surrogatepass"))
        tree = _reparsed(parser, old_tree, old, source, start, len(old) - tail, len(source) - tail)
    _DOCUMENT_TREES[name] = (text, source, tree)
    return tree


def tree_before(tree: Tree, text: str, start: int, inserted: str, removed: str) -> Tree:
    """The tree of `text` as it read before `inserted` (at `start`, code points) replaced
    `removed`, re-parsed from a copy of `tree` (the document's, which stays as it is): the
    code around an edit as it stood, to compare with places the edit has not reached."""
    source = text.encode("utf-8", "surrogatepass")
    old_text = text[:start] + removed + text[start + len(inserted) :]
    old = old_text.encode("utf-8", "surrogatepass")
    begin = len(text[:start].encode("utf-8", "surrogatepass"))
    in_text = begin + len(inserted.encode("utf-8", "surrogatepass"))
    in_old = begin + len(removed.encode("utf-8", "surrogatepass"))
    return _reparsed(Parser(tree.language), tree.copy(), source, old, begin, in_text, in_old)


def _reparsed(
    parser: Parser, tree: Tree, before: bytes, after: bytes, start: int, old_end: int, new_end: int
) -> Tree:
    """`after` parsed from `tree`, the tree of `before` (edited in place): `before[start:
    old_end]` became `after[start:new_end]`; tree-sitter reuses the unchanged subtrees."""
    tree.edit(
        start_byte=start,
        old_end_byte=old_end,
        new_end_byte=new_end,
        start_point=_point(after, start),
        old_end_point=_point(before, old_end),
        new_end_point=_point(after, new_end),
    )
    return parser.parse(after, tree)


def _point(source: bytes, offset: int) -> tuple[int, int]:
    """The (row, byte column) of a byte offset."""
    row = source.count(b"\n", 0, offset)
    return row, offset - (source.rfind(b"\n", 0, offset) + 1)


@functools.cache
def _inert_query(name: str) -> Query | None:
    """A query of the grammar's comment and string nodes (by `place_in`'s names)."""
    try:
        from tree_sitter_language_pack import get_language

        language = get_language(name)  # type: ignore[arg-type]  # names are checked by the call
        kinds = {
            language.node_kind_for_id(i)
            for i in range(language.node_kind_count)
            if language.node_kind_is_named(i) and language.node_kind_is_visible(i)
        }
        wanted = sorted(
            kind
            for kind in kinds
            if kind
            and ("comment" in kind or any(part in kind for part in _STRING_PARTS))
            and not any(part in kind for part in _CODE_PARTS)
            and kind.replace("_", "").isalnum()
        )
        return Query(language, " ".join(f"({kind}) @inert" for kind in wanted)) if wanted else None
    except Exception as e:  # no query means: the lexer's strings and comments
        log.warning("no string and comment query for %s: %s", name, e)
        return None


def inert_spans(tree: Tree, language_id: str) -> list[tuple[int, int, bool]] | None:
    """The outermost comments and strings of `tree`, as sorted `(start byte, end byte, is a
    string)`; None without a query for the grammar. One query in C: 2 ms on a 2,000-line file,
    run once per tree."""
    kept = _INERT_SPANS.get(language_id)
    if kept is not None and kept[0] is tree:
        return kept[1]
    name = GRAMMARS.get(language_id)
    query = _inert_query(name) if name is not None else None
    if query is None:
        return None
    nodes = QueryCursor(query).captures(tree.root_node).get("inert", [])
    spans: list[tuple[int, int, bool]] = []
    for node in sorted(nodes, key=lambda n: (n.start_byte, -n.end_byte)):
        if spans and node.start_byte < spans[-1][1]:
            continue  # a part of the string or comment before it
        spans.append((node.start_byte, node.end_byte, "comment" not in node.type))
    _INERT_SPANS[language_id] = (tree, spans)
    return spans


#: The last tree's spans per language: the same version asked about again (a client asking on
#: every cursor move, the accept command) costs no query. The tree is kept by the whole-document
#: cache anyway, so holding it here costs nothing more.
_INERT_SPANS: dict[str, tuple[Tree, list[tuple[int, int, bool]]]] = {}


def error_rows(tree: Tree) -> list[tuple[int, int]]:
    """The rows (first, last) of each ERROR or MISSING node: where the tree's answer is a guess."""
    rows: list[tuple[int, int]] = []
    stack = [tree.root_node] if tree.root_node.has_error else []
    while stack:
        item = stack.pop()
        if item.is_error or item.is_missing:
            rows.append((item.start_point.row, item.end_point.row))
        elif item.has_error:
            stack.extend(item.children)
    return rows
