"""Each document's recent edits, as a user would name them: "renamed `count`", not 5 keystrokes.

The server calls `EditHistory.changed` from `didChange` after pygls has applied the changes,
so the history keeps its own copy of each document's last text and finds what changed by
comparing the two (common prefix and suffix). That reads any notification the same way: one
change, or Neovim's rename sent as many small changes in one `didChange` (a delete, then one
change per typed character) is one edit, never only its last change.

Rules, each exact:

1. A change is the span the old and new text do not share: `removed` at `start` in the old
   text became `inserted`.
2. A change that touches or overlaps the document's open group, within `PAUSE_S` of its last
   change, grows that group; otherwise it starts a new one. The merge keeps the invariant the
   tests check with hypothesis: the text before the group, with `removed` at `start` replaced
   by `inserted`, is the text after it. A group is kept minimal (common prefix and suffix of
   `removed` and `inserted` trimmed); a group that comes back to nothing (typed, then erased)
   is dropped and its substitution counted as reverted.
3. Undo: a group that puts back exactly what an earlier group of the same document replaced,
   at the same place, `undoes` it, and the earlier substitution is `reverted(uri)`, so that
   propagation never proposes it again.
4. Older groups follow the text: a change before them shifts their `start` and line.
5. Bounds: `MAX_GROUPS_PER_DOCUMENT` groups per document, `MAX_DOCUMENTS` recently edited
   documents, `MAX_HISTORY_BYTES` in all, oldest first out; a change over `MAX_GROUP_BYTES`
   is not kept (and closes the open group). `closed(uri)` forgets a document.

Cost, measured (median per keystroke, typing at three quarters of the file, on 2 CPU cores shared
with other work): 0.12 ms on a 2,000-line file, 1.5 ms on a 4 MB file. Comparing the texts is C
work in chunks (`common_prefix_length`), and a line number is counted from the last change's place,
never from the top of the file (counting 4 MB of line breaks alone takes 4-8 ms).

Single-threaded: the server calls it from its event loop, in notification order.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlparse

from engine.text import LINE_BREAK, common_affixes

#: A pause this long ends an edit group. Typing runs at 5-10 characters a second with gaps
#: under a second between words of one identifier; 1.5 s is past those gaps, and short enough
#: that "renamed one use, then went to the next" reads as two groups.
PAUSE_S = 1.5

#: Groups kept per document: a next-edit prompt shows the last few edits (Zeta shows about
#: five events), and propagation needs only the last one plus what was undone.
MAX_GROUPS_PER_DOCUMENT = 6

#: Recently edited documents whose groups are kept (this one and a few others): the edits a
#: user makes across files in one task (a definition in one file, its callers in another).
MAX_DOCUMENTS = 4

#: A change bigger than this (UTF-8) is a paste, a formatter or a reload, not typing: no next
#: edit follows from it, and a prompt could not hold it.
MAX_GROUP_BYTES = 16 * 1024

#: All kept groups together (UTF-8 of removed + inserted): more than a next-edit prompt's
#: history ever takes (a few thousand tokens), and a bound on memory however long a session.
MAX_HISTORY_BYTES = 64 * 1024

#: Reverted substitutions remembered per document: enough for a user's recent undos.
MAX_REVERTED = 16

#: Lines of context around a group in its unified diff and its stored context.
CONTEXT_LINES = 3


_LAST_BREAK = re.compile(r"(?:\r\n|\r|\n)\Z")
_HUNK_HEADER = re.compile(r"^@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@")


def uri_path(uri: str) -> str:
    """The path a diff names for a document: the URI's path, decoded (else the URI)."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.path else uri


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True, kw_only=True)
class EditGroup:
    """One edit as a user would name it: `removed` became `inserted`.

    `start`: where `inserted` begins in the document's current text (code points); `line`:
    its 0-based line. `started`/`ended`: the clock of its first and last change. `undoes`: it
    put back what an earlier group had replaced. `context_before`/`context_after`: up to
    `CONTEXT_LINES` whole lines around it when it last changed, from `context_line`, for its
    diff.
    """

    uri: str
    start: int
    removed: str
    inserted: str
    started: float
    ended: float
    line: int
    context_line: int
    context_before: str
    context_after: str
    undoes: bool = False
    #: Its last change typed one word character at its end: the word at its end may be half
    #: typed (`tot` on the way to `total`). A paste, a completion or a rename sent in one
    #: notification inserts the whole word at once.
    typing: bool = False

    @property
    def end(self) -> int:
        """Where `inserted` ends in the current text."""
        return self.start + len(self.inserted)

    @property
    def substitution(self) -> tuple[str, str]:
        """`(removed, inserted)`: what `EditHistory.reverted` holds."""
        return self.removed, self.inserted

    def unified_diff(self) -> str:
        """The group as a unified diff with `CONTEXT_LINES` of context; paths are the URI's
        path, line numbers the document's."""
        path = uri_path(self.uri)
        before = LINE_BREAK.split(self.context_before + self.removed + self.context_after)
        after = LINE_BREAK.split(self.context_before + self.inserted + self.context_after)
        lines = []
        for line in difflib.unified_diff(before, after, path, path, n=CONTEXT_LINES, lineterm=""):
            if line.startswith("@@"):
                line = _HUNK_HEADER.sub(self._shift_hunk, line)
            lines.append(line)
        return "\n".join(lines) + "\n" if lines else ""

    def _shift_hunk(self, match: re.Match[str]) -> str:
        old_start = int(match[1]) + self.context_line
        new_start = int(match[3]) + self.context_line
        return f"@@ -{old_start}{match[2]} +{new_start}{match[4]} @@"


