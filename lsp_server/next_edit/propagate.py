"""Next edits without a model: the last edit made again at the other places where it is due.

`propagate(text, group, language_id=...)` answers in milliseconds on any model, local or
remote: a rename `count` -> `total`, a changed literal `8080` -> `9090`, a changed string
literal, a keyword or argument added, a parameter or modifier removed, several names replaced
at once, whole lines inserted between the same two lines or removed, a statement wrapped in a
guard, and the same rewrite of a call whose receiver differs. Where the language has a
grammar (`postprocess/syntax.py`), the document's tree (re-parsed incrementally) gives the
scope and the strings and comments; where it has none, or an error on a line makes the tree a
guess there, indentation and the lexer's rules (`_INERT`) do. Steps, each with its reason:

1. Nothing for a group that undoes an earlier one, for a substitution the user reverted, or
   for a group that no longer matches the text (stale). (A word still being typed is the
   editor's to hold back: `editor.half_typed`.)
2. The substitution is widened to whole tokens: the words the change touches (`count` ->
   `counter` is a word replaced, not "er" added), less whole tokens both sides share. An edit
   inside a string literal substitutes the whole literal (a string's prefix, `br"`, is code).
   A change that adds or removes line breaks is not a substitution (steps 6 and 7 take it). A
   change that only adds or drops tokens, on either side of the old ones (`2` -> `2,
   strict=True`, `def` -> `async def`, `x` -> `f(x)`), or that changes a constant with no
   identity (`None`, `True`) says nothing on its own about where else it belongs, so its
   pattern grows to be exact: a keyword before a name is added before its calls (`await
   fetch(`), where the tree has one only where the same kind of node stands (a constructor's
   `A(`, not `new A(`); else the call or bracket around it with the name before it (`foo(1,
   2)`, `function (key)`); else the whole line (`def f(x):`), which then matches whole lines
   only; where there is a tree, only where the same kind of node stands as stood at the edited
   place before the edit. A place that already reads as the new side is skipped. An old side
   of only punctuation and keywords (`==` -> `!=`, `try` -> `if`) is propagated only as a
   comparison linters fix everywhere: with the constant after it (`== None` -> `is None`) or
   into an identity after a call of the same function (`type(a) == B` -> `type(a) is B`).
3. Scope: the enclosing function (else block) from `blocks.enclosing_scope`. An edit on the
   block's header (a definition's name or parameters) reaches the whole document when the old
   tokens do not occur in the block's body (a renamed function: its callers are outside). A
   name reaches the whole document unless the block binds it (a local, a parameter), less the
   functions that declare a variable of that name of their own (by the tree); a word of prose
   does too. A name changed into one the edited function already declares (`e` -> `exc` under
   `except ... as exc`) while the old name is still declared there is one reference pointed
   elsewhere: nothing. A lone literal keeps to its block, unless it was a phrase. Several
   tokens (a call, an expression, a phrase or version in prose) are one thing wherever they
   stand: the whole document. Code written in a string (a template's `{{.Usage}}`, not a
   docstring, not an f-string's or template literal's interpolation) keeps to that string.
   An edit outside any block reaches the whole document.
4. Matches: exact occurrences of the old side starting and ending at token boundaries, with
   the same "after a dot" as the edited place (`self.count` is not `count`) except that a
   method's `def load` and its calls `self.load` are one name, never overlapping the place
   just edited, and never inside a string or comment unless the edit was in one; a phrase or
   number changed in prose only in prose; where tokens were only dropped from a function's
   header (a parameter), not at a function whose body still uses the dropped name.
5. Each match becomes a minimal `ProposedEdit` (common prefix and suffix trimmed), nearest to
   the edit first, non-overlapping, at most `MAX_PROPOSALS`.
6. When the substitution finds nothing: a `#` making a member private goes before its
   `this.` uses (`_made_private`); tokens only added or only removed are anchored
   (`_anchored`): the same text on both sides of the edit point (back to the nearest name, to
   the called name inside brackets, to the whole group after a closed bracket, else the line's
   start; forward to the nearest name, else the line's end, and for a deletion in code no
   further than a string's opening quote, which must open there too), the same node kinds
   there where the tree has them as at the edited place before the edit, in prose a token on
   both sides, and for an insertion the same strings after it on the line; never inside a
   word (`e` -> `exc` is a rename); whole lines inserted go between the nearest other pair
   of the same two lines, the line after them a comment where it was one (`_lines_added`);
   whole lines removed (or a line's
   content) are removed where the same lines stand again, at any depth (`_lines_removed`);
   an import line inserted that binds what another import line binds removes that one
   (`_import_moved`); a parameter removed from a definition removes its argument from the
   calls (`_arguments_dropped`); a statement's optional `;` added or removed goes to every
   statement end (`_statement_ends`, JavaScript and TypeScript); Java's type arguments
   removed from a constructor call go at its type's other constructor calls (`_diamond`); a
   trailing comma added after a multi-line list's last item, or removed before a closer on
   its line, goes at the others (`_trailing_commas`); tokens removed that name something on
   their own (`(object)`, `, baseUri`, `.Context()`) are removed where they stand in the same
   kind of node, in a call's arguments the same function's, whatever their neighbours are
   named (`_piece_removed`); an argument added first or last to a call is added at the same
   end of that function's other calls with as many arguments (`_argument_added`).
   Rust's format arguments written into their string (`"{}", x` -> `"{x}"`) are written so
   at the document's other format calls (`_format_args_inlined`). Before these: a comment on
   one line edited, dropped from a line of code or added to one, goes at the comments that
   read as it read, or the lines that read alike (`_comment_edited`); punctuation added to or
   dropped from a string's end goes at the strings passed in the same place to the same
   function (`_string_end_edited`); `node:` before one of Node's built-in modules goes before
   the others (`_node_protocol`). Rust's `pub` added or dropped is left to each item.
7. Several names replaced in one change (a selection retyped, a multi-cursor edit) are split
   by a token diff into renames (`_split`), each propagated as in steps 3 to 5, only when the
   diff is nothing but two or more names each replaced everywhere by one new name.
8. A replacement where one name differs (`Base.setup(self, cfg)` -> `super().setup(cfg)`, then
   `Other.setup(self, cfg)`) is made where every other lexeme matches exactly, the varying
   name carried into the new side where it stood there (`_analogous`).
9. Code replaced with line breaks added or removed (a statement wrapped in a guard, two
   statements made one) is made again at the nearest place where the same whole lines stand,
   at any depth, the new lines re-indented there (`_restructured`).
10. An edit within a line that no rule above reads (an operator changed, `;` made `()`) is
   made again on the other lines that read exactly as that line read (`_line_replayed`).
11. Text replaced or removed that nothing above reads is made again at the one other place
   whose surroundings read most as the edited place's did (`_context_replayed`).
12. A change that a formatter wrapped in line breaks (an argument added and its call split
   over lines) is taken as the change alone when steps 2 to 11 find nothing for the whole
   (`_reflowed`).

Measured with `timeit` (median of 30) on a 2,000-line Python file of 200 ten-line functions, on
2 CPU cores shared with other work, with the Python tree: a local's rename in one function,
0.8 ms; a top-level name's rename with 400 uses (64 proposed), 2.1 ms; each of the two asked in
turn, so that every call re-parses the changed text and queries its strings and comments, 6.5
ms. Without a tree: 1.5 ms, 2.0 ms and 1.8 ms. The tree's query of strings and comments (2 ms
here) runs once per tree; a name's uses in other functions are checked nearest first, no
further than the proposals kept (the 400-use rename took 9.8 ms before). bench/next_edit.py's
target is under 20 ms on a 2,000-line file.
"""

from __future__ import annotations

import bisect
import keyword
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from functools import cached_property
from itertools import accumulate

from tree_sitter import Node, Tree

from engine.text import common_affixes, common_prefix_length, common_suffix_length, split_lines
from lsp_server.blocks import enclosing_scope, scope_at
from lsp_server.next_edit.history import EditGroup
from lsp_server.postprocess.lexer import slash_comments
from lsp_server.postprocess.syntax import (
    FUNCTION_TYPES,
    document_tree,
    error_rows,
    inert_spans,
    tree_before,
)

#: Proposals returned at most: an editor shows one at a time and jumps to the next; more than
#: this many uses of one name in a scope is a mass rename, the editor's own rename's business.
MAX_PROPOSALS = 64

_WORD = re.compile(r"\w")
_TOKEN = re.compile(r"\w+|[^\w\s]")
_NAME = re.compile(r"[^\W\d]\w*")
_QUOTES = "\"'`"
#: A string literal in double or single quotes on one line, escapes and all (by text, not tree).
_QUOTED = r""""(?:\\.|[^"\\\r\n])*"|'(?:\\.|[^'\\\r\n])*'"""
#: A string literal that is one name of two letters or more, its prefix aside.
_SYMBOL = re.compile(r"""(?:[A-Za-z]{0,2})(["'`])[^\W\d]\w+\1""")

#: Words that are structure, not things: a substitution of only these and punctuation
#: (`try` -> `if x:`, `is` -> `==`) names nothing whose other uses it could find. Python's
#: reserved words, which are rarely names in the other languages either.
_KEYWORDS = frozenset(keyword.kwlist) - {"None", "True", "False"}

#: The other languages' words that declare or qualify, never names there: `let` made `const`
#: in one declaration is that declaration's (measured on commits, bench/next_edit_commits.py:
#: proposed at a file's every `let`). Not `fn` or `func`, which name variables in the others, nor
#: `interface`, whose Go `interface{}` -> `any` is due everywhere.
_DECLARING_WORDS = frozenset(
    {
        "let",
        "const",
        "var",
        "function",
        "mut",
        "pub",
        "impl",
        "struct",
        "enum",
        "public",
        "private",
        "protected",
        "static",
        "final",
        "void",
        "new",
        "typeof",
        "instanceof",
        "extends",
        "implements",
        "throws",
        "readonly",
        "abstract",
    }
)

#: Constants with no identity of their own: one `None` changed says nothing about the other
#: hundred (measured on release diffs, bench/next_edit.py: a default `None` -> `"/"` was
#: proposed at every other parameter's `None`), so their pattern grows to be exact, as an
#: insertion's does.
_CONSTANTS = frozenset({"None", "True", "False", "null", "nil", "true", "false", "undefined"})

#: A class's own receiver before a name: `self.load(` calls the method `def load(`.
_OWN = re.compile(r"(?<![\w.])(?:self|cls|this)\.\Z")