@dataclass(slots=True, kw_only=True)
class _Span:
    """The open group as typed, untrimmed: where the user's keystrokes reached. Growth is
    judged against it, since trimming can leave the published group short of the cursor
    (`count` erased and `t` typed is published as `coun` removed, before the `t`)."""

    start: int
    removed: str
    inserted: str
    started: float
    ended: float
    published: bool = False  # whether it is the document's last group now


@dataclass(slots=True)
class _Document:
    groups: list[EditGroup] = field(default_factory=list)
    reverted: dict[tuple[str, str], None] = field(default_factory=dict)  # ordered set
    open: _Span | None = None  # the group that may still grow


def _merge(
    span: _Span, old: str, new: str, start: int, old_end: int, inserted: str, now: float
) -> _Span:
    """`span` grown by the change `old[start:old_end]` -> `inserted` (rule 2).

    In the old text the span occupies [g, g + len(I)); the union of it and the change,
    [u0, u1), covers the whole span, so in the text before the span it is
    [u0, u1 - len(I) + len(R)) and in the new text [u0, u1 + len(inserted) - len(removed)).
    """
    end = span.start + len(span.inserted)
    u0, u1 = min(span.start, start), max(end, old_end)
    removed = old[u0 : span.start] + span.removed + old[end:u1]
    now_there = new[u0 : u1 + len(inserted) - (old_end - start)]
    return _Span(start=u0, removed=removed, inserted=now_there, started=span.started, ended=now)


def _line_at(text: str, offset: int, mark: tuple[int, int]) -> int:
    """The 0-based line (counted at `\\n`) of `offset` in `text`, from a known
    `(offset, line)` of the same text nearby: counting from the start of a 4 MB file costs
    8 ms, counting from the last edit's place costs nothing."""
    at, line = mark
    if offset >= at:
        return line + text.count("\n", at, offset)
    return line - text.count("\n", offset, at)


def _with_context(group: EditGroup, text: str, mark: tuple[int, int]) -> EditGroup:
    """`group` with its line and context read from `text`, the text it is now in; `mark`: a
    known `(offset, line)` of `text` (see `_line_at`)."""
    first = text.rfind("\n", 0, group.start) + 1
    line = _line_at(text, group.start, mark)
    context_line = line
    for _ in range(CONTEXT_LINES):
        if first == 0:
            break
        first = text.rfind("\n", 0, first - 1) + 1
        context_line -= 1
    last = group.end
    for _ in range(CONTEXT_LINES + 1):
        newline = text.find("\n", last)
        if newline < 0:
            last = len(text)
            break
        last = newline + 1
    after = text[group.end : last]
    # Without its last line break: a diff splits at breaks, and would show an empty line.
    after = after[: -len(match[0])] if (match := _LAST_BREAK.search(after)) else after
    return replace(
        group,
        line=line,
        context_line=context_line,
        context_before=text[first : group.start],
        context_after=after,
    )


class EditHistory:
    """Per-document edit history: last-seen texts, edit groups, reverted substitutions."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        # Per text, an `(offset, line)` known to hold: where the last change began.
        self._marks: dict[str, tuple[int, int]] = {}
        self._documents: dict[str, _Document] = {}  # least recently edited first

    # --- what the server calls --------------------------------------------------------

    def opened(self, uri: str, text: str) -> None:
        """`didOpen`: the text edits are measured from. A reopened document starts afresh."""
        self._texts[uri] = text
        self._marks[uri] = (0, 0)
        self._documents.pop(uri, None)

    def changed(self, uri: str, new_text: str, now: float) -> EditGroup | None:
        """`didChange`, after the changes are applied: the group this change made or grew,
        or None (no change, a change too big to keep, or a document never opened)."""
        old = self._texts.get(uri)
        self._texts[uri] = new_text
        if old is None or old == new_text:
            return None
        prefix, suffix = common_affixes(old, new_text)
        # Old and new text share everything before `prefix`, so its line is the same in both.
        mark = (prefix, _line_at(old, prefix, self._marks.get(uri, (0, 0))))
        self._marks[uri] = mark
        old_end = len(old) - suffix
        removed = old[prefix:old_end]
        inserted = new_text[prefix : len(new_text) - suffix]
        return self._record(uri, old, new_text, prefix, removed, inserted, now, mark)

    def closed(self, uri: str) -> None:
        """`didClose`: forget the document."""
        self._texts.pop(uri, None)
        self._marks.pop(uri, None)
        self._documents.pop(uri, None)

    # --- what next edits read ---------------------------------------------------------

    def text(self, uri: str) -> str | None:
        """The last text seen of the document."""
        return self._texts.get(uri)

    def groups(self, uri: str) -> tuple[EditGroup, ...]:
        """The document's kept groups, oldest first."""
        document = self._documents.get(uri)
        return tuple(document.groups) if document else ()

    def last_group(self, uri: str) -> EditGroup | None:
        """The document's latest group (perhaps still growing)."""
        document = self._documents.get(uri)
        return document.groups[-1] if document and document.groups else None

    def recent(self) -> tuple[EditGroup, ...]:
        """Every kept group of every recently edited document, oldest change first."""
        every = [g for d in self._documents.values() for g in d.groups]
        return tuple(sorted(every, key=lambda g: g.ended))

    def reverted(self, uri: str) -> frozenset[tuple[str, str]]:
        """Substitutions `(removed, inserted)` the user undid in this document."""
        document = self._documents.get(uri)
        return frozenset(document.reverted) if document else frozenset()

    # --- the rules ----------------------------------------------------------------------

    def _record(
        self,
        uri: str,
        old: str,
        new: str,
        start: int,
        removed: str,
        inserted: str,
        now: float,
        mark: tuple[int, int],
    ) -> EditGroup | None:
        document = self._documents.pop(uri, None) or _Document()
        self._documents[uri] = document  # now the most recently edited
        old_end = start + len(removed)
        span = document.open
        grows = (
            span is not None
            and now - span.ended <= PAUSE_S
            and span.start <= old_end
            and start <= span.start + len(span.inserted)
        )
        published = document.groups[-1] if span is not None and span.published else None
        # Rule 4: the other groups follow the text.
        others = document.groups[:-1] if grows and published else document.groups
        shifted = [self._follow(g, start, old_end, removed, inserted) for g in others]
        if _utf8_size(removed) + _utf8_size(inserted) > MAX_GROUP_BYTES:
            document.groups = [
                self._follow(g, start, old_end, removed, inserted) for g in document.groups
            ]
            document.open = None
            return None
        if grows and span is not None:
            span = _merge(span, old, new, start, old_end, inserted, now)
        else:
            span = _Span(start=start, removed=removed, inserted=inserted, started=now, ended=now)
            published = None
        document.open = span
        prefix, suffix = common_affixes(span.removed, span.inserted)
        if prefix == len(span.removed) == len(span.inserted):  # rule 2: typed, then erased
            if published is not None:
                self._mark_reverted(document, published.substitution)
            span.published = False
            document.groups = shifted
            return None
        group = _with_context(
            EditGroup(
                uri=uri,
                start=span.start + prefix,
                removed=span.removed[prefix : len(span.removed) - suffix],
                inserted=span.inserted[prefix : len(span.inserted) - suffix],
                started=span.started,
                ended=now,
                line=0,
                context_line=0,
                context_before="",
                context_after="",
                typing=(
                    not removed
                    and len(inserted) == 1
                    and (inserted.isalnum() or inserted == "_")
                    and start + 1 == span.start + len(span.inserted)
                ),
            ),
            new,
            mark,
        )
        # Rule 3: does it put back what an earlier group replaced?
        for earlier in shifted:
            if (
                earlier.start == group.start
                and earlier.inserted == group.removed
                and earlier.removed == group.inserted
            ):
                group = replace(group, undoes=True)
                self._mark_reverted(document, earlier.substitution)
        span.published = True
        document.groups = [*shifted, group]
        self._bound()
        return group

    @staticmethod
    def _follow(
        group: EditGroup, start: int, old_end: int, removed: str, inserted: str
    ) -> EditGroup:
        """An older group after the change `removed` at `start` became `inserted`."""
        if group.end <= start:
            return group  # wholly before the change
        if group.start >= old_end:
            lines = inserted.count("\n") - removed.count("\n")
            return replace(
                group,
                start=group.start + len(inserted) - len(removed),
                line=group.line + lines,
                context_line=group.context_line + lines,
            )
        # Overwritten in part: it stays where the change began, as a record of what it did.
        return replace(group, start=min(group.start, start))

    @staticmethod
    def _mark_reverted(document: _Document, substitution: tuple[str, str]) -> None:
        document.reverted.pop(substitution, None)
        document.reverted[substitution] = None
        while len(document.reverted) > MAX_REVERTED:
            del document.reverted[next(iter(document.reverted))]

    def _bound(self) -> None:
        """Rule 5: oldest out, by document recency, then by group age, then by bytes."""
        while len(self._documents) > MAX_DOCUMENTS:
            del self._documents[next(iter(self._documents))]
        for document in self._documents.values():
            if len(document.groups) > MAX_GROUPS_PER_DOCUMENT:
                del document.groups[:-MAX_GROUPS_PER_DOCUMENT]
        total = sum(
            _utf8_size(g.removed) + _utf8_size(g.inserted)
            for d in self._documents.values()
            for g in d.groups
        )
        for document in self._documents.values():  # least recently edited first
            while total > MAX_HISTORY_BYTES and len(document.groups) > 1:
                oldest = document.groups.pop(0)
                total -= _utf8_size(oldest.removed) + _utf8_size(oldest.inserted)