# Strings and comments, in one left-to-right pass: the first to start wins, so a `#` inside
# a string stays in the string. The same rules as `postprocess/lexer.py`: `#` comments when
# followed by a space, `#` or `!`; `//` and `/* */` unless the document reads as Python;
# Python's triple quotes; backticks span lines; `"` and `'` end at their line; `'a` after `&`
# or `<` is a Rust lifetime.
_HASH_COMMENT = r"\#(?=[\s#!]|\Z)[^\r\n]*"
_SLASH_COMMENTS = r"//[^\r\n]*|/\*(?s:.*?)(?:\*/|\Z)"
_STRINGS = (
    r'"""(?s:\\.|.)*?(?:"""|\Z)'
    r"|'''(?s:\\.|.)*?(?:'''|\Z)"
    r'|"(?:\\.|[^"\\\r\n])*"?'
    r"|(?<![&<])'(?:\\.|[^'\\\r\n])*'?"
    r"|(?<=[&<])'(?![A-Za-z_]\w*(?![\w']))(?:\\.|[^'\\\r\n])*'?"
    r"|`(?:\\.|[^`\\])*`?"
)
# The lookahead lets the regular expression engine skip plain code a character at a time
# without trying every alternative there: it made the scan of a 2,000-line file 4x faster.
_INERT = {
    True: re.compile(
        f"(?=[#/\"'`])(?:(?P<comment>{_HASH_COMMENT}|{_SLASH_COMMENTS})|(?P<string>{_STRINGS}))"
    ),
    False: re.compile(f"(?=[#\"'`])(?:(?P<comment>{_HASH_COMMENT})|(?P<string>{_STRINGS}))"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProposedEdit:
    """Replace `start`..`end` (code points of the current text) with `text`."""

    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class _Inert:
    """The strings and comments of a text: sorted, non-overlapping spans."""

    starts: list[int]
    ends: list[int]
    strings: frozenset[tuple[int, int]]
    # Where the tree has an error (sorted spans of whole lines), the lexer's answer instead.
    lexed: _Inert | None = None
    lows: tuple[int, ...] = ()
    highs: tuple[int, ...] = ()

    @classmethod
    def of(cls, text: str, tree: Tree | None = None, language_id: str = "") -> _Inert:
        """By the syntax tree where there is one and it has no error; else by the lexer's
        rules (`_INERT`). Where the tree has errors, the lexer's spans on those lines replace
        the tree's."""
        spans = inert_spans(tree, language_id) if tree is not None else None
        if spans is None or tree is None:
            return cls._lexed(text)
        offsets = _Offsets(text)
        starts, ends, strings = [], [], set()
        for start_byte, end_byte, is_string in spans:
            start, end = offsets.char(start_byte), offsets.char(end_byte)
            if is_string and (prefix := _STRING_PREFIX.match(text, start, end)) is not None:
                start = prefix.end()  # `br"..."`: the prefix is code, as for the lexer
            starts.append(start)
            ends.append(end)
            if is_string:
                strings.add((start, end))
        rows = error_rows(tree)
        if not rows:
            return cls(starts, ends, frozenset(strings))
        lines = split_lines(text)
        line_starts = list(accumulate(map(len, lines), initial=0))
        last = len(lines) - 1
        doubted = sorted(
            (line_starts[min(a, last)], line_starts[min(b, last) + 1]) for a, b in rows
        )
        return cls(
            starts,
            ends,
            frozenset(strings),
            lexed=cls._lexed(text),
            lows=tuple(lo for lo, _ in doubted),
            highs=tuple(hi for _, hi in doubted),
        )

    @classmethod
    def _lexed(cls, text: str) -> _Inert:
        starts, ends, strings = [], [], set()
        for match in _INERT[slash_comments(text)].finditer(text):
            starts.append(match.start())
            ends.append(match.end())
            if match.lastgroup == "string":
                strings.add(match.span())
        return cls(starts, ends, frozenset(strings))

    def is_string(self, start: int, end: int) -> bool:
        """Whether `start`..`end` is exactly a string literal."""
        if (lexed := self._doubted(start, end)) is not None:
            return lexed.is_string(start, end)
        return (start, end) in self.strings

    def _doubted(self, start: int, end: int) -> _Inert | None:
        """The lexer's spans where `start`..`end` is on a line where the tree has an error."""
        i = bisect.bisect_right(self.lows, end) - 1
        return self.lexed if i >= 0 and self.highs[i] >= start else None

    def around(self, start: int, end: int) -> tuple[int, int] | None:
        """The span that holds all of `start`..`end`, strictly inside its delimiters' reach."""
        if (lexed := self._doubted(start, end)) is not None:
            return lexed.around(start, end)
        i = bisect.bisect_right(self.starts, start) - 1
        if i >= 0 and self.starts[i] < start and end <= self.ends[i]:
            return self.starts[i], self.ends[i]
        return None

    def touches(self, start: int, end: int) -> bool:
        """Whether any string or comment overlaps `start`..`end`."""
        if (lexed := self._doubted(start, end)) is not None:
            return lexed.touches(start, end)
        i = bisect.bisect_right(self.starts, end - 1) - 1
        return i >= 0 and self.ends[i] > start


class _Offsets:
    """Byte offsets of UTF-8 `text` to code points: the tree's offsets are bytes."""

    def __init__(self, text: str) -> None:
        self.bytes_at: list[int] = []  # the byte offset after each non-ASCII character
        self.extra: list[int] = []  # the bytes over one counted up to it
        if text.isascii():
            return
        more = 0
        for match in _NON_ASCII.finditer(text):
            more += len(match[0].encode("utf-8", "surrogatepass")) - 1
            self.bytes_at.append(match.end() + more)
            self.extra.append(more)

    def char(self, byte: int) -> int:
        i = bisect.bisect_right(self.bytes_at, byte) - 1
        return byte - (self.extra[i] if i >= 0 else 0)

    def byte(self, char: int, text: str) -> int:
        return char if not self.bytes_at else len(text[:char].encode("utf-8", "surrogatepass"))


class _Before:
    """The document as it read before the edit group, its offsets and its tree, each made once
    when first asked for: the places the edit has not reached still read so, and the rules
    that compare them with the edited place share one re-parse."""

    def __init__(self, text: str, group: EditGroup, tree: Tree | None) -> None:
        self._now, self._group, self._now_tree = text, group, tree

    @cached_property
    def text(self) -> str:
        group = self._group
        return self._now[: group.start] + group.removed + self._now[group.end :]

    @cached_property
    def offsets(self) -> _Offsets:
        return _Offsets(self.text)

    @cached_property
    def tree(self) -> Tree | None:
        if self._now_tree is None:
            return None
        group = self._group
        return tree_before(self._now_tree, self._now, group.start, group.inserted, group.removed)


_NON_ASCII = re.compile(r"[^\x00-\x7f]")
#: A string literal's prefix letters (`br"`, `f'`, `u8"`, `r#"`), which the tree counts as the
#: string's: a change of `br` to `rb` is a change of code.
_STRING_PREFIX = re.compile(r"[A-Za-z]\w{0,2}(?=[\"'`#])")


@dataclass(frozen=True, slots=True)
class _Substitution:
    start: int  # where the new side sits in the current text
    end: int
    old: str
    new: str
    in_string: bool  # the whole string literal is substituted
    in_inert: bool  # the edit was inside a string or a comment
    whole_line: bool = False  # the pattern is a line's content: it matches whole lines only
    # An operator changed after a call (`type(a) == B` -> `type(a) is B`): the call's name,
    # which the operand before every match must be a call of too.
    after_call: str | None = None
    # A keyword added before a call's name: where there is a tree, a match must be the same
    # kind of node as the edited place, held by the same kind (`A(` of a constructor, not of
    # `new A(`).
    shaped: bool = False
    # Tokens added or dropped, a pattern grown to be exact (a call, a line): where there is a
    # tree, a match must be the node the pattern was at the edited place before the edit (a
    # callback's `function (key)`, not a method's).
    exact: bool = False


def propagate(
    text: str,
    group: EditGroup,
    *,
    reverted: frozenset[tuple[str, str]] = frozenset(),
    language_id: str = "",
) -> tuple[ProposedEdit, ...]:
    """The same change as `group` (the document's last edit group) at the other places of
    `text` (the current text) that still hold its old tokens, nearest first. `language_id`
    picks the syntax tree (none: the lexer's and indentation's rules)."""
    # 1. Undone, reverted or stale.
    if group.undoes or group.substitution in reverted:
        return ()
    if text[group.start : group.end] != group.inserted:
        return ()
    found = _propagated(text, group, reverted, language_id)
    if not found and (core := _reflowed(text, group)) is not None:
        # A formatter's line breaks around the change (an argument added and its call
        # wrapped): the change itself, where the other places still fit on their lines.
        found = _propagated(text, core, reverted, language_id)
    return found


def _propagated(
    text: str, group: EditGroup, reverted: frozenset[tuple[str, str]], language_id: str
) -> tuple[ProposedEdit, ...]:
    """Steps 2 to 11 for one group."""
    tree = document_tree(text, language_id) if language_id else None
    inert = _Inert.of(text, tree, language_id)
    before = _Before(text, group, tree)
    # 2. Whole tokens, an exact pattern.
    sub = _substitution(text, group, inert)
    if sub is not None and (sub.old, sub.new) not in reverted:
        found = _matches(text, sub, inert, tree, before)
        if found:
            return _proposed(sub, found, sub.start)
    # Steps 6 and 7: what the substitution leaves silent.
    taken_back = group.substitution in reverted
    found_edits: tuple[ProposedEdit, ...] = ()
    if not taken_back:
        found_edits = (
            _comment_edited(text, group, inert)
            or _string_end_edited(text, group, inert, tree)
            or _node_protocol(text, group, inert, language_id)
        )
    if found_edits:
        return found_edits
    if language_id == "rust" and _RUST_VISIBILITY.fullmatch(group.removed or group.inserted):
        # Which items a crate exports is decided item by item (measured on commits,
        # bench/next_edit_commits.py: of 4 cases in 3 crates that added or dropped `pub` or
        # `(crate)`, 1 hit and 3 false edits; Java's `public` dropped went 5 hits to 2).
        return ()
    if not group.removed or not group.inserted:
        found_edits = _made_private(text, group, inert, language_id) or _anchored(
            text, group, inert, tree, before, reverted
        )
        if not found_edits and not group.inserted and not taken_back:
            found_edits = _arguments_dropped(text, group, tree)
        if not found_edits and not group.removed and not taken_back:
            found_edits = _argument_added(text, group, tree)
        if not found_edits and not taken_back:
            found_edits = (
                _statement_ends(text, group, tree, language_id)
                or _diamond(text, group, inert, language_id)
                or _modifier_dropped(text, group, tree, language_id)
                or _trailing_commas(text, group, inert, tree)
                or _piece_removed(text, group, inert, tree, before)
            )
    else:
        found_edits = _format_args_inlined(text, group, inert, language_id) or _split(
            text, group, inert, tree, reverted
        )
    if not found_edits and group.removed and group.inserted:
        if _breaks(group.removed) != _breaks(group.inserted):
            # Step 9: the same code restructured across lines elsewhere.
            found_edits = _restructured(text, group, inert, reverted)
        else:
            # Step 8: the same change where one name differs.
            found_edits = _analogous(text, group, inert, reverted)
    if not found_edits and not taken_back:
        # Step 10: a line's edit that no rule reads, made again on its copies.
        found_edits = _line_replayed(text, group, inert)
    if not found_edits and not taken_back:
        # Step 11: text replaced or removed, made again where its surroundings read alike.
        found_edits = _context_replayed(text, group, inert)
    return found_edits


#: How far the surroundings of an edit are compared on each side, and how many characters
#: the place's surroundings and the replaced text must share with the edited place's for
#: `_context_replayed` to propose it (measured on commits, bench/next_edit_commits.py, all
#: six sets: 17 more hits and no more false edits at 32; 21 and 4 at 16; with insertions
#: too, 22 and 7, so insertions are left out).
_CONTEXT_WINDOW, _CONTEXT_SHARED = 48, 32


def _context_replayed(text: str, group: EditGroup, inert: _Inert) -> tuple[ProposedEdit, ...]:
    """Step 11: text replaced or removed that no rule reads, made again at the one other
    place where the same text stands in the surroundings most like the edited place's as it
    read (the characters shared just before and after, the replaced text counted), when
    they share at least `_CONTEXT_SHARED`: `'var'` made `'const'` in the one other loop
    header alike, `&` dropped before the same argument. Never what is the place's own
    (`_own_value`), never an insertion (its anchors are
    `_anchored`'s: on commits this proposed `.post` and `.failing` in the wrong tests)."""
    removed, inserted = group.removed, group.inserted
    if not removed or _breaks(removed) or _breaks(inserted):
        return ()
    if _own_value(text, group):
        return ()
    at, end = group.start, group.end
    was = text[:at] + removed + text[end:]
    left = was[max(0, at - _CONTEXT_WINDOW) : at]
    right = was[at + len(removed) : at + len(removed) + _CONTEXT_WINDOW]
    in_inert = inert.around(at, end) is not None
    best: tuple[int, int, int] | None = None
    p = text.find(removed)
    while p >= 0:
        q = p + len(removed)
        if not (p <= end and q >= at) and (inert.around(p, q) is not None) == in_inert:
            left_shared = common_suffix_length(left, text[max(0, p - _CONTEXT_WINDOW) : p])
            right_shared = common_prefix_length(right, text[q : q + _CONTEXT_WINDOW])
            shared = left_shared + right_shared + len(removed)
            if min(left_shared, right_shared) >= 2 and shared >= _CONTEXT_SHARED:
                candidate = (shared, -abs(p - at), p)
                best = candidate if best is None or candidate > best else best
        p = text.find(removed, p + 1)
    if best is None:
        return ()
    start = best[2]
    return (ProposedEdit(start=start, end=start + len(removed), text=inserted),)


_NUMBER = re.compile(r"[-+]?\d[\w.]*")
_KEYWORD_ARGUMENT = re.compile(r"\s*,?\s*[^\W\d]\w*\s*=(?!=)")
#: What a line must hold for its copies to take its edit: its names and strings, its tokens.
_REPLAYED_THINGS, _REPLAYED_TOKENS = 2, 4


def _own_value(text: str, group: EditGroup) -> bool:
    """Whether the edit changed what belongs to its place alone, which no copy of the place
    takes: a number (a test's timeout), or one name, the edit widened to the whole words it
    touches (`e` -> `exc`, reported as `xc` added; `t` made `_` where one function no longer
    uses it), which the rename rules have judged."""
    if _NUMBER.fullmatch(group.removed.strip()):
        return True
    old = _widened(text, group)[2]
    return _NAME.fullmatch(old) is not None and old not in _KEYWORDS


def _widened(text: str, group: EditGroup) -> tuple[int, int, str]:
    """The edit widened to the whole words it touches: where that span starts and ends in
    the current text, and what it read before the edit."""
    a, b = group.start, group.end
    while a > 0 and _WORD.match(text[a - 1]):
        a -= 1
    while b < len(text) and _WORD.match(text[b]):
        b += 1
    return a, b, text[a : group.start] + group.removed + text[group.end : b]


def _line_replayed(text: str, group: EditGroup, inert: _Inert) -> tuple[ProposedEdit, ...]:
    """An edit within one line of code that no rule reads (an operator changed, a variable
    pointed elsewhere, `;` made `()`), made again on the other lines that read exactly as
    that line read, at any depth: copies of a line share its fix (`response.end(
    request.headers.cookie || '')` made `?? ''` in each test that has it)."""
    if _breaks(group.removed) or _breaks(group.inserted) or _KEYWORD_ARGUMENT.match(group.inserted):
        # An argument by keyword added to one call is that call's option (a test's
        # `storage_class(foo="bar", baz=None)`), as `_argument_added` has it.
        return ()
    if _own_value(text, group):
        return ()
    at, end = group.start, group.end
    line_start = text.rfind("\n", 0, at) + 1
    line_end = _line_end(text, end)
    now = text[line_start:line_end]
    was = text[line_start:at] + group.removed + text[end:line_end]
    lead = len(was) - len(was.lstrip())
    content = was.strip()
    if (
        _things(content) < _REPLAYED_THINGS
        or len(_TOKEN.findall(content)) < _REPLAYED_TOKENS
        or not _in_code(inert, line_start + lead, line_start + len(now.rstrip()))
    ):
        return ()
    offset = at - line_start - lead  # where the edit starts within the line's content
    found: list[ProposedEdit] = []
    k = 0
    for line in split_lines(text):
        stripped = line.strip()
        if stripped == content and k != line_start:
            first = k + len(line) - len(line.lstrip())
            if _in_code(inert, first, first + len(stripped)) and not inert.touches(
                first, first + 1
            ):
                start = first + offset
                found.append(
                    ProposedEdit(start=start, end=start + len(group.removed), text=group.inserted)
                )
        k += len(line)
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


#: The text between tokens: `re.split` by it gives the blanks between them.
_GAPS = re.compile(r"\w+|[^\w\s]")


def _reflowed(text: str, group: EditGroup) -> EditGroup | None:
    """The one change of tokens in `group` when the rest of it only moved line breaks and
    indentation (`f(a, b)` -> `f(\n    a, b, strict=True\n)`: `, strict=True` added); None
    when it changed tokens in more than one place, or blanks within a line outside that
    change (inside a string they are its text)."""
    old = list(_TOKEN.finditer(group.removed))
    new = list(_TOKEN.finditer(group.inserted))
    if not (_breaks(group.removed) or _breaks(group.inserted)):
        return None
    matcher = SequenceMatcher(None, [m[0] for m in old], [m[0] for m in new], autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(changes) != 1:
        return None
    _, i1, i2, j1, j2 = changes[0]
    # The change with the blanks between it and its neighbouring tokens.
    old_lo = old[i1 - 1].end() if i1 else 0
    old_hi = old[i2].start() if i2 < len(old) else len(group.removed)
    new_lo = new[j1 - 1].end() if j1 else 0
    new_hi = new[j2].start() if j2 < len(new) else len(group.inserted)
    # Everywhere else, only blanks that hold a line break on one side may differ, within
    # brackets (a call wrapped) or after the last token (a blank line after a statement): a
    # line moved down (`from typing` -> `\n    from typing_extensions`) is no formatting.
    applied = group.removed[:old_lo] + group.inserted[new_lo:new_hi] + group.removed[old_hi:]
    head = text[text.rfind("\n", 0, group.start) + 1 : group.start]
    depth = sum(head.count(c) for c in "([{") - sum(head.count(c) for c in ")]}")
    gaps = zip(_GAPS.split(applied), _GAPS.split(group.inserted), strict=False)
    for n, (was, now) in enumerate(gaps):
        if n:
            token = new[n - 1][0]
            depth += (token in "([{") - (token in ")]}")
        if was != now and ("\n" not in was + now or (depth <= 0 and n < len(new))):
            return None
    removed, inserted = group.removed[old_lo:old_hi], group.inserted[new_lo:new_hi]
    prefix, suffix = common_affixes(removed, inserted)
    removed = removed[prefix : len(removed) - suffix]
    inserted = inserted[prefix : len(inserted) - suffix]
    if _breaks(removed) or _breaks(inserted) or not (removed.strip() or inserted.strip()):
        return None
    if (removed, inserted) == (group.removed, group.inserted):
        return None
    return replace(group, start=group.start + new_lo + prefix, removed=removed, inserted=inserted)


def _matches(
    text: str, sub: _Substitution, inert: _Inert, tree: Tree | None, unedited: _Before | None = None
) -> list[tuple[int, int]]:
    """Steps 3 and 4: where `sub.old` stands again, in its scope."""
    # 3. Scope.
    reach = _scope(text, sub, tree)
    lo, hi, block = reach.lo, reach.hi, reach.block
    whole_content = _whole_content(text, sub, inert)
    if sub.in_inert and not sub.in_string and not whole_content and _code_like(sub.old):
        # Code written in a string (a template's `{{.Usage}}`, a selector, a query) keeps to
        # that string: other strings are other templates (measured on commits,
        # bench/next_edit_commits.py: a template's `UsageText` changed in one of six).
        # Not a docstring: its `foo_bar` and `:class:` are prose about code, found again in
        # the other docstrings (measured on release diffs, bench/next_edit.py: 88% of the
        # same-substitution hunks reproduced with them, 71% without).
        span = inert.around(sub.start, sub.end)
        if (
            span is not None
            and inert.is_string(*span)
            and text[span[0] : span[0] + 3] not in ('"""', "'''")
            and not _interpolated(text, span[0], sub.start)
        ):
            lo, hi = max(lo, span[0]), min(hi, span[1])
    if _retargeted(text, sub, reach):
        return []
    # 4. Matches.
    # A class imported by its full name (Java's `import a.b.Name;`) is the bare `Name` below;
    # a Go method declared is `x.Name` below.
    receiver = _NAME.fullmatch(sub.old) is not None and _receiver_method(text, sub.start)
    after_dot = receiver or (
        text[sub.start - 1 : sub.start] == "."
        and not _IMPORTED_CLASS.match(text, text.rfind("\n", 0, sub.start) + 1)
    )
    # A method renamed at its definition or at a call through `self.`: the other side too.
    method = _NAME.fullmatch(sub.old) is not None and (
        _own_attribute(text, sub.start) or _method_definition(text, sub.start)
    )
    is_name = _NAME.fullmatch(sub.old) is not None
    starts_word = bool(_WORD.match(sub.old))
    ends_word = bool(_WORD.match(sub.old[-1]))
    # A place that already reads as the new side (`await fetch(` when `await` was added).
    added_before = sub.new[: -len(sub.old)] if sub.new.endswith(sub.old) else ""
    added_after = sub.new[len(sub.old) :] if sub.new.startswith(sub.old) else ""
    shape = _node_shape(sub, unedited)
    offsets = _Offsets(text) if shape is not None else None
    found: list[tuple[int, int]] = []
    at = text.find(sub.old, lo, hi)
    while at >= 0:
        end = at + len(sub.old)
        before = text[at - 1 : at]
        ok = (
            not (at < sub.end and end > sub.start)
            and (
                (before == ".") == after_dot
                or (method and (_own_attribute(text, at) or _method_definition(text, at)))
                or (receiver and _receiver_method(text, at))
            )
            and not (starts_word and _WORD.match(before))
            and not (ends_word and _WORD.match(text[end : end + 1]))
            and not (added_before and text.endswith(added_before, 0, at))
            and not (added_after and text.startswith(added_after, end))
        )
        if ok and sub.whole_line:
            ok = _line_content(text, at, end)
        if ok and sub.after_call is not None:
            ok = _call_before(text, at, inert) == sub.after_call
        if ok and shape is not None and tree is not None and offsets is not None:
            byte = offsets.byte(at + shape[0], text)
            ok = _kinds(_starting(tree.root_node, byte))[: len(shape[1])] == shape[1]
        if ok and sub.in_string:
            ok = inert.is_string(at, end)
        elif ok and whole_content:
            ok = inert.is_string(at - 1, end + 1)
        elif ok and not sub.in_inert and (sub.whole_line or _holds_strings(sub)):
            # A whole line's code may hold whole strings (`BasePath extends string = '/'`).
            ok = _in_code(inert, at, end)
        elif ok and not sub.in_inert:
            ok = not inert.touches(at, end)
        elif ok and not is_name:
            ok = inert.around(at, end) is not None  # a phrase or a number of prose: in prose
        if ok:
            found.append((at, end))
        at = text.find(sub.old, at + 1, hi)
    if tree is not None and not sub.in_inert:
        found = _still_used(text, sub, found, tree)
    if is_name and not sub.in_inert and tree is not None and (lo, hi) != block:
        return _not_local_elsewhere(text, sub.old, found, tree, block, reach.line_starts, sub.start)
    return found


def _whole_content(text: str, sub: _Substitution, inert: _Inert) -> bool:
    """Whether `sub` replaced all that a one-quoted string literal holds (a message rewritten,
    `"Could not find ... java.lang.Double."`): the same message elsewhere is the same thing,
    whatever code-like words it holds, and only a whole literal is one."""
    return (
        sub.in_inert
        and not sub.in_string
        and text[sub.start - 1 : sub.start] in _QUOTES
        and inert.is_string(sub.start - 1, sub.end + 1)
    )


def _holds_strings(sub: _Substitution) -> bool:
    """Whether a substitution of code (not grown around added tokens) holds string literals:
    two asserts' arguments swapped with their messages are found again with the same
    messages, which must then stand whole in the match as they stood at the edit."""
    return (
        not sub.exact
        and any(q in sub.old for q in _QUOTES)
        # A literal alone is a value, not code; so is a key looked up (`["exception"]` made
        # `.get("exception")` at one lookup of several, measured on release diffs,
        # bench/next_edit.py held out): code around the strings must name something.
        and _NAME.search(_STRING_VALUE.sub("", sub.old)) is not None
    )


#: A line importing one class by its dotted name (Java, Kotlin, Scala).
_IMPORTED_CLASS = re.compile(r"[ \t]*import[ \t]+(?:static[ \t]+)?[\w.]+\.\w+;?[ \t]*$", re.M)

_CODE_MARKS = re.compile(r"[a-z][A-Z]|_|\.[A-Za-z]|[{}()\[\]$=<>|]")


def _interpolated(text: str, string_start: int, at: int) -> bool:
    """Whether `at` may be code interpolated into the string starting at `string_start`: an
    f-string's (`f"{repr(c)}"`), or inside a template literal's `${`...`}`."""
    if text[max(0, string_start - 2) : string_start].lower().endswith(("f", "fr", "rf")):
        return True
    head = text[string_start:at]
    return head.rfind("${") > head.rfind("}")


def _code_like(old: str) -> bool:
    """Whether `old`, found in a string, reads as code rather than prose: a camelCase or
    snake_case name, a field after a dot, brackets or operators (a version, `2.4`, is
    prose's)."""
    return _CODE_MARKS.search(old) is not None


def _retargeted(text: str, sub: _Substitution, reach: _Reach) -> bool:
    """Whether a name was changed into one the edited function already declares (`e` -> `exc`
    under `except ... as exc`): one reference pointed at another variable, not a rename,
    whose new name would be taken (measured on commits, bench/next_edit_commits.py: the
    loop's `e` was proposed as `exc` at its every use). Not for an attribute: a call switched
    to another existing method (`r.matchesLetter()` -> `r.matchesAsciiAlpha()`) is due at
    the other calls."""
    if sub.in_inert or not (_NAME.fullmatch(sub.old) and _NAME.fullmatch(sub.new)):
        return False
    if text[sub.start - 1 : sub.start] == ".":
        return False
    before = text[: sub.start] + sub.old + text[sub.end :]
    lo, hi = reach.block
    if not reach.head:
        return False  # no function holds the edit
    shift = len(sub.old) - (sub.end - sub.start)
    # A rename under way is no retargeting: its declaration already carries the new name and
    # the old one is declared nowhere in the function any more (each accepted proposal of it
    # is such a change: VS Code applies them one at a time).
    return _declares(before, sub.new, lo, reach.head, hi + shift) and _declares(
        text, sub.old, lo, reach.head, hi
    )


def _node_shape(sub: _Substitution, before: _Before | None) -> tuple[int, tuple[str, ...]] | None:
    """For a pattern grown to be exact, where in the old side its node starts (for a keyword
    added before a call, where a token both sides share starts: its first, else the start of
    the shared end) and the kinds of the node starting there at the edited place before the
    edit, with its parent's (and for a call, the parent's parent); None where nothing is
    compared."""
    if sub.in_inert or not (sub.shaped or sub.exact) or before is None or before.tree is None:
        return None  # the tree before the edit is parsed only for a pattern that needs it
    in_old, depth = 0, 2
    if sub.shaped:
        # A keyword before a call: the call, with what holds it (`void setItem()` is not due
        # at `await setItem()`).
        prefix, suffix = common_affixes(sub.old, sub.new)
        if not prefix and not suffix:
            return None
        in_old, depth = (0 if prefix else len(sub.old) - suffix), 3
    byte = before.offsets.byte(sub.start + in_old, before.text)
    return in_old, _kinds(_starting(before.tree.root_node, byte))[:depth]


def _still_used(
    text: str,
    sub: _Substitution,
    found: list[tuple[int, int]],
    tree: Tree,
) -> list[tuple[int, int]]:
    """`found` less the function headers whose body still uses a name the change drops from
    them (a parameter removed): without it the body would not compile (measured on commits,
    bench/next_edit_commits.py: `rc` removed from the one callback that ignored it was
    proposed at five that use it). By the tree only."""
    new_tokens = _TOKEN.findall(sub.new)
    rest = iter(_TOKEN.findall(sub.old))
    if not all(token in rest for token in new_tokens):
        return found  # tokens replaced, not only dropped: a rename keeps its uses
    new_names = set(new_tokens)
    dropped = {
        t
        for t in _TOKEN.findall(sub.old)
        if _NAME.fullmatch(t) and t not in _KEYWORDS and t not in new_names
    }
    if not dropped or not found:
        return found
    patterns = [re.compile(rf"(?<![\w.]){re.escape(name)}(?!\w)") for name in dropped]
    offsets = _Offsets(text)
    kept: list[tuple[int, int]] = []
    for at, end in found:
        body = _body_after(tree.root_node, offsets.byte(at, text))
        if body is not None:
            lo, hi = offsets.char(body[0]), offsets.char(body[1])
            # The match itself may reach into the body (a closure's `|| vec![]`).
            if any(not at <= m.start() < end for p in patterns for m in p.finditer(text, lo, hi)):
                continue
        kept.append((at, end))
    return kept


def _body_after(root: Node, byte: int) -> tuple[int, int] | None:
    """The body (bytes) of the innermost function whose header holds `byte` (its name or
    parameters, before its body); None where no function's header does."""
    node: Node | None = root.descendant_for_byte_range(byte, byte)
    while node is not None:
        if node.type in FUNCTION_TYPES:
            body = node.child_by_field_name("body")
            if body is None or byte >= body.start_byte:
                return None
            return body.start_byte, body.end_byte
        node = node.parent
    return None


def _not_local_elsewhere(
    text: str,
    name: str,
    found: list[tuple[int, int]],
    tree: Tree,
    block: tuple[int, int],
    line_starts: list[int],
    near: int,
) -> list[tuple[int, int]]:
    """`found` less the uses outside the edited `block` that are in a function binding `name`
    of its own: a parameter or a local there is another thing of the same name (measured on
    commits, bench/next_edit_commits.py: `e` fixed to `exc` in one handler was proposed in
    every function with an `e` of its own). By the tree only; without one, all are kept."""
    kept: list[tuple[int, int]] = []
    binds: dict[tuple[int, int], bool] = {}
    last = len(line_starts) - 2
    # Nearest first, and no further than the proposals kept: a name with 400 uses costs what
    # one with `MAX_PROPOSALS` does.
    for at, end in sorted(found, key=lambda span: abs(span[0] - near)):
        if len(kept) == MAX_PROPOSALS:
            break
        if block[0] <= at < block[1]:
            kept.append((at, end))
            continue
        row = min(bisect.bisect_right(line_starts, at) - 1, last)
        column = len(text[line_starts[row] : at].encode("utf-8", "surrogatepass"))
        scope = scope_at(tree, row, column)
        if scope is not None:
            key = (scope.start, scope.end)
            if key not in binds:
                lo, hi = line_starts[scope.start], line_starts[min(scope.end + 1, last + 1)]
                head = line_starts[min(scope.header + 1, last + 1)]
                binds[key] = _declares(text, name, lo, head, hi)
            if binds[key]:
                continue
        kept.append((at, end))
    return kept


def _proposed(
    sub: _Substitution, found: list[tuple[int, int]], near: int
) -> tuple[ProposedEdit, ...]:
    """5. Minimal, nearest to `near` first (matches of one string never overlap)."""
    prefix, suffix = common_affixes(sub.old, sub.new)
    replacement = sub.new[prefix : len(sub.new) - suffix]
    found.sort(key=lambda span: abs(span[0] - near))
    return tuple(
        ProposedEdit(start=at + prefix, end=end - suffix, text=replacement)
        for at, end in found[:MAX_PROPOSALS]
    )


def _substitution(text: str, group: EditGroup, inert: _Inert) -> _Substitution | None:
    """The group widened to whole tokens and, for an insertion of tokens, an exact pattern
    (step 2); None when there is nothing to propagate."""
    a, b = group.start, group.end
    span = inert.around(a, b)
    in_inert = span is not None
    quotes = any(q in group.removed or q in group.inserted for q in "\"'`")
    if span is not None and inert.is_string(*span) and not quotes and _one_word(text, span):
        i, j = span  # a changed one-word literal ("light", "GET"): the whole literal
        old = text[i:a] + group.removed + text[b:j]
        return _Substitution(i, j, old, text[i:j], in_string=True, in_inert=True)
    i, j = a, b
    while i > 0 and (_WORD.match(text[i - 1]) or (in_inert and _hyphen(text, i - 1))):
        i -= 1
    while j < len(text) and (_WORD.match(text[j]) or (in_inert and _hyphen(text, j))):
        j += 1
    old, new = text[i:a] + group.removed + text[b:j], text[i:j]
    old_tokens, new_tokens = _TOKEN.findall(old), _TOKEN.findall(new)
    if old_tokens == new_tokens:
        return None  # only whitespace changed
    if _breaks(group.inserted) != _breaks(group.removed):
        # Lines added, removed, split or joined: new code or a restructuring, not a token
        # substitution; its tokens say nothing about where else it belongs (measured on
        # release diffs: a comment line added above one assert was proposed above its 12
        # twins, a class name replaced by two statements at its 14 other uses).
        return None
    n = len(old_tokens)
    # Tokens added around the old ones (`x` -> `f(x)`, `2` -> `2, strict=True`) or dropped.
    adds = _holds(new_tokens, old_tokens)
    drops = _holds(old_tokens, new_tokens)
    if (
        adds
        and n
        and new_tokens[-n:] == old_tokens
        and _NAME.fullmatch(old)
        and text[j : j + 1] == "("
    ):
        j += 1  # a keyword before a call (`await fetch(`): the pattern is the call
        old, new = text[i:a] + group.removed + text[b:j], text[i:j]
        return _Substitution(i, j, old, new, False, in_inert, shaped=True)
    elif adds or drops or (old in _CONSTANTS and not in_inert):
        i, j, whole_line = _exact_pattern(text, i, j, inert)
        old, new = text[i:a] + group.removed + text[b:j], text[i:j]
        if i == a and j == b:
            return None
        if _names_something(old, in_inert):
            return _Substitution(i, j, old, new, False, in_inert, whole_line=whole_line, exact=True)
        return None
    else:
        # A whole token that widening brought in on either side is shared, no part of the
        # change (two insertions read as one span: `dumps(inf))` -> `dumps(inf, a=1), a=1)`
        # changed `)`, not `inf)`).
        old_rest = group.removed + text[b:j]
        if i < a and not _WORD.match(old_rest[:1]) and not _WORD.match(text[a : a + 1]):
            i = a
        old_head = text[i:a] + group.removed
        if b < j and not _WORD.match(old_head[-1:]) and not _WORD.match(text[b - 1 : b]):
            j = b
        old, new = text[i:a] + group.removed + text[b:j], text[i:j]
    if not _names_something(old, in_inert):
        return None if in_inert else _operator(text, i, j, old, inert)
    return _Substitution(i, j, old, new, in_string=False, in_inert=in_inert)


def _hyphen(text: str, k: int) -> bool:
    """Whether `text[k]` is a hyphen between two words: in prose, `files-without-matches` (an
    option's name) is one word, not `matches`."""
    return (
        text[k] == "-"
        and k > 0
        and _WORD.match(text[k - 1]) is not None
        and _WORD.match(text[k + 1 : k + 2]) is not None
    )


def _operator(text: str, i: int, j: int, old: str, inert: _Inert) -> _Substitution | None:
    """An operator (or keyword) replaced at `i`..`j`, as a pattern with what makes it due:
    the constant it compares with (`== None` -> `is None`), else the function whose result
    it compares into an identity (`type(a) == B` -> `type(a) is B`), the two comparisons
    linters ask to change everywhere; None for any other operator (`a == b` -> `a != b` is
    one place's logic)."""
    constant = _CONSTANT_AFTER.match(text, j)
    if constant is not None:
        end = constant.end()
        return _Substitution(i, end, old + text[j:end], text[i:end], False, False)
    name = _call_before(text, i, inert)
    if name is None or text[i:j].split() not in (["is"], ["is", "not"]):
        # The other way (`fn(a) is B` -> `fn(a) == B`) is one comparison's meaning changed.
        return None
    return _Substitution(i, j, old, text[i:j], False, False, after_call=name)


#: The (dotted) name of a called function, right before its opening bracket.
_DOTTED = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*")
_CALLED = re.compile(rf"(?<![\w.]){_DOTTED.pattern}\Z")

#: A constant right after an operator, on its line.
_CONSTANT_AFTER = re.compile(rf"[ \t]*(?:{'|'.join(sorted(_CONSTANTS))})(?!\w)")


def _call_before(text: str, at: int, inert: _Inert) -> str | None:
    """The name of the call whose closing bracket stands right before `at` (blanks aside)
    on the same line: `type` for `type(s["b"]) ==`; None when there is none."""
    k = at
    while k > 0 and text[k - 1] in " \t":
        k -= 1
    if text[k - 1 : k] != ")" or inert.touches(k - 1, k):
        return None
    depth = 0
    for m in range(k - 1, -1, -1):
        char = text[m]
        if char in "\r\n":
            return None
        if inert.touches(m, m + 1):
            continue
        if char in ")]}":
            depth += 1
        elif char in "([{":
            depth -= 1
            if depth == 0:
                name = _CALLED.search(text, max(0, m - 80), m)
                return name[0] if name else None
    return None


def _holds(tokens: list[str], run: list[str]) -> bool:
    """Whether `run` stands in `tokens` as consecutive tokens (an empty run always does)."""
    n = len(run)
    return any(tokens[k : k + n] == run for k in range(len(tokens) - n + 1))


def _breaks(text: str) -> int:
    """How many line breaks `text` holds."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def _names_something(old: str, in_inert: bool) -> bool:
    """Whether `old` holds a name, a number or a string: a thing whose other uses the same
    change is due at. Punctuation and keywords alone are structure (`==` -> `!=`,
    `try` -> `if`); in prose every word is a word."""
    for token in _TOKEN.findall(old):
        if token[0] in _QUOTES or (
            _WORD.match(token) and (in_inert or token not in _KEYWORDS | _DECLARING_WORDS)
        ):
            return True
    return False


def _exact_pattern(text: str, i: int, j: int, inert: _Inert) -> tuple[int, int, bool]:
    """`i`..`j` grown to the innermost bracket pair on its line around it, with the name
    before the opener; else to the line's content (step 2). The third value: whether it is
    the line's content."""
    line_lo = max(text.rfind("\n", 0, i), text.rfind("\r", 0, i)) + 1
    line_hi = _line_end(text, j)
    depth, opener = 0, -1
    for k in range(i - 1, line_lo - 1, -1):
        char = text[k]
        if char in ")]}" and not inert.touches(k, k + 1):
            depth += 1
        elif char in "([{" and not inert.touches(k, k + 1):
            if depth == 0:
                opener = k
                break
            depth -= 1
    if opener >= 0:
        closer = _closer(text, opener, j, line_hi, inert)
        if closer >= 0:
            start = opener
            while start > line_lo and text[start - 1] in " \t":
                start -= 1  # `function (key)`: its word is the group's, as a callee's is
            if start == opener or _WORD.match(text[start - 1 : start]):
                while start > line_lo and _WORD.match(text[start - 1]):
                    start -= 1
            else:
                start = opener
            return start, closer + 1, False
    content = text[line_lo:line_hi]
    lead = len(content) - len(content.lstrip())
    return line_lo + lead, line_lo + len(content.rstrip()), True


def _closer(text: str, opener: int, j: int, line_hi: int, inert: _Inert) -> int:
    """Where the bracket opened at `opener` closes, at or after `j` on its line, or -1."""
    depth = 0
    for k in range(opener + 1, line_hi):
        char = text[k]
        if char in "([{" and not inert.touches(k, k + 1):
            depth += 1
        elif char in ")]}" and not inert.touches(k, k + 1):
            if depth == 0:
                return k if k >= j else -1
            depth -= 1
    return -1


@dataclass(frozen=True, slots=True, kw_only=True)
class _Reach:
    """Step 3's answer: the part of the text searched, the edited block (the whole text outside
    any) and where its header ends (0 outside any), as offsets; each line's start, then the
    text's end."""

    lo: int
    hi: int
    block: tuple[int, int]
    head: int
    line_starts: list[int]


def _scope(text: str, sub: _Substitution, tree: Tree | None) -> _Reach:
    """The part of `text` searched (step 3)."""
    lines = split_lines(text)
    offsets = list(accumulate(map(len, lines), initial=0))  # each line's start, then the end
    edit_line = bisect.bisect_right(offsets, sub.start) - 1
    block = enclosing_scope(text, min(edit_line, len(lines) - 1), tree)
    whole = (0, len(text))
    if block is None:
        return _Reach(lo=0, hi=len(text), block=whole, head=0, line_starts=offsets)
    lo, hi = offsets[block.start], offsets[min(block.end + 1, len(lines))]
    header = block.header
    head = offsets[min(header + 1, len(lines))]

    def reach(span: tuple[int, int]) -> _Reach:
        return _Reach(lo=span[0], hi=span[1], block=(lo, hi), head=head, line_starts=offsets)

    if edit_line <= header and text.find(sub.old, head, hi) < 0:
        return reach(whole)
    # Judged on the text before the edit: the edited place may be the binding itself.
    before = text[: sub.start] + sub.old + text[sub.end :]
    shift = len(sub.old) - (sub.end - sub.start)
    local = edit_line <= header or _binds(before, sub.old, lo, hi + shift)
    if _NAME.fullmatch(sub.old):
        # A name the block does not bind (a parameter, an assignment, a loop variable) is
        # defined elsewhere: an exception class, an attribute, a module's global. Its other
        # uses are anywhere in the file, as a rename of it is (measured on release diffs,
        # bench/next_edit.py). So is a word of prose (in a string or a comment): a typo fixed
        # once is fixed everywhere.
        return reach(whole if sub.in_inert or not local else (lo, hi))
    if sub.in_string and _SYMBOL.fullmatch(sub.old):
        # A string that names something (`'sexpr'`, `"GET"`) is a constant of the program,
        # compared with in other functions too (measured on commits,
        # bench/next_edit_commits.py: 5 more hits in 972 cases, no false edit more, and
        # bench/next_edit.py unchanged).
        return reach(whole)
    if (sub.in_string and not any(c.isspace() for c in sub.old)) or (
        not sub.in_inert and sub.after_call is None and len(_TOKEN.findall(sub.old)) == 1
    ):
        # A literal keeps to its block: the same number elsewhere is usually another number.
        # A string that was a phrase (`'application/json; charset=UTF-8'`) is as distinctive
        # as several tokens: below.
        return reach((lo, hi))
    # Several tokens (a call with its arguments, an expression, a phrase or a version of
    # prose, `removed in 2.4`) are one thing wherever they stand: a sentence repeated in
    # each function's docstring, a statement repeated in each test (measured on release
    # diffs, bench/next_edit.py).
    return reach(whole)


def _line_content(text: str, at: int, end: int) -> bool:
    """Whether `text[at:end]` is all of its line but the indentation and trailing blanks."""
    line_start = max(text.rfind("\n", 0, at), text.rfind("\r", 0, at)) + 1
    line_end = _line_end(text, end)
    return not text[line_start:at].strip() and not text[end:line_end].strip()


_DEFINITION = re.compile(r"(?<![\w.])def\s+\Z")


#: A Go method's declaration up to its name: `func (mx *Mux) `.
_RECEIVER_METHOD = re.compile(r"(?m:^)func\s*\([^()\n]*\)\s*\Z")


def _receiver_method(text: str, at: int) -> bool:
    """Whether the name at `at` is declared as a Go method (`func (mx *Mux) Chain(`): its
    uses are `x.Chain`, never a bare `Chain`, which is another function."""
    line_start = text.rfind("\n", 0, at) + 1
    return _RECEIVER_METHOD.search(text, line_start, at) is not None


def _own_attribute(text: str, at: int) -> bool:
    """Whether the name at `at` is reached through the class's own receiver (`self.load`)."""
    return _OWN.search(text, max(0, at - 6), at) is not None


def _method_definition(text: str, at: int) -> bool:
    """Whether the name at `at` is defined by an indented `def` (a method, not a module's
    function of the same name)."""
    line_start = max(text.rfind("\n", 0, at), text.rfind("\r", 0, at)) + 1
    head = text[line_start:at]
    return head[:1] in (" ", "\t") and _DEFINITION.search(head) is not None


def _one_word(text: str, span: tuple[int, int]) -> bool:
    """Whether the string literal at `span` holds no white space: a value (a key, a mode, a
    method) whose change is a change of that value; in prose, the change is a word's (a typo
    fixed in a message, found again in other messages and comments)."""
    i, j = span
    return not any(char.isspace() for char in text[i + 1 : j - 1])


def _binds(text: str, name: str, lo: int, hi: int) -> bool:
    """Whether `text[lo:hi]` (a block, its header included) gives `name` a value of its own:
    a parameter in its header, an assignment, a declaration or a loop variable."""
    pattern = _BINDING.get(name)
    if pattern is None:
        word = re.escape(name)
        pattern = re.compile(
            rf"(?<![\w.]){word}\s*(?::=|\+=|-=|\*=|/=|=(?!=)|:(?!:)|,[^\n]*=(?!=)|\)\s*:)"
            rf"|\b(?:let|const|var|mut|auto|for|in|as|def|fn|func|function|class)\s+{word}\b"
            rf"|[(,]\s*(?:&\s*)?(?:mut\s+)?{word}\s*[,):=]"
        )
        if len(_BINDING) >= _KEPT_PATTERNS:
            _BINDING.clear()
        _BINDING[name] = pattern
    return pattern.search(text, lo, hi) is not None


def _declares(text: str, name: str, lo: int, head: int, hi: int) -> bool:
    """Whether the function at `lo`..`hi` (its header ending at `head`) declares `name`
    itself: a parameter in its header, or a plain assignment, loop variable or declaration in
    it. Stricter than `_binds`, which also takes a call's argument or a keyword argument for
    a binding: that only narrows the edited block's own scope, where this would drop uses
    (`pytest.raises(Exception, ...)` is no binding of `Exception`)."""
    patterns = _DECLARING.get(name)
    if patterns is None:
        patterns = _declaring(name)
        if len(_DECLARING) >= _KEPT_PATTERNS:
            _DECLARING.clear()
        _DECLARING[name] = patterns
    parameter, local = patterns
    return parameter.search(text, lo, head) is not None or local.search(text, lo, hi) is not None


def _declaring(name: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """`_declares`'s two patterns for `name`: a parameter, a local's declaration."""
    word = re.escape(name)
    parameter = re.compile(rf"[(,]\s*(?:&\s*)?(?:mut\s+)?{word}\s*[,):=]")
    local = re.compile(
        rf"(?m:^)[ \t]*{word}\s*(?::=|=(?!=))"
        rf"|(?<![\w.]){word}\s*(?:,\s*\w+\s*)*:="
        rf"|,\s*{word}\s*(?:,\s*\w+\s*)*:="
        rf"|\b(?:let|const|var|mut|auto|for|as)\s+{word}\b"
    )
    return parameter, local


#: Each name's `_declares` patterns, compiled once.
_DECLARING: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {}

#: Each name's binding pattern, compiled once (renames repeat while the user types), and how
#: many are kept.
_BINDING: dict[str, re.Pattern[str]] = {}
_KEPT_PATTERNS = 64


#: Tokens an anchor takes at most on each side of an inserted or deleted text.
_ANCHOR_TOKENS = 4
#: Ancestors of the nodes at an anchor compared between the edited place and a candidate.
_ANCHOR_DEPTH = 2


def _anchored(
    text: str,
    group: EditGroup,
    inert: _Inert,
    tree: Tree | None,
    before: _Before,
    reverted: frozenset[tuple[str, str]],
) -> tuple[ProposedEdit, ...]:
    """Step 6: tokens only added (`await `, `;`, a modifier, an argument) or only removed (a
    parameter, a cast, a modifier), made again where the same anchors stand on both sides: the
    tokens before the edit point back to a name (else the line's start with the same
    indentation), and after it up to a name (else the line's end), exact; where there is a
    tree, the innermost nodes ending before and starting after the point have the same kinds
    and parents. Never where the new text already stands. Whole lines added: `_lines_added`;
    other line breaks added or removed are not propagated (their anchors would be other
    lines)."""
    added = group.inserted
    piece = added or group.removed
    if not piece.strip() or (group.removed, added) in reverted:
        return ()
    if _breaks(piece):
        return _lines_added(text, group, inert) if added else _lines_removed(text, group, inert)
    at = group.start
    after = group.end if added else group.start
    if _joins_word(before.text, at, at + len(group.removed), piece):
        return ()  # a word changed (`e` -> `exc`), a rename's business, not tokens added
    left = _left_anchor(text, at, inert)
    # A deletion's removed text is its distinctive part; an insertion's place is found by
    # its anchors alone, and a string after it is a statement repeated with its values.
    right = _right_anchor(text, after, None if added else inert)
    if not added and not left[1] and not right[1]:
        return _lines_removed(text, group, inert)  # a line's content, its line left blank
    if not any(_WORD.match(t) and t not in _KEYWORDS for t in _TOKEN.findall(left[0] + right[0])):
        return ()  # punctuation and keywords alone anchor nothing: `()` is everywhere
    in_inert = inert.around(at, after) is not None
    if in_inert and not (left[1] and right[1]):
        # In prose a line's start or end is no anchor: a ` \` added at the end of one
        # docstring line is not due at every line ending in the same word.
        return ()
    pattern = left[0] + ("" if added else piece) + right[0]
    string_after = _string_starts(inert, after + len(right[0]))
    offsets = _Offsets(text) if tree is not None else None
    sides = (bool(left[0].strip()), bool(right[0].strip()))
    # The edited place as it read before the edit, as the other places still read: an
    # inserted `dyn ` made `error::Error` a trait object's, which it is not elsewhere yet.
    shape = (
        _shape(before.tree, before.offsets, before.text, at, at + len(group.removed), sides)
        if tree is not None
        else None
    )
    found: list[tuple[int, int]] = []
    k = text.find(pattern)
    while k >= 0 and len(found) < 4 * MAX_PROPOSALS:
        q = k + len(left[0])  # the point, at the candidate
        q_after = q + (0 if added else len(piece))
        ok = (
            not (k <= after and k + len(pattern) >= at)
            and (left[1] or _line_start_at(text, k))
            and (right[1] or _line_end_at(text, k + len(pattern)))
            and not (added and (text.startswith(added, q) or text.endswith(added, 0, q)))
            and not (left[0] and _WORD.match(left[0][0]) and _WORD.match(text[k - 1 : k]))
            and not (
                right[0]
                and _WORD.match(right[0][-1])
                and _WORD.match(text[k + len(pattern) : k + len(pattern) + 1])
            )
        )
        if ok:
            ok = (inert.around(k, k + len(pattern)) is not None) == in_inert
            if ok and not in_inert and added:
                # Anchors holding a string are a statement repeated with its values (a test's
                # `storage_class(foo="bar")`, given an argument in one test alone, measured on
                # release diffs, bench/next_edit.py).
                # So is a line that goes on with other strings (`elif c == 'N'`, `'I'`, `'t'`).
                ok = not inert.touches(k, k + len(pattern)) and _strings_after(
                    text, inert, k + len(pattern)
                ) == _strings_after(text, inert, after + len(right[0]))
            elif ok and not in_inert:
                # A removed string is the distinctive part (`markdownit('full', x)`): whole
                # strings may stand in the pattern, none cut by its ends or the point.
                ok = not any(_cuts(inert, p) for p in (k, q, q_after, k + len(pattern)))
        if ok and string_after:
            ok = _string_starts(inert, k + len(pattern))
        if ok and shape is not None:
            ok = _shape(tree, offsets, text, q, q_after, sides) == shape
        if ok:
            found.append((q, q_after))
        k = text.find(pattern, k + 1)
    found.sort(key=lambda span: abs(span[0] - at))
    return tuple(
        ProposedEdit(start=q, end=q_after, text=added) for q, q_after in found[:MAX_PROPOSALS]
    )


#: Words a comment dropped from the end of a line of code must hold to be dropped elsewhere:
#: a bare `# type: ignore` is dropped where the checker no longer needs it, one line at a time
#: (measured on commits, bench/next_edit_commits.py: 3 false edits in 3 cases with 2 words).
_DROPPED_COMMENT_WORDS = 3
#: A type checker's silencing of one line: it is written and dropped where that line's types
#: call for it, never at lines alike (measured on release diffs, bench/next_edit.py held out:
#: pytest's `type: ignore[arg-type]` dropped from one `metafunc.parametrize` line was proposed
#: at three more, `type:ignore[unreachable]` added to one call after four more).
_CHECKER_IGNORE = re.compile(
    r"\b(?:type|pyright|mypy)\s*:\s*ignore\b|@ts-(?:ignore|expect-error)\b"
)
#: A comment on one line, whole, as the lexer reads one: a linter's `noqa: E721`, `eslint-...`.
_ONE_LINE_COMMENT = re.compile(rf"(?:{_HASH_COMMENT}|//[^\r\n]*|/\*[^\r\n]*?\*/)")


def _comment_edited(text: str, group: EditGroup, inert: _Inert) -> tuple[ProposedEdit, ...]:
    """A comment on one line changed (`# noqa` -> `# noqa: F821`), or removed from the end of
    a line of code (`  # noqa: E721`): the same at the other comments that read as it read,
    whole (a linter's directive is written and dropped alike wherever it stands); a comment
    removed only where it ends a line of code, as it did, one that starts with the same token
    (`def`, `assert`): `@property  # type: ignore[override]` is another line's business than
    `def f(self) -> T:  # type: ignore[override]` (measured on release diffs,
    bench/next_edit.py: 2 false edits in flask's app.py)."""
    at, end = group.start, group.end
    if _breaks(group.removed) or _breaks(group.inserted) or (group.removed and group.inserted):
        # Words replaced in a comment are its prose (a type comment's `Tuple[str, int]` made
        # `int` in one method of two alike), the substitution's business.
        return ()
    if not group.inserted and (dropped := _comment_dropped(text, group, inert)) is not None:
        return dropped
    comment = group.inserted.lstrip(" \t")
    if (
        not group.removed
        and comment != group.inserted
        and _ONE_LINE_COMMENT.fullmatch(comment)
        and _line_end_at(text, end)
        and _is_comment(inert, end - len(comment), end)
    ):
        return _comment_appended(text, at, group.inserted, inert)
    span = inert.around(at, end)
    if span is None or inert.is_string(*span) or _breaks(text[span[0] : span[1]]):
        return ()
    lo, hi = span
    was = text[lo:at] + group.removed + text[end:hi]
    if _ONE_LINE_COMMENT.fullmatch(was) is None:
        return ()
    offset = at - lo
    found = []
    k = text.find(was)
    while k >= 0:
        if not (k <= at < k + len(was)) and _is_comment(inert, k, k + len(was)):
            found.append(
                ProposedEdit(
                    start=k + offset, end=k + offset + len(group.removed), text=group.inserted
                )
            )
        k = text.find(was, k + 1)
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


#: What a string's end may gain or lose at every call alike: a line break's or tab's escape,
#: one mark (a full stop), a file's suffix (`"passing-sync"` -> `"passing-sync.fixture.js"`).
#: Anything else is data: a test's expected text, a template's tags, a code writer's `$Z`, a
#: package's name (measured on commits, bench/next_edit_commits.py: 4 false edits in 4
#: cases with any punctuation-led piece allowed).
_STRING_END = re.compile(r"(?:\\[nrt])+|[.:;,!?/]|(?:\.\w+)*\.[A-Za-z0-9]{1,4}")


def _string_end_edited(
    text: str, group: EditGroup, inert: _Inert, tree: Tree | None
) -> tuple[ProposedEdit, ...]:
    """Punctuation added at or dropped from the end of a string passed to a call: the same at
    the strings passed in the same place (the same argument of the same function, or the same
    keyword) to its other calls, by the tree."""
    piece = group.inserted or group.removed
    if tree is None or (group.removed and group.inserted) or not _STRING_END.fullmatch(piece):
        return ()
    at, end = group.start, group.end
    span = inert.around(at, end)
    if span is None or not inert.is_string(*span):
        return ()
    lo, hi = span
    quote = text[hi - 1]
    if quote not in _QUOTES or text[lo] != quote or text[hi - 2 : hi] == quote * 2 or end != hi - 1:
        return ()
    offsets = _Offsets(text)
    slot = _argument_slot(tree, offsets.byte(lo, text), offsets.byte(hi, text))
    if slot is None:
        return ()
    found: list[ProposedEdit] = []
    for call in _nodes(tree.root_node):
        if call.type not in _CALLS or call.start_byte == slot[0].start_byte:
            continue
        arguments = call.child_by_field_name("arguments")
        if arguments is None or _callee_text(call, arguments) != slot[1]:
            continue
        for value in _slot_values(arguments, slot[2]):
            s, e = offsets.char(value.start_byte), offsets.char(value.end_byte)
            if not inert.is_string(s, e) or text[s] != quote or text[e - 1] != quote:
                continue
            content_end = e - 1
            if group.inserted and not text.endswith(piece, s + 1, content_end):
                found.append(ProposedEdit(start=content_end, end=content_end, text=piece))
            elif group.removed and text.endswith(piece, s + 1, content_end):
                k = content_end - len(piece)
                found.append(ProposedEdit(start=k, end=content_end, text=""))
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


def _argument_slot(tree: Tree, lo: int, hi: int) -> tuple[Node, bytes, int | bytes] | None:
    """The call that the string at bytes `lo`..`hi` is passed to, its callee's text, and the
    place: the argument's index, or the keyword's name."""
    node: Node | None = tree.root_node.descendant_for_byte_range(lo, hi)
    while node is not None and not (node.start_byte <= lo and node.end_byte >= hi):
        node = node.parent
    while (
        node is not None and node.parent is not None and node.parent.byte_range == node.byte_range
    ):
        node = node.parent
    holder = node.parent if node is not None else None
    place: int | bytes
    if holder is not None and holder.type == "keyword_argument":
        name = holder.child_by_field_name("name")
        if name is None or name.text is None:
            return None
        place, holder = name.text, holder.parent
    elif holder is not None and node is not None:
        kept = [a for a in holder.named_children if a.type != "comment"]
        found = [n for n, a in enumerate(kept) if a.byte_range == node.byte_range]
        if not found:
            return None
        place = found[0]
    else:
        return None
    call = holder.parent if holder is not None else None
    if (
        holder is None
        or call is None
        or call.type not in _CALLS
        or call.child_by_field_name("arguments") != holder
    ):
        return None
    return call, _callee_text(call, holder), place


def _callee_text(call: Node, arguments: Node) -> bytes:
    """What a call calls, as written before its arguments: `fmt.Fprintf`, `pytest.raises`."""
    return (call.text or b"")[: arguments.start_byte - call.start_byte].strip()


def _slot_values(arguments: Node, place: int | bytes) -> list[Node]:
    """What a call's `arguments` pass in `place`: the argument at that index (comments
    aside), or the value given that keyword's name."""
    kept = [a for a in arguments.named_children if a.type != "comment"]
    if isinstance(place, int):
        return kept[place : place + 1]
    return [
        value
        for a in kept
        if a.type == "keyword_argument"
        and (name := a.child_by_field_name("name")) is not None
        and name.text == place
        and (value := a.child_by_field_name("value")) is not None
    ]


#: Rust's visibility, or its restriction, added or dropped as a piece.
_RUST_VISIBILITY = re.compile(r"\s*(?:pub\s*)?(?:\((?:crate|super|self|in [\w:]+)\))?\s*")

#: Node's built-in modules, which `node:` may name (Node's `module.builtinModules`): a
#: package's name (`supertest`) may not take it.
_NODE_BUILTINS = frozenset(
    {
        "assert",
        "assert/strict",
        "async_hooks",
        "buffer",
        "child_process",
        "cluster",
        "console",
        "constants",
        "crypto",
        "dgram",
        "diagnostics_channel",
        "dns",
        "dns/promises",
        "domain",
        "events",
        "fs",
        "fs/promises",
        "http",
        "http2",
        "https",
        "inspector",
        "inspector/promises",
        "module",
        "net",
        "os",
        "path",
        "path/posix",
        "path/win32",
        "perf_hooks",
        "process",
        "punycode",
        "querystring",
        "readline",
        "readline/promises",
        "repl",
        "stream",
        "stream/consumers",
        "stream/promises",
        "stream/web",
        "string_decoder",
        "sys",
        "timers",
        "timers/promises",
        "tls",
        "trace_events",
        "tty",
        "url",
        "util",
        "util/types",
        "v8",
        "vm",
        "wasi",
        "worker_threads",
        "zlib",
    }
)
#: A module named by `require`, `import` or `from`, in quotes (group `module`).
_MODULE_NAMED = re.compile(
    r"""(?:\brequire\(\s*|\bfrom\s+|\bimport\s+)(["'])(?P<module>[\w/:.-]+)\1"""
)


def _node_protocol(
    text: str, group: EditGroup, inert: _Inert, language_id: str
) -> tuple[ProposedEdit, ...]:
    """`node:` written before one built-in module's name (`require('path')` ->
    `require('node:path')`): before the other built-in modules' names the file requires or
    imports, and no package's."""
    if language_id not in _SCRIPTS or group.removed or group.inserted != "node:":
        return ()
    line_start = text.rfind("\n", 0, group.start) + 1
    edited = [
        m
        for m in _MODULE_NAMED.finditer(text, line_start, _line_end(text, group.start))
        if m.start("module") == group.start and m["module"][len("node:") :] in _NODE_BUILTINS
    ]
    if not edited:
        return ()
    found: list[ProposedEdit] = []
    for match in _MODULE_NAMED.finditer(text):
        at = match.start("module")
        if (
            match["module"] in _NODE_BUILTINS
            and at != group.start
            and inert.is_string(match.start(1), match.end())
        ):
            found.append(ProposedEdit(start=at, end=at, text="node:"))
    found.sort(key=lambda e: abs(e.start - group.start))
    return tuple(found[:MAX_PROPOSALS])


def _comment_dropped(text: str, group: EditGroup, inert: _Inert) -> tuple[ProposedEdit, ...] | None:
    """A whole comment removed with the blanks before it from the end of a line of code: the
    same comment dropped from the lines that start as that line did; None when the removed
    text is no whole comment (a comment's words dropped are `_comment_edited`'s)."""
    at = group.start
    piece = group.removed
    comment = piece.lstrip(" \t")
    if (
        _ONE_LINE_COMMENT.fullmatch(comment) is None
        or not _line_end_at(text, at)
        or not text[text.rfind("\n", 0, at) + 1 : at].strip()
        or inert.around(at, at) is not None
    ):
        return None
    if sum(
        bool(_WORD.match(t)) for t in _TOKEN.findall(comment)
    ) < _DROPPED_COMMENT_WORDS or _CHECKER_IGNORE.search(comment):
        return ()
    lead = len(piece) - len(comment)
    first_token = _TOKEN.search(text, text.rfind("\n", 0, at) + 1)
    found: list[ProposedEdit] = []
    k = text.find(comment)
    while k >= 0:
        line_start = text.rfind("\n", 0, k) + 1
        token = _TOKEN.search(text, line_start, k)
        if (
            _line_end_at(text, k + len(comment))
            and token is not None
            and first_token is not None
            and token[0] == first_token[0]
            and _is_comment(inert, k, k + len(comment))
        ):
            blanks = len(text[line_start:k]) - len(text[line_start:k].rstrip(" \t"))
            found.append(
                ProposedEdit(start=k - min(blanks, max(lead, 1)), end=k + len(comment), text="")
            )
        k = text.find(comment, k + 1)
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


def _comment_appended(text: str, at: int, added: str, inert: _Inert) -> tuple[ProposedEdit, ...]:
    """A comment added at the end of a line of code (a linter's `  # noqa: B018` after a
    bare `meta.version`): at the end of the lines that read alike, at the same depth, the
    same tokens but for the names (`meta.summary`), with no comment yet."""
    line_start = text.rfind("\n", 0, at) + 1
    code = text[line_start:at]
    if not code.strip() or inert.touches(line_start, at) or _CHECKER_IGNORE.search(added):
        return ()
    shape = _line_shape(code)
    indentation = shape[0]
    found: list[ProposedEdit] = []
    k = 0
    for line in split_lines(text):
        content = line.rstrip("\r\n")
        end = k + len(content)
        if (
            k != line_start
            and content.startswith(indentation)
            and content[len(indentation) : len(indentation) + 1] not in ("", " ", "\t")
            and _line_shape(content) == shape
            and not inert.touches(k, end)
            and not text.startswith(added, end)
        ):
            found.append(ProposedEdit(start=end, end=end, text=added))
        k += len(line)
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


def _line_shape(code: str) -> tuple[str, ...]:
    """A line of code's indentation and tokens, each name (not a keyword) as one mark."""
    stripped = code.rstrip()
    indentation = stripped[: len(stripped) - len(stripped.lstrip())]
    marks = ("\0" if _NAME.fullmatch(t) and t not in _KEYWORDS else t for t in _TOKEN.findall(code))
    return (indentation, *marks)


def _is_comment(inert: _Inert, lo: int, hi: int) -> bool:
    """Whether `lo`..`hi` is exactly a comment."""
    span = inert.around(lo + 1, lo + 1)
    return span == (lo, hi) and not inert.is_string(lo, hi)


def _joins_word(old_text: str, lo: int, hi: int, piece: str) -> bool:
    """Whether `piece`, added or removed where `old_text[lo:hi]` stands, runs into a word on
    either side: part of a word changed, not tokens."""
    return bool(
        (_WORD.match(piece[0]) and _WORD.match(old_text[lo - 1 : lo]))
        or (_WORD.match(piece[-1]) and _WORD.match(old_text[hi : hi + 1]))
    )


#: A Rust lifetime (`'s`, `'static`): no quote of a string.
_LIFETIME = re.compile(r"'[A-Za-z_]\w*(?![\w'])")
#: A function's return type written out, names or not (Rust's `-> ()`, which Clippy drops).
_RETURN_TYPE = re.compile(r"\s*->\s*\S[^{]*")


def _piece_removed(
    text: str, group: EditGroup, inert: _Inert, tree: Tree | None, before: _Before
) -> tuple[ProposedEdit, ...]:
    """Tokens removed that name something (`(object)` after a class's name, `, baseUri`
    from a constructor's arguments, `.Context()` after an argument), removed where the same
    tokens stand in the same kind of node, whatever their neighbours are named: the piece
    itself is what is distinctive. By the tree only."""
    piece = group.removed
    if (
        tree is None
        or group.inserted
        or _breaks(piece)
        or any(q in _LIFETIME.sub("", piece) for q in _QUOTES)
    ):
        return ()
    # A lifetime (`'static`, `: 's`) names a scope, whatever word it is.
    tokens = _TOKEN.findall(_LIFETIME.sub(" lifetime ", piece))
    if (
        len(tokens) < 2
        or not (
            any(_NAME.fullmatch(t) and t not in _CONSTANTS for t in tokens)
            or _RETURN_TYPE.fullmatch(piece)
        )
        or any(t in _KEYWORDS | _DECLARING_WORDS for t in tokens)
    ):
        return ()  # a keyword binds or declares (`except E as e`): that place's own
    if re.fullmatch(r"\s*\.?\w+\.?\s*", piece):
        # A qualifier (`flag.Value` -> `Value`) or a member (`main.call(` -> `main(`) is one
        # of that name's: another name's `flag.Getter` or `current.call(` is not it.
        return ()
    at = group.start
    if inert.around(at, at) is not None:
        return ()
    if _joins_word(before.text, at, at + len(piece), piece) or before.tree is None:
        return ()
    offsets = _Offsets(text)

    def shape(root: Node, lo: int, hi: int) -> tuple[str, ...]:
        node = root.named_descendant_for_byte_range(lo, max(lo, hi - 1))
        return _kinds(node)[:2]  # the node holding the piece, and what holds that

    wanted = shape(
        before.tree.root_node,
        before.offsets.byte(at, before.text),
        before.offsets.byte(at + len(piece), before.text),
    )
    # In a call's arguments, the same function's calls: `.Context()` removed from one
    # `chi.URLParam(r.Context(), ...)` is not due in `context.WithValue(r.Context(), ...)`.
    callee = _callee(text, at, inert)
    found: list[int] = []
    k = text.find(piece)
    while k >= 0 and len(found) < 4 * MAX_PROPOSALS:
        end = k + len(piece)
        if (
            _callee(text, k, inert) == callee
            and not _joins_word(text, k, end, piece)
            and not inert.touches(k, end)
            and shape(tree.root_node, offsets.byte(k, text), offsets.byte(end, text)) == wanted
        ):
            found.append(k)
        k = text.find(piece, k + 1)
    found.sort(key=lambda k: abs(k - at))
    return tuple(ProposedEdit(start=k, end=k + len(piece), text="") for k in found[:MAX_PROPOSALS])


def _callee(text: str, at: int, inert: _Inert) -> str | None:
    """The called name whose bracket is open at `at` on its line (`chi.URLParam`), if any."""
    line_start = text.rfind("\n", 0, at) + 1
    start = _callee_start(text, line_start, at, inert)
    if start is None:
        return None
    name = _DOTTED.match(text, start)
    return name[0] if name else None


#: A Rust format string and the plain names it formats, to its call's end: `"{}: {}", a, b)`.
_FORMAT_ARGS = re.compile(r'"((?:[^"\\\n]|\\.)*)"((?:\s*,\s*[A-Za-z_]\w*)+)\s*(?=\))')


#: Stands for a format string's escaped `{{` while its `{}`s are found.
_ESCAPED_BRACE = "\ue000"


def _inlined(match: re.Match[str]) -> str | None:
    """The format string of `match` with its names written in its `{}`s (`"{a}: {b}"`);
    None where the placeholders and the names do not pair up."""
    names = [name.strip() for name in match[2].split(",")[1:]]
    parts = match[1].replace("{{", _ESCAPED_BRACE).split("{}")
    if len(parts) != len(names) + 1 or "{" in match[1].replace("{{", "").replace("{}", ""):
        return None
    body = parts[0] + "".join(f"{{{n}}}" + part for n, part in zip(names, parts[1:], strict=True))
    return '"' + body.replace(_ESCAPED_BRACE, "{{") + '"'


def _format_args_inlined(
    text: str, group: EditGroup, inert: _Inert, language_id: str
) -> tuple[ProposedEdit, ...]:
    """Rust's format arguments written into the string (`println!("{}", x)` ->
    `println!("{x}")`, the fix Clippy's `uninlined_format_args` asks for at every such call):
    made at the document's other format strings whose `{}`s take plain names."""
    if language_id != "rust":
        return ()
    line_lo = text.rfind("\n", 0, group.start) + 1
    line_hi = text.find("\n", group.end)
    line_hi = len(text) if line_hi < 0 else line_hi
    new_line = text[line_lo:line_hi]
    old_line = text[line_lo : group.start] + group.removed + text[group.end : line_hi]
    if not any(
        (inlined := _inlined(m)) is not None
        and old_line[: m.start()] + inlined + old_line[m.end() :] == new_line
        for m in _FORMAT_ARGS.finditer(old_line)
    ):
        return ()
    found: list[ProposedEdit] = []
    for match in _FORMAT_ARGS.finditer(text):
        inlined = _inlined(match)
        if inlined is None or line_lo <= match.start() <= line_hi:
            continue
        if not inert.is_string(match.start(), match.start(1) + len(match[1]) + 1):
            continue
        found.append(ProposedEdit(start=match.start(), end=match.end(), text=inlined))
    found.sort(key=lambda e: abs(e.start - group.start))
    return tuple(found[:MAX_PROPOSALS])


def _in_code(inert: _Inert, lo: int, hi: int) -> bool:
    """Whether `lo`..`hi` lies in code, any strings and comments in it whole: none holds it,
    none is cut by its ends."""
    return inert.around(lo, hi) is None and not _cuts(inert, lo) and not _cuts(inert, hi)


def _cuts(inert: _Inert, at: int) -> bool:
    """Whether `at` falls strictly inside a string or comment."""
    span = inert.around(at, at)
    return span is not None and at < span[1]


def _left_anchor(text: str, at: int, inert: _Inert) -> tuple[str, bool]:
    """The text before `at` back to its nearest name token, on its line (`(str, True)`), else
    back to the line's start after the indentation (`(str, False)`: it must start a line).
    Inside brackets, back to the called name at least (`f(a, ` for an argument added after
    `a`): an argument list is that function's, and `g(a)` has other parameters (measured on
    commits, bench/next_edit_commits.py: an argument added to one of several look-alike
    helpers was proposed at all of them)."""
    line_start = max(text.rfind("\n", 0, at), text.rfind("\r", 0, at)) + 1
    head = text[line_start:at]
    tokens = list(_TOKEN.finditer(head))
    found: tuple[str, bool] = (head.lstrip(" \t"), False)
    for n, match in enumerate(reversed(tokens), 1):
        if (_NAME.fullmatch(match[0]) and match[0] not in _KEYWORDS) or n == _ANCHOR_TOKENS:
            found = (head[match.start() :], True)
            break
    callee = _callee_start(text, line_start, at, inert)
    if callee is not None and at - callee > len(found[0]) and _argument_boundary(text, at):
        return text[callee:at], True
    opener = _group_start(text, line_start, at, inert)
    if opener is not None and at - opener > len(found[0]):
        # Right after a closed bracket, the whole group: `-> None` added after one method's
        # `(self, md)` is due after the others' `(self, md)`, not after `(self, a, md)`.
        return text[opener:at], True
    return found


def _argument_boundary(text: str, at: int) -> bool:
    """Whether `at` is between a bracket's arguments: after its opener or a comma, or before a
    comma or its closer (blanks aside). Within an argument (`&mut Write` -> `&mut dyn
    Write`), what is changed is the argument's own, whichever function it is passed to."""
    head = text[:at].rstrip(" \t")
    tail = text[at:].lstrip(" \t")
    return head.endswith(("(", ",", "[", "{")) or tail.startswith((",", ")", "]", "}"))


def _group_start(text: str, line_start: int, at: int, inert: _Inert) -> int | None:
    """Where the bracket group closed right before `at` (blanks aside) opens on its line."""
    k = at
    while k > line_start and text[k - 1] in " \t":
        k -= 1
    if k == line_start or text[k - 1] not in ")]}" or inert.touches(k - 1, k):
        return None
    depth = 0
    for m in range(k - 1, line_start - 1, -1):
        char = text[m]
        if char not in "()[]{}" or inert.touches(m, m + 1):
            continue
        depth += 1 if char in ")]}" else -1
        if depth == 0:
            return m
    return None


def _callee_start(text: str, line_start: int, at: int, inert: _Inert) -> int | None:
    """Where the name stands before the innermost bracket still open at `at` on its line
    (`foo` of `foo(a, `); None where no bracket is open or no name precedes it."""
    depth = 0
    for k in range(at - 1, line_start - 1, -1):
        char = text[k]
        if char not in "()[]{}" or inert.touches(k, k + 1):
            continue
        if char in ")]}":
            depth += 1
        elif depth:
            depth -= 1
        else:
            name = _CALLED.search(text, line_start, k)
            return name.start() if name is not None else None
    return None


def _right_anchor(text: str, at: int, inert: _Inert | None = None) -> tuple[str, bool]:
    """The text after `at` up to its nearest name token on its line (`(str, True)`), else to
    the line's end, blanks aside (`(str, False)`: it must end a line). From code, up to a
    string's opening quote at most (given `inert`): what a string says is that place's value,
    not the place (`.pos()` removed before `, "Unexpected ..."` is due before the other
    messages)."""
    line_end = _line_end(text, at)
    tail = text[at:line_end]
    in_code = inert is not None and inert.around(at, at) is None
    for n, match in enumerate(_TOKEN.finditer(tail), 1):
        if in_code and inert is not None and _string_starts(inert, at + match.start()):
            return tail[: match.start()], True
        if (_NAME.fullmatch(match[0]) and match[0] not in _KEYWORDS) or n == _ANCHOR_TOKENS:
            return tail[: match.end()], True
    return tail.rstrip(" \t"), False


def _strings_after(text: str, inert: _Inert, at: int) -> list[str]:
    """The string literals from `at` to its line's end."""
    line_end = _line_end(text, at)
    i = bisect.bisect_left(inert.starts, at)
    found: list[str] = []
    while i < len(inert.starts) and inert.starts[i] < line_end:
        if inert.is_string(inert.starts[i], inert.ends[i]):
            found.append(text[inert.starts[i] : inert.ends[i]])
        i += 1
    return found


def _string_starts(inert: _Inert, at: int) -> bool:
    """Whether a string literal opens at `at`."""
    span = inert.around(at + 1, at + 1)
    return span is not None and span[0] == at and inert.is_string(*span)


def _line_end(text: str, at: int) -> int:
    """Where the line holding `at` ends: its first line break at or after `at`, else the
    text's end."""
    return min((k for k in (text.find("\n", at), text.find("\r", at)) if k >= 0), default=len(text))


def _line_start_at(text: str, k: int) -> bool:
    """Whether only blanks stand before `k` on its line."""
    line_start = max(text.rfind("\n", 0, k), text.rfind("\r", 0, k)) + 1
    return not text[line_start:k].strip(" \t")


def _line_end_at(text: str, k: int) -> bool:
    """Whether only blanks stand after `k` on its line."""
    line_end = _line_end(text, k)
    return not text[k:line_end].strip(" \t")


def _shape(
    tree: Tree | None,
    offsets: _Offsets | None,
    text: str,
    at: int,
    after: int,
    sides: tuple[bool, bool],
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The kinds of the innermost named node ending at `at` and of the one starting at `after`,
    each with `_ANCHOR_DEPTH` parents: an argument list, a statement, a modifier list. Only
    for the sides (before, after) whose anchor is a token: a line's start or end is no
    node's."""
    if tree is None or offsets is None:
        return None
    root = tree.root_node
    return (
        _kinds(_ending(root, offsets.byte(at, text))) if sides[0] else (),
        _kinds(_starting(root, offsets.byte(after, text))) if sides[1] else (),
    )


def _ending(root: Node, byte: int) -> Node | None:
    if byte == 0:
        return None
    node = root.named_descendant_for_byte_range(byte - 1, byte)
    while node is not None and node.end_byte != byte and node.parent is not None:
        node = node.parent if node.end_byte < byte else None
    return node


def _starting(root: Node, byte: int) -> Node | None:
    node = root.named_descendant_for_byte_range(byte, byte + 1)
    while node is not None and node.start_byte > byte:
        node = node.parent
    return node


def _kinds(node: Node | None) -> tuple[str, ...]:
    kinds: list[str] = []
    while node is not None and len(kinds) <= _ANCHOR_DEPTH:
        kinds.append(node.type)
        node = node.parent
    return tuple(kinds)


def _renames(
    old: list[str], new: list[re.Match[str]], reverted: frozenset[tuple[str, str]]
) -> dict[tuple[str, str], int] | None:
    """The one-for-one renames that turn the `old` tokens into the `new` ones, each with where
    its new name first stands; None unless that is all the edit is: every difference one name
    for another, each old name replaced everywhere it stood and by the same new one, at least
    two of them (one alone is the substitution's case, step 2). Anything added or dropped
    makes the edit new code, whose tokens pair by chance (measured on release diffs and
    commits, bench/next_edit.py and bench/next_edit_commits.py: `frame` -> `f_back` out of a
    rewritten statement, `0` -> `rows` out of a rewritten assertion); numbers changed
    together are one value (a date's `2019, 1` -> `2020, 7`), not renames."""
    new_tokens = [m[0] for m in new]
    matcher = SequenceMatcher(None, old, new_tokens, autojunk=False)
    pairs: dict[tuple[str, str], int] = {}
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op != "replace" or i2 - i1 != j2 - j1:
            return None
        for before, at in zip(old[i1:i2], new[j1:j2], strict=True):
            after = at[0]
            if (
                not (_NAME.fullmatch(before) and _NAME.fullmatch(after))
                or before in _KEYWORDS | _CONSTANTS
                or after in _KEYWORDS | _CONSTANTS
            ):
                return None
            pairs.setdefault((before, after), at.start())
    renamed = {before for before, _ in pairs}
    if (
        len(pairs) < 2
        or len(renamed) < len(pairs)  # one name made into two
        or renamed & set(new_tokens)  # a name still there: not renamed
        or any(pair in reverted for pair in pairs)
    ):
        return None
    return pairs


def _split(
    text: str,
    group: EditGroup,
    inert: _Inert,
    tree: Tree | None,
    reverted: frozenset[tuple[str, str]],
) -> tuple[ProposedEdit, ...]:
    """Step 7: several tokens or lines replaced at once (a selection retyped, a multi-cursor
    edit in one change), split by a token diff of the old and new text into its one-for-one
    replacements of a name or a literal; each is propagated as a rename, the proposals
    combined without overlap and never inside the edited span."""
    a, b, old_text = _widened(text, group)
    old = [m[0] for m in _TOKEN.finditer(old_text)]
    new = list(_TOKEN.finditer(text, a, b))
    pairs = _renames(old, new, reverted)
    if not pairs:
        return ()
    taken: list[ProposedEdit] = []
    for (before, after), at in pairs.items():
        in_inert = inert.around(at, at + len(after)) is not None
        sub = _Substitution(at, at + len(after), before, after, False, in_inert)
        spans = [(i, j) for i, j in _matches(text, sub, inert, tree) if j <= a or i >= b]
        taken.extend(_proposed(sub, spans, group.start))
    taken.sort(key=lambda e: abs(e.start - group.start))
    kept: list[ProposedEdit] = []
    for edit in taken:
        if all(edit.end <= k.start or edit.start >= k.end for k in kept):
            kept.append(edit)
    return tuple(kept[:MAX_PROPOSALS])


#: A lexeme of an analogous edit's pattern: a string literal on one line is one, else a word or
#: a punctuation mark.
_LEXEME = re.compile(rf"{_QUOTED}|\w+|[^\w\s]")


def _analogous(
    text: str, group: EditGroup, inert: _Inert, reverted: frozenset[tuple[str, str]]
) -> tuple[ProposedEdit, ...]:
    """Step 8: the same replacement where one name differs (`Base.setup(self, cfg)` ->
    `super().setup(cfg)`, then `Other.setup(self, cfg)`): one name of the old side is let
    vary; every other lexeme must match exactly, in code (or in prose where the edit was), and
    the rest must hold a name of its own (a distinctive pattern, not `(x)`), two where the new
    side drops the varying name. Where the new side carries it over (`typeof a !==
    'undefined'` -> `a !== undefined`), it is written with that place's name in it. One
    line's change only, of at least three lexemes, that replaced text: a pure insertion or
    deletion is step 6's, and a literal let vary made
    rewrites of look-alike lines (measured on release diffs, bench/next_edit.py: a test's
    `pytest.raises(E, f("..."))` made an `assert`, proposed at its neighbours with other
    strings, which the release left alone)."""
    a, b, old = _widened(text, group)
    new = text[a:b]
    if _breaks(old) or _breaks(new) or (old, new) in reverted:
        return ()
    old_lexemes = [m[0] for m in _LEXEME.finditer(old)]
    new_lexemes = {m[0] for m in _LEXEME.finditer(new)}
    if len(old_lexemes) < 3:
        return ()
    in_inert = inert.around(a, b) is not None
    found: dict[tuple[int, int], str] = {}
    for varying in dict.fromkeys(old_lexemes):
        kind = _lexeme_kind(varying)
        if kind is None:
            continue
        names = {x for x in old_lexemes if x != varying and _lexeme_kind(x) is not None}
        if len(names) < (1 if varying in new_lexemes else 2):
            continue
        pattern = _wildcard(old, varying, kind)
        for match in pattern.finditer(text):
            at, end = match.span()
            other = match["v"]
            if other == varying or (at < b and end > a) or (at, end) in found:
                continue
            if in_inert != (inert.around(at, end) is not None):
                continue
            if not in_inert and inert.touches(*match.span("v")):
                continue
            found[(at, end)] = _carried(new, varying, other)
    if not found:
        return ()
    edits: list[ProposedEdit] = []
    for (at, end), replacement in sorted(found.items(), key=lambda x: abs(x[0][0] - a)):
        if any(at < e.end and end > e.start for e in edits):
            continue
        was = text[at:end]
        prefix, suffix = common_affixes(was, replacement)
        edits.append(
            ProposedEdit(
                start=at + prefix,
                end=end - suffix,
                text=replacement[prefix : len(replacement) - suffix],
            )
        )
    return tuple(sorted(edits, key=lambda e: abs(e.start - a))[:MAX_PROPOSALS])


def _lexeme_kind(lexeme: str) -> str | None:
    """What may vary in place of `lexeme`: a name (not a keyword); None for anything else."""
    if _NAME.fullmatch(lexeme) and lexeme not in _KEYWORDS | _CONSTANTS:
        return r"[^\W\d]\w*"
    return None


def _wildcard(old: str, varying: str, kind: str) -> re.Pattern[str]:
    """`old` as a pattern in which each whole lexeme `varying` is one lexeme of its kind, the
    same one each time (group `v`), the rest exact, on whole-word boundaries."""
    parts: list[str] = []
    last, seen = 0, False
    for match in _LEXEME.finditer(old):
        if match[0] != varying:
            continue
        parts.append(re.escape(old[last : match.start()]))
        parts.append("(?P=v)" if seen else f"(?P<v>{kind})")
        seen, last = True, match.end()
    parts.append(re.escape(old[last:]))
    head = r"(?<!\w)" if _WORD.match(old[:1]) else ""
    tail = r"(?!\w)" if _WORD.match(old[-1:]) else ""
    return re.compile(head + "".join(parts) + tail)


def _carried(new: str, varying: str, other: str) -> str:
    """`new` with each whole lexeme `varying` written as `other`."""
    out: list[str] = []
    last = 0
    for match in _LEXEME.finditer(new):
        if match[0] == varying:
            out.append(new[last : match.start()] + other)
            last = match.end()
    out.append(new[last:])
    return "".join(out)


#: Names (not keywords) the line after inserted lines must hold to anchor them: `}` or
#: `return nil` follows too much to say where lines belong.
_LINE_ANCHOR_NAMES = 2


def _whole_lines_at(text: str, group: EditGroup) -> int | None:
    """Where the lines `group` inserted start, taken at a line's start: the editor may report
    them rotated (`HideHelp = true\n\tapp.` after `\tapp.`); None when they are not whole
    lines."""
    n = len(group.inserted)
    at = group.start
    while not (_line_start_at(text, at) and text[at + n - 1 : at + n] == "\n"):
        if at == 0 or text[at - 1] != text[at + n - 1] or group.start - at >= n:
            return None
        at -= 1
    return at


#: One import line, by language, and what it binds (group `names`): Python's `from m import
#: a, b as c` and `import m`, JavaScript's `import x, { a, b as c } from "m"`, Rust's
#: `use m::{a, b};` and `use m::a;`, Java's `import m.A;`.
_IMPORTS = (
    re.compile(r"from\s+[\w.]+\s+import\s+(?P<names>[\w\s,]+?)\s*"),
    re.compile(r"import\s+(?:type\s+)?(?P<names>[\w\s,{}*]+?)\s+from\s+(['\"]).*\2;?"),
    re.compile(r"(?:pub\s+)?use\s+(?:\w+::)+(?:\{(?P<names>[\w\s,]+)\}|(?P<name>\w+));"),
    re.compile(r"import\s+(?:static\s+)?(?:\w+\.)+(?P<name>\w+);"),
)


_TRAILING_COMMENT = re.compile(r"\s+(?://|#)[^'\"]*$")


def _imported(line: str) -> frozenset[str]:
    """The names an import line binds (an alias, not the name it renames); empty for any
    other line."""
    code = _TRAILING_COMMENT.sub("", line).strip()
    for pattern in _IMPORTS:
        match = pattern.fullmatch(code)
        if match is None:
            continue
        if match.groupdict().get("name"):
            return frozenset({match["name"]})
        names = set()
        for part in match["names"].replace("{", ",").replace("}", ",").split(","):
            words = part.split()
            if words and words[-1] != "*":
                names.add(words[-1])
        return frozenset(names)
    return frozenset()


def _import_moved(text: str, lo: int, hi: int) -> tuple[ProposedEdit, ...]:
    """An import line inserted at `lo`..`hi` that binds what another import line of the
    document binds, the same names exactly (`from cattrs.cols import is_namedtuple` over
    `from cattrs.tuples import is_namedtuple`, or the same line moved): the other line removed,
    as it now imports them a second time."""
    code = [line for line in split_lines(text[lo:hi]) if line.strip()]
    names = _imported(code[0]) if len(code) == 1 else frozenset()
    if not names:
        return ()
    found: list[ProposedEdit] = []
    start = 0
    for line in split_lines(text):
        end = start + len(line)
        if not lo <= start < hi and _imported(line) == names:
            found.append(ProposedEdit(start=start, end=end, text=""))
        start = end
    return tuple(found) if len(found) == 1 else ()


def _lines_added(text: str, group: EditGroup, inert: _Inert) -> tuple[ProposedEdit, ...]:
    """Whole lines inserted (a statement, a field, a call in a chain) before a line that
    names at least `_LINE_ANCHOR_NAMES` things: the same lines inserted between each other
    pair of lines that read exactly as the lines around them, indentation included, in code,
    unless they already stand there. The line after alone let lines be proposed in functions
    the commit left alone (measured on commits, bench/next_edit_commits.py: a test's
    `set.SetOutput(ioutil.Discard)` before `_ = fl.Apply(set)`). The editor may report the lines
    rotated (`HideHelp = true\n\tapp.` after `\tapp.`): they are taken at a line's start."""
    n = len(group.inserted)
    at = _whole_lines_at(text, group)
    if at is None:
        return ()
    moved = _import_moved(text, at, at + n)
    if moved:
        return moved
    lines = text[at : at + n]
    next_end = text.find("\n", at + n)
    anchor = text[at + n : next_end + 1 if next_end >= 0 else len(text)]
    above = text[text.rfind("\n", 0, max(at - 1, 0)) + 1 : at]
    # One of the two lines must name things; the line after may be a closer (lines added at
    # the end of a block, after the same statement) where the line above holds no string: a
    # list's last item repeated with its values is not the same place (measured on release
    # diffs, bench/next_edit.py: a test's route added after one `r.Rule("/no//merge", ...)`
    # was proposed after its twin in another test).
    after_names, above_names = (
        sum(bool(_NAME.fullmatch(t)) and t not in _KEYWORDS for t in _TOKEN.findall(line))
        for line in (anchor, above)
    )
    above_alone = above_names >= _LINE_ANCHOR_NAMES and not inert.touches(at - len(above), at)
    # Or a name on each side (`return []Level{` over `DebugLevel,`): together they say where.
    both = min(after_names, above_names) >= 1 and after_names + above_names >= _LINE_ANCHOR_NAMES
    if (
        (after_names < _LINE_ANCHOR_NAMES and not above_alone and not both)
        or not anchor.endswith("\n")
        or not _in_code(inert, at, at + n)
    ):
        return ()
    if not above.strip() or not anchor.strip():
        return ()  # a blank line is no anchor: the other line would be alone
    # The line after may be a comment, the same comment (`# Custom type` over a group of
    # fields); then it is one at the other place too, not the text of a string.
    anchor_inert = inert.touches(at + n, at + n + len(anchor))
    found: list[int] = []
    k = text.find(anchor)
    while k >= 0 and len(found) < MAX_PROPOSALS:
        if (
            k != at + n
            and (k == 0 or text[k - 1] == "\n")
            and _valued_alike(text[text.rfind("\n", 0, max(k - 1, 0)) + 1 : k], above)
            and not text.endswith(lines, 0, k)
            and inert.touches(k, k + len(anchor)) == anchor_inert
            and _in_code(inert, k - len(above), k)
        ):
            found.append(k)
        k = text.find(anchor, k + 1)
    # The nearest place alone, as for code restructured (step 9): lines are inserted in some
    # of a test's look-alike cases, not all (measured on commits, bench/next_edit_commits.py:
    # every place proposed, one more false edit and one hit fewer of 40 insertions).
    found.sort(key=lambda k: abs(k - at))
    return tuple(ProposedEdit(start=k, end=k, text=lines) for k in found[:1])


_STRING_VALUE = re.compile(_QUOTED)


def _valued_alike(line: str, other: str) -> bool:
    """Whether two lines read the same but for the values of their strings (`app.Name =
    "categories"` and `app.Name = "visible-categories"`: each test's setting of one field)."""
    return line == other or _STRING_VALUE.sub('""', line) == _STRING_VALUE.sub('""', other)


#: Tokens the old side of a change across lines must hold, and of them names or strings: a
#: statement wrapped in a guard (`_ = ShowAppHelp(cCtx)`), not `return this`, `}` or a
#: parameter's `bool = False` made a union (measured on commits, bench/next_edit_commits.py:
#: proposed at the two other parameters the commit left alone).
_RESTRUCTURED_TOKENS, _RESTRUCTURED_THINGS = 3, 2

_BLANKS = re.compile(r"\s+")


def _flexible(code: str) -> str:
    """`code` as a pattern whose blanks within a line are exact and whose line breaks may be
    followed by any indentation (and preceded by trailing blanks): the same code at another
    depth."""
    parts: list[str] = []
    last = 0
    for match in _BLANKS.finditer(code):
        parts.append(re.escape(code[last : match.start()]))
        blanks = match[0]
        breaks = _breaks(blanks)
        parts.append(
            rf"(?:[ \t]*(?:\r\n|\r|\n)){{{breaks}}}[ \t]*" if breaks else re.escape(blanks)
        )
        last = match.end()
    parts.append(re.escape(code[last:]))
    head = r"(?<!\w)" if _WORD.match(code[:1]) else ""
    tail = r"(?!\w)" if _WORD.match(code[-1:]) else ""
    return head + "".join(parts) + tail


def _indentation(text: str, at: int) -> str:
    """The blanks that start the line holding `at`."""
    line_start = max(text.rfind("\n", 0, at), text.rfind("\r", 0, at)) + 1
    k = line_start
    while k < len(text) and text[k] in " \t":
        k += 1
    return text[line_start:k]


def _reindented(new: str, was: str, now: str) -> str | None:
    """`new`, whose lines after its first were written under a line indented `was`, for a
    place under a line indented `now`; None when a line of it is indented less than `was`
    (its depth there cannot be told)."""
    if was == now:
        return new
    lines = new.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        if not line.strip():
            out.append(line)
        elif line.startswith(was):
            out.append(now + line[len(was) :])
        else:
            return None
    return "\n".join(out)


def _things(code: str) -> int:
    """How many names (not keywords or constants) and strings `code` holds."""
    return sum(
        1
        for m in _LEXEME.finditer(code)
        if m[0][0] in _QUOTES or (_NAME.fullmatch(m[0]) and m[0] not in _KEYWORDS | _CONSTANTS)
    )


def _code_lines(text: str) -> int:
    """How many lines of `text` hold more than blanks."""
    return sum(bool(line.strip()) for line in split_lines(text))


def _restructured(
    text: str, group: EditGroup, inert: _Inert, reverted: frozenset[tuple[str, str]]
) -> tuple[ProposedEdit, ...]:
    """Step 9: code replaced by code with line breaks added or removed (a statement wrapped in
    a guard, two statements made one, a comment made code): the same replacement wherever the
    same old code stands again in code, at any depth; the new lines are re-indented to that
    place's. The old code must be a statement's worth (`_RESTRUCTURED_TOKENS`, a name among
    them), whole strings and comments only, and the edit not inside a string or comment; a
    place already reading as the new code is skipped."""
    a, b = group.start, group.end
    if inert.around(a, b) is not None:
        return ()
    if (group.removed, group.inserted) in reverted:
        return ()
    # The whole lines the edit touches: the same lines stand again at other depths.
    line_lo = max(text.rfind("\n", 0, a), text.rfind("\r", 0, a)) + 1
    line_hi = _line_end(text, b)
    old = text[line_lo:a] + group.removed + text[b:line_hi]
    new = text[line_lo:line_hi]
    if _code_lines(old) == _code_lines(new):
        return ()  # a line's code changed and a blank line added or removed beside it
    i = line_lo + len(new) - len(new.lstrip())
    j = line_lo + len(new.rstrip())
    # Trailing blanks the edit dropped are dropped at the other places too.
    drops_trailing = old != old.rstrip(" \t") and new == new.rstrip(" \t")
    old, new = old.strip(), new.strip()
    if len(_TOKEN.findall(old)) < _RESTRUCTURED_TOKENS or _things(old) < _RESTRUCTURED_THINGS:
        return ()
    was = _indentation(text, i)
    already = [m.span() for m in re.finditer(_flexible(new), text)] if new.strip() else []
    found: list[tuple[int, int, str]] = []
    for match in re.finditer(_flexible(old), text):
        at, end = match.span()
        if at < j and end > i:
            continue
        while drops_trailing and text[end : end + 1] in (" ", "\t"):
            end += 1
        if not (_line_start_at(text, at) and _line_end_at(text, end)):
            continue
        if any(lo <= at and end <= hi for lo, hi in already):
            continue
        if not _in_code(inert, at, end):
            continue
        replacement = _reindented(new, was, _indentation(text, at))
        if replacement is None:
            continue
        found.append((at, end, replacement))
        if len(found) == 4 * MAX_PROPOSALS:
            break
    # The nearest place alone: a statement stands again in look-alike places that the change
    # does not reach (measured on commits, bench/next_edit_commits.py: with every place
    # proposed, 2 of the 9 cases answered had a false edit, a guard added around one of three
    # identical calls). Once it is taken, the taken edit proposes the next.
    found.sort(key=lambda f: abs(f[0] - i))
    edits: list[ProposedEdit] = []
    for at, end, replacement in found[:1]:
        prefix, suffix = common_affixes(text[at:end], replacement)
        edits.append(
            ProposedEdit(
                start=at + prefix,
                end=end - suffix,
                text=replacement[prefix : len(replacement) - suffix],
            )
        )
    return tuple(edits)


#: What removed lines must hold to be found again (`_distinctive`): a comment's words, code's
#: names and strings; `}`, `break;` or `return nil` stand in many places that the same change
#: does not reach.
_REMOVED_COMMENT_WORDS, _REMOVED_LINE_THINGS = 2, 2


#: A line of code that binds a name: an import or a declaration by its first word, or an
#: assignment (`=` that is no comparison or arrow, `:=`).
_BINDING_LINE = re.compile(
    r"^(?:import|from|use|using|package|let|const|var|val|static)\b|(?<![=!<>])=(?![=>])"
)
#: A line that is a comment, by its start.
_COMMENT_LINE = re.compile(r"(?://|#|/\*|\*|--)")


def _distinctive(lines: list[str]) -> bool:
    """Whether removed lines say enough to be found again: comments of at least
    `_REMOVED_COMMENT_WORDS` words (`/*jshint -W040 */`), code holding at least
    `_REMOVED_LINE_THINGS` names (not keywords or constants) or strings (a dict's
    `"_TYPER_COMPLETE_TESTING": "True",`, not `break;` or `return nil`)."""
    comments = " ".join(line for line in lines if _COMMENT_LINE.match(line))
    code = " ".join(line for line in lines if not _COMMENT_LINE.match(line))
    words = sum(bool(_WORD.match(t)) for t in _TOKEN.findall(comments))
    return words + _things(code) >= (_REMOVED_COMMENT_WORDS if not code else _REMOVED_LINE_THINGS)


def _lines_removed(text: str, group: EditGroup, inert: _Inert) -> tuple[ProposedEdit, ...]:
    """Whole lines removed (a lint directive, a debug call, a commented-out line), or a line's
    content with its line left blank: the same lines, by their content, removed wherever they
    stand again, at any depth, whole (a comment where a comment was, code in code)."""
    at = group.start
    removed = group.removed
    before = text[:at] + removed + text[at:]
    lo, hi = at, at + len(removed)
    whole = bool(_breaks(removed))
    if whole:
        # The editor may report the lines rotated (`x\n    ` after `    `): taken from a
        # line's start, up to its last line break.
        n = hi - lo
        while not ((lo == 0 or before[lo - 1] == "\n") and before[lo + n - 1] == "\n"):
            if lo == 0 or before[lo - 1] != before[lo + n - 1] or at - lo >= n:
                return ()
            lo -= 1
        hi = lo + n - 1
    if inert.around(lo, lo) is not None:
        # Lines of a string or a block comment: the text's own business. Asked where the lines
        # start: the history's diff may report them rotated from inside a string they hold.
        return ()
    line_lo = before.rfind("\n", 0, lo) + 1
    line_hi = before.find("\n", hi)
    line_hi = len(before) if line_hi < 0 else line_hi
    if before[line_lo:lo].strip() or before[hi:line_hi].strip():
        return ()  # part of a line
    wanted = [line.strip() for line in before[line_lo:line_hi].split("\n")]
    if "" in wanted or not _distinctive(wanted):
        return ()
    if any(
        _BINDING_LINE.search(_STRING_VALUE.sub('""', line))  # `.arg("--x=y")` binds nothing
        for line in wanted
        if not _COMMENT_LINE.match(line)
    ):
        # A line that binds a name (an import, an assignment) is removed where it went unused;
        # its twins elsewhere bind it for their own uses (measured on release diffs,
        # bench/next_edit.py: a function's `import numpy as np` proposed in two others).
        return ()
    lines = split_lines(text)
    starts = list(accumulate(map(len, lines), initial=0))
    n = len(wanted)
    found: list[ProposedEdit] = []
    for k in range(len(lines) - n + 1):
        if lines[k].strip() != wanted[0] or [x.strip() for x in lines[k : k + n]] != wanted:
            continue
        first = starts[k] + len(lines[k]) - len(lines[k].lstrip())
        last = starts[k + n - 1] + len(lines[k + n - 1].rstrip())
        if not _in_code(inert, first, last):
            continue
        start = starts[k]
        end = starts[k + n] if whole else last
        if start <= at <= end:
            continue
        found.append(ProposedEdit(start=start, end=end, text=""))
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


#: Syntax node kinds, across the grammars: a function's parameter list, a call, its arguments.
_PARAMETER_LISTS = frozenset({"parameters", "formal_parameters", "parameter_list"})
_CALLS = frozenset({"call", "call_expression", "method_invocation"})
#: Arguments whose place in the list is not a parameter's position.
_UNPLACED_ARGUMENTS = frozenset(
    {"keyword_argument", "list_splat", "dictionary_splat", "spread_element", "variadic_argument"}
)
_LAST_NAME = re.compile(r"\w+\Z")


def _arguments_dropped(text: str, group: EditGroup, tree: Tree | None) -> tuple[ProposedEdit, ...]:
    """A parameter removed from a function's definition (`f(state, delims)` -> `f(delims)`):
    the argument at its place removed from the calls of that function in the document, by
    the tree. Only calls with as many arguments as the definition had parameters, none of
    them by keyword or spread; a method's `self` is not among its call's arguments."""
    if tree is None or group.inserted or _TOKEN.findall(group.removed).count(",") != 1:
        return ()
    offsets = _Offsets(text)
    at = offsets.byte(group.start, text)
    node: Node | None = tree.root_node.descendant_for_byte_range(at, at)
    while node is not None and node.type not in _PARAMETER_LISTS:
        if node.type in FUNCTION_TYPES:
            return ()
        node = node.parent
    function = node.parent if node is not None else None
    name = function.child_by_field_name("name") if function is not None else None
    if node is None or function is None or function.type not in FUNCTION_TYPES or name is None:
        return ()
    kept = [c for c in node.named_children if c.type != "comment"]
    index = sum(1 for c in kept if c.end_byte <= at)
    count = len(kept) + 1
    first = kept[0] if kept else None
    has_self = first is not None and (
        first.type == "self_parameter"
        or (first.type == "identifier" and first.text in (b"self", b"cls"))
    )
    wanted = name.text
    found: list[ProposedEdit] = []
    for call in _nodes(tree.root_node):
        if call.type not in _CALLS:
            continue
        callee = call.child_by_field_name(
            "name" if call.type == "method_invocation" else "function"
        )
        arguments = call.child_by_field_name("arguments")
        if callee is None or arguments is None or callee.text is None:
            continue
        last = _LAST_NAME.search(callee.text.decode("utf-8", "replace"))
        if last is None or last[0].encode() != wanted:
            continue
        method = call.child_by_field_name("object") is not None or callee.type != "identifier"
        args = [a for a in arguments.named_children if a.type != "comment"]
        place, expected = index, count
        if has_self and method:
            place, expected = index - 1, count - 1
        if place < 0 or len(args) != expected or any(a.type in _UNPLACED_ARGUMENTS for a in args):
            continue
        if place + 1 < len(args):
            lo, hi = args[place].start_byte, args[place + 1].start_byte
        elif place > 0:
            lo, hi = args[place - 1].end_byte, args[place].end_byte
        else:
            lo, hi = args[place].start_byte, args[place].end_byte
        found.append(ProposedEdit(start=offsets.char(lo), end=offsets.char(hi), text=""))
    found.sort(key=lambda e: abs(e.start - group.start))
    return tuple(found[:MAX_PROPOSALS])


#: An argument added first (`nil, `) or last (`, cli.compact`) in a call's arguments.
_FIRST_ARGUMENT = re.compile(r"[^,\n]*[^\s,][^,\n]*,\s?")
_LAST_ARGUMENT = re.compile(r",\s?[^,\n]*[^\s,][^,\n]*")


def _argument_added(text: str, group: EditGroup, tree: Tree | None) -> tuple[ProposedEdit, ...]:
    """An argument added first or last to a call (`print_results(x)` -> `print_results(x,
    cli.compact)`): added at the same end of the other calls of that function, by the tree,
    those with as many arguments as the edited call had, on one line, none of them (nor the
    one added) by keyword or spread, whatever the arguments there are."""
    added = group.inserted
    if tree is None or _breaks(added):
        return ()
    last = _LAST_ARGUMENT.fullmatch(added) is not None
    if not last and _FIRST_ARGUMENT.fullmatch(added) is None:
        return ()
    offsets = _Offsets(text)
    lo, hi = offsets.byte(group.start, text), offsets.byte(group.end, text)

    def shape(call: Node) -> tuple[bytes, Node] | None:
        callee = call.child_by_field_name(
            "name" if call.type == "method_invocation" else "function"
        )
        arguments = call.child_by_field_name("arguments")
        if callee is None or arguments is None or callee.text is None:
            return None
        if arguments.start_point[0] != arguments.end_point[0]:
            return None
        return callee.text, arguments

    node: Node | None = tree.root_node.descendant_for_byte_range(lo, hi)
    while node is not None and node.type not in _CALLS:
        node = node.parent
    edited = shape(node) if node is not None else None
    if node is None or edited is None:
        return ()
    name, arguments = edited
    args = [a for a in arguments.named_children if a.type != "comment"]
    if last and not (args and args[-1].end_byte == hi and text[group.end :].lstrip()[:1] == ")"):
        return ()
    if not last and not (args and args[0].start_byte == lo):
        return ()
    count = len(args) - 1
    if any(a.type in _UNPLACED_ARGUMENTS for a in args):
        # By keyword: one call's option (a test's `storage_class(foo="bar", baz=None)`,
        # measured on release diffs, bench/next_edit.py: proposed in every other test).
        return ()
    found: list[ProposedEdit] = []
    for call in _nodes(tree.root_node):
        if call.type not in _CALLS or call.start_byte == node.start_byte:
            continue
        other = shape(call)
        if other is None or other[0] != name:
            continue
        kept = [a for a in other[1].named_children if a.type != "comment"]
        if len(kept) != count or not kept or any(a.type in _UNPLACED_ARGUMENTS for a in kept):
            continue
        at = offsets.char(kept[-1].end_byte if last else kept[0].start_byte)
        if text.startswith(added, at) or text.endswith(added, 0, at):
            continue
        found.append(ProposedEdit(start=at, end=at, text=added))
    found.sort(key=lambda e: abs(e.start - group.start))
    return tuple(found[:MAX_PROPOSALS])


#: JavaScript and TypeScript, by their language ids: statements may end with `;` or without
#: it (automatic semicolon insertion), so a `;` added or removed at one statement's end is a
#: file's style changed; a class member's `#` makes it private.
_SCRIPTS = frozenset({"javascript", "typescript", "javascriptreact", "typescriptreact"})
#: Statements that end with `;` in that style (not a block's `}`, nor a class's field).
_SEMICOLON_STATEMENTS = frozenset(
    {
        "expression_statement",
        "lexical_declaration",
        "variable_declaration",
        "return_statement",
        "import_statement",
        "export_statement",
        "throw_statement",
        "break_statement",
        "continue_statement",
    }
)


def _statement_ends(
    text: str, group: EditGroup, tree: Tree | None, language_id: str
) -> tuple[ProposedEdit, ...]:
    """A `;` added at the end of a statement (or removed from one) where it is optional, at
    the end of its line: the same at the other statements that end a line without it (or
    with it), nearest first, by the tree."""
    if tree is None or language_id not in _SCRIPTS:
        return ()
    added = group.inserted == ";" and not group.removed
    if not added and not (group.removed == ";" and not group.inserted):
        return ()
    at = group.start
    if not _line_end_at(text, at + (1 if added else 0)) or text[at - 1 : at] == ";":
        return ()  # not a line's end, or a doubled `;` removed
    offsets = _Offsets(text)
    found: list[ProposedEdit] = []
    for node in _nodes(tree.root_node):  # statements inside functions, callbacks, classes
        if node.type not in _SEMICOLON_STATEMENTS:
            continue
        if node.type == "export_statement" and node.child_by_field_name("declaration") is not None:
            continue  # `export const x = 1`: its declaration is the statement
        end = offsets.char(node.end_byte)
        if node.has_error or not _line_end_at(text, end):
            continue
        ends_with = text[end - 1 : end] == ";"
        if added and not ends_with and not (end <= at + 1 and end >= at):
            found.append(ProposedEdit(start=end, end=end, text=";"))
        elif not added and ends_with and end != at:
            found.append(ProposedEdit(start=end - 1, end=end, text=""))
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


#: A constructor's type arguments, right before the `<` they stand after: `new ArrayList<`.
_NEW_GENERIC = re.compile(r"(?<![\w.])new\s+(?P<type>[\w.]+)<\Z")
#: Type arguments: names, dots, wildcards, arrays and one level of nested arguments.
_TYPE_ARGUMENTS = r"[\w.?,\s\[\]]+(?:<[\w.?,\s\[\]]*>[\w.?,\s\[\]]*)*"


def _diamond(
    text: str, group: EditGroup, inert: _Inert, language_id: str
) -> tuple[ProposedEdit, ...]:
    """Java's type arguments removed from a constructor call (`new ArrayList<Node>()` ->
    `new ArrayList<>()`, what IDEs and linters ask for): the same at the other constructor
    calls of that type, whatever their arguments."""
    at = group.start
    if language_id != "java" or group.inserted or text[at - 1 : at + 1] != "<>":
        return ()
    head = _NEW_GENERIC.search(text, max(0, at - 200), at)
    if head is None or re.fullmatch(_TYPE_ARGUMENTS, group.removed) is None:
        return ()
    pattern = re.compile(
        rf"(?<![\w.])new\s+{re.escape(head['type'])}<(?P<args>{_TYPE_ARGUMENTS})>\s*\("
    )
    found: list[ProposedEdit] = []
    for match in pattern.finditer(text):
        if match.start() <= at <= match.end() or inert.touches(*match.span()):
            continue
        found.append(ProposedEdit(start=match.start("args"), end=match.end("args"), text=""))
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


def _made_private(
    text: str, group: EditGroup, inert: _Inert, language_id: str
) -> tuple[ProposedEdit, ...]:
    """A `#` put before a class member's name (JavaScript's private names: `node` ->
    `#node`), at its declaration or at a `this.` use: the same at its declaration and its
    other `this.` uses, which would otherwise name another member."""
    at = group.start
    if language_id not in _SCRIPTS or group.inserted != "#" or group.removed:
        return ()
    name = _NAME.match(text, at + 1)
    if name is None or not (text.endswith("this.", 0, at) or _line_start_at(text, at)):
        return ()
    member = re.escape(name[0])
    pattern = re.compile(
        rf"(?<![\w.])this\.(?P<use>){member}(?!\w)"
        rf"|^[ \t]*(?:(?:static|readonly|async|get|set)[ \t]+)*(?P<declared>){member}"
        r"(?=[ \t]*[:=(;?!<]|[ \t]*$)",
        re.MULTILINE,
    )
    found: list[ProposedEdit] = []
    for match in pattern.finditer(text):
        point = match.start("use") if match["use"] is not None else match.start("declared")
        if point == at + 1 or inert.touches(match.start(), match.end()):
            continue
        found.append(ProposedEdit(start=point, end=point, text="#"))
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


#: Syntax nodes, across the grammars, that are lists whose items a comma separates (not a
#: block's `{`...`}` nor a type's members).
_COMMA_LISTS = frozenset(
    {
        "argument_list",
        "arguments",
        "parameters",
        "formal_parameters",
        "parameter_list",
        "list",
        "dictionary",
        "tuple",
        "set",
        "array",
        "object",
        "named_imports",
        "literal_value",
        "field_initializer_list",
        "array_initializer",
        "array_expression",
        "tuple_expression",
    }
)


def _trailing_commas(
    text: str, group: EditGroup, inert: _Inert, tree: Tree | None
) -> tuple[ProposedEdit, ...]:
    """A trailing comma (a formatter's style), by the tree: added after a multi-line list's
    last item, it goes after each other list's last item that ends a line before the list's
    closer; removed right before a closer on its line (`"a",]`), it goes from before each
    other list's closer so placed. Lists only: arguments, parameters, arrays, objects,
    dictionaries, imports, never a block."""
    at = group.start
    if tree is None:
        return ()
    offsets = _Offsets(text)
    added = group.substitution == ("", ",")
    if added:
        if not _line_end_at(text, at + 1) or _cuts(inert, at):
            return ()
        rest = text[at + 1 :]
        closer = at + 1 + len(rest) - len(rest.lstrip())
    elif group.substitution == (",", ""):
        closer = at
        if _cuts(inert, at):
            return ()
    else:
        return ()
    if not _list_closer(tree, offsets, text, closer):
        return ()
    found: list[ProposedEdit] = []
    for node in _nodes(tree.root_node):
        if node.type not in _COMMA_LISTS or len(node.children) < 2:
            continue
        last = node.children[-1]
        items = [c for c in node.children[1:-1] if c.type != "comment"]
        if not items or last.type not in (")", "]", "}"):
            continue
        end = offsets.char(items[-1].end_byte)
        close = offsets.char(last.start_byte)
        if added:
            between = text[end:close]
            if items[-1].type != "," and "\n" in between and not between.strip() and end != at:
                found.append(ProposedEdit(start=end, end=end, text=","))
        elif items[-1].type == "," and end == close and close != at:
            found.append(ProposedEdit(start=close - 1, end=close, text=""))
    found.sort(key=lambda e: abs(e.start - at))
    return tuple(found[:MAX_PROPOSALS])


def _list_closer(tree: Tree, offsets: _Offsets, text: str, at: int) -> bool:
    """Whether the bracket at `at` closes a comma-separated list."""
    if text[at : at + 1] not in (")", "]", "}"):
        return False
    byte = offsets.byte(at, text)
    node = tree.root_node.descendant_for_byte_range(byte, byte + 1)
    while node is not None and node.start_byte == byte and node.type in (")", "]", "}"):
        node = node.parent
    return node is not None and node.type in _COMMA_LISTS and node.end_byte == byte + 1


def _nodes(root: Node) -> Iterator[Node]:
    """Every node of the tree under `root`, `root` first."""
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        yield node


#: Java's declarations whose modifiers and `throws` clause a change can drop.
_JAVA_DECLARATIONS = frozenset(
    {
        "method_declaration",
        "constructor_declaration",
        "field_declaration",
        "local_variable_declaration",
    }
)
_JAVA_MODIFIER = re.compile(
    r"public|protected|private|static|final|abstract|synchronized|transient|volatile"
    r"|@[A-Za-z_]\w*"
)


def _modifier_dropped(
    text: str, group: EditGroup, tree: Tree | None, language_id: str
) -> tuple[ProposedEdit, ...]:
    """A modifier (`final`, `public`, an annotation) or a `throws` clause removed from a Java
    declaration: the same removed from the declarations of the same kind beside it (the
    class's other methods or constructors, the block's other locals) that carry it."""
    removed = group.removed.strip()
    if tree is None or language_id != "java" or group.inserted or not removed:
        return ()
    throws = removed.startswith("throws ")
    if not throws and _JAVA_MODIFIER.fullmatch(removed) is None:
        return ()
    offsets = _Offsets(text)
    byte = offsets.byte(group.start, text)
    node: Node | None = tree.root_node.descendant_for_byte_range(byte, byte)
    while node is not None and node.type not in _JAVA_DECLARATIONS:
        node = node.parent
    if node is None or node.parent is None:
        return ()
    wanted = removed.encode()
    whole_line = _breaks(group.removed) > 0
    found: list[ProposedEdit] = []
    for sibling in node.parent.named_children:
        if sibling.type != node.type or sibling == node:
            continue
        if throws:
            parts = [c for c in sibling.children if c.type == "throws"]
        else:
            modifiers = [c for c in sibling.children if c.type == "modifiers"]
            parts = [c for m in modifiers for c in m.children]
        for part in parts:
            if part.text != wanted:
                continue
            start, end = offsets.char(part.start_byte), offsets.char(part.end_byte)
            while end < len(text) and text[end] in " \t":
                end += 1
            line_start = text.rfind("\n", 0, start) + 1
            if whole_line and not text[line_start:start].strip() and text[end : end + 1] == "\n":
                # An annotation on a line of its own goes with its line, as it went.
                start, end = line_start, end + 1
            found.append(ProposedEdit(start=start, end=end, text=""))
    found.sort(key=lambda e: abs(e.start - group.start))
    return tuple(found[:MAX_PROPOSALS])
