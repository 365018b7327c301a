"""What users do with inline suggestions, counted per language on this machine: shown,
accepted, partially accepted, rejected, the characters accepted and the characters still there
a minute later. Nothing here is sent anywhere; `usage_file.py` keeps the totals on this
machine.

The server offers each inline suggestion under an id (its item's accept command carries it;
`didShowCompletion` and `didPartiallyAcceptCompletion` name it), and feeds every `didChange`
of a document with open suggestions. Rules, each exact:

1. A suggestion is its text without the closers after the cursor it absorbs (they were in the
   document before it): what accepting it adds. Characters are UTF-16 code units, as the
   protocol counts them (`acceptedLength`) and as editors show a length.
2. Typing along: text typed at the suggestion's point that matches it keeps it open (an
   auto-closed bracket after the match too); asked again there, the server offers the rest
   under the same id, so it is shown once and accepted once.
3. Rejected: a shown suggestion whose point gets typed text that diverges from it. A change
   elsewhere, or a newer suggestion for the document, leaves it neither accepted nor rejected
   (the user moved on; `shown - accepted - rejected` counts those).
4. Accepted: the accept command counts the characters from where the client's item began (or
   the last part taken) to the end; partially accepted: `acceptedLength` units from the start
   of the item the client names (as Copilot's clients count it), each part once.
5. Kept: the characters of each accepted part that no edit has removed or replaced
   `SURVIVAL_S` later (their places follow the document's changes, whichever of the change
   and the client's notice comes first). A document closed or a suggestion forgotten earlier
   is checked then.
6. Bounds: `KEPT_SUGGESTIONS` suggestions (oldest out, its checks done at once),
   `MAX_LANGUAGES` language names (more count as "other").

Single-threaded: the server calls it from its event loop; `now` is the caller's clock
(`time.monotonic()`, or a test's).
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from dataclasses import dataclass, field

from engine.text import common_affixes, common_prefix_length
from lsp_server.outcomes import Outcome, Tally

#: A minute: long enough that the user has read, run or fixed what they took (Copilot checks
#: at 15 s to 10 min; one point keeps one number per language).
SURVIVAL_S = 60.0

#: Suggestions remembered for their outcomes and checks: a few per keystroke that asked, so a
#: late notice still counts; bounded so that a client that reports nothing costs nothing.
KEPT_SUGGESTIONS = 256

#: Language names counted one by one; a client that makes up more gets them under "other".
MAX_LANGUAGES = 64
OTHER_LANGUAGE = "other"
#: A language id as editors write them (`python`, `typescriptreact`, `objective-c`, `c++`).
_LANGUAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+#-]{0,39}")

#: Closers an editor types itself after an opening one (auto-closing pairs): typed along with
#: a suggestion, they do not diverge from it.
_AUTO_CLOSED = frozenset(")]}>\"'`")

#: The character counts, beside the outcomes.
CHARACTERS_ACCEPTED = "characters_accepted"
#: Accepted characters whose minute has passed (kept / checked is the share still there).
CHARACTERS_CHECKED = "characters_checked"
CHARACTERS_KEPT = "characters_kept"
CHARACTER_COUNTS = (CHARACTERS_ACCEPTED, CHARACTERS_CHECKED, CHARACTERS_KEPT)
#: Every count of a language, in the order reports show them.
COUNT_NAMES = (*(o.value for o in Outcome), *CHARACTER_COUNTS)

LanguageCounts = dict[str, int]


def utf16_units(text: str) -> int:
    """`text`'s length in UTF-16 code units (an astral character is two), by the codec."""
    return len(text.encode("utf-16-le")) // 2


def code_points(text: str, units: int) -> int:
    """How many characters of `text` the first `units` UTF-16 units hold (half an astral
    character is none of it)."""
    return len(text.encode("utf-16-le")[: 2 * max(0, units)].decode("utf-16-le", "ignore"))


def language_name(language_id: str) -> str:
    """The client's language id as counted: as it is if it looks like one, else "other"."""
    return language_id if _LANGUAGE.fullmatch(language_id) else OTHER_LANGUAGE


@dataclass(frozen=True, slots=True, kw_only=True)
class Offered:
    """One inline item of an answer: its insert text and the characters after the cursor its
    range covers (closers it absorbs), as the handler sends it."""

    text: str
    absorbed: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialAccept:
    """A `didPartiallyAcceptCompletion`: the suggestion's id, the UTF-16 units taken from the
    start of the client's item, and that item's insert text when the client sent it."""

    id: str
    accepted_length: int
    item_text: str | None = None


@dataclass(slots=True, kw_only=True)
class _Check:
    """An accepted part `[begin, end)` of a suggestion's text, checked at `due`."""

    begin: int
    end: int
    due: float


@dataclass(slots=True, kw_only=True)
class _Suggestion:
    id: str
    uri: str
    language: str
    insert: str  # the insert text as first offered (absorbed closers included)
    text: str  # rule 1: what accepting it adds
    start: int  # where it goes, in code points of the document's last text
    typed: int = 0  # characters of `text` standing at `start` (typed along or taken)
    offered_at: int = 0  # where the client's latest item of it begins in `text`
    taken: int = 0  # how far accepts have taken `text`
    open: bool = True  # no outcome settled yet: can be rejected, continued, superseded
    following: bool = True  # matching text at the point still extends `standing`
    seen: set[Outcome] = field(default_factory=set)
    # Characters of `text` still in the document: (document offset, text offset, length).
    standing: list[tuple[int, int, int]] = field(default_factory=list)
    checks: list[_Check] = field(default_factory=list)

    @property
    def point(self) -> int:
        return self.start + self.typed


class Usage:
    """Inline suggestions offered, and what became of them, counted per language."""

    def __init__(self) -> None:
        self._suggestions: OrderedDict[str, _Suggestion] = OrderedDict()
        self._texts: dict[str, str] = {}  # the last text of each document with suggestions
        self._tally: Tally[str] = Tally()
        self._characters: dict[str, LanguageCounts] = {}
        self._ids = itertools.count(1)

    # --- what the handlers call -------------------------------------------------------

    def offer(
        self, uri: str, language_id: str, text: str, offset: int, items: list[Offered]
    ) -> list[str]:
        """The ids of an answer's items, offered at code point `offset` of the document's
        `text` (its text now). An item that continues an open suggestion keeps its id (rule
        2); the document's other open suggestions are over (rule 3)."""
        if uri in self._texts:
            self.changed(uri, text)  # (a change the server saw is already followed)
        self._texts[uri] = text
        ids: list[str] = []
        continued: set[str] = set()
        for item in items:
            known = self._continued(uri, offset, item.text)
            if known is not None:
                known.offered_at = known.typed
                self._suggestions.move_to_end(known.id)
                continued.add(known.id)
                ids.append(known.id)
                continue
            absorbed = min(item.absorbed, len(item.text))
            closers = text[offset : offset + absorbed]
            keep = len(item.text) - absorbed if closers and item.text.endswith(closers) else None
            suggestion = _Suggestion(
                id=f"ic-{next(self._ids)}",
                uri=uri,
                language=self._language(language_id),
                insert=item.text,
                text=item.text[:keep],
                start=offset,
            )
            self._suggestions[suggestion.id] = suggestion
            ids.append(suggestion.id)
        fresh = set(ids)
        for suggestion in list(self._suggestions.values()):
            if suggestion.uri == uri and suggestion.open and suggestion.id not in fresh:
                suggestion.open = suggestion.following = False
                self._drop_if_done(suggestion)
        self._bound()
        return ids

    def shown(self, suggestion_id: str) -> bool:
        """The client showed it; whether the id is known."""
        suggestion = self._suggestions.get(suggestion_id)
        if suggestion is None:
            return False
        self._tally.note(suggestion.language, suggestion.seen, Outcome.SHOWN)
        return True

    def accepted(self, suggestion_id: str, now: float) -> bool:
        """The accept command ran: the rest of the suggestion from where the client's item
        began (or the last part taken) is accepted (rule 4); whether the id is known."""
        suggestion = self._suggestions.get(suggestion_id)
        if suggestion is None:
            return False
        self._tally.note(suggestion.language, suggestion.seen, Outcome.ACCEPTED)
        begin = max(suggestion.taken, suggestion.offered_at)
        self._take(suggestion, begin, len(suggestion.text), now)
        suggestion.open = False
        self._drop_if_done(suggestion)
        return True

    def partially_accepted(
        self, suggestion_id: str, accepted_units: int, item_text: str | None, now: float
    ) -> bool:
        """`accepted_units` UTF-16 units of the client's item (`item_text`, its insert text,
        when the client sent it) were taken; whether the id is known."""
        suggestion = self._suggestions.get(suggestion_id)
        if suggestion is None:
            return False
        begin = suggestion.offered_at
        if item_text is not None and suggestion.insert.endswith(item_text):
            begin = len(suggestion.insert) - len(item_text)
        item = suggestion.insert[begin:]
        end = min(begin + code_points(item, accepted_units), len(suggestion.text))
        self._tally.note(suggestion.language, suggestion.seen, Outcome.PARTIALLY_ACCEPTED)
        self._take(suggestion, max(suggestion.taken, begin), end, now)
        return True

    def changed(self, uri: str, new_text: str) -> None:
        """`didChange`, after the changes are applied (a document without suggestions costs a
        dictionary look-up): each suggestion of the document follows the change."""
        old = self._texts.get(uri)
        if old is None or old is new_text:
            return
        self._texts[uri] = new_text
        prefix, suffix = common_affixes(old, new_text)
        start, old_end = prefix, len(old) - suffix
        inserted = new_text[prefix : len(new_text) - suffix]
        for suggestion in [s for s in self._suggestions.values() if s.uri == uri]:
            self._follow(suggestion, start, old_end, inserted)
            self._drop_if_done(suggestion)

    def due(self, now: float) -> None:
        """Check every accepted part whose minute has passed (rule 5)."""
        for suggestion in list(self._suggestions.values()):
            for check in [c for c in suggestion.checks if c.due <= now]:
                self._check(suggestion, check)
            self._drop_if_done(suggestion)

    def next_due(self) -> float | None:
        """When the next check is due, if any is waiting."""
        return min((c.due for s in self._suggestions.values() for c in s.checks), default=None)

    def forget(self, uri: str) -> None:
        """The document was closed: its accepted parts are checked now, as it was left."""
        for suggestion in [s for s in self._suggestions.values() if s.uri == uri]:
            for check in list(suggestion.checks):
                self._check(suggestion, check)
            del self._suggestions[suggestion.id]
        self._texts.pop(uri, None)

    def finish(self) -> None:
        """The server is shutting down: every waiting check is done now."""
        for uri in {s.uri for s in self._suggestions.values()}:
            self.forget(uri)

    def counts(self) -> dict[str, LanguageCounts]:
        """Every count per language, languages in the order first counted."""
        outcomes = self._tally.counts()
        report: dict[str, LanguageCounts] = {}
        for language in dict.fromkeys([*outcomes, *self._characters]):
            row = dict.fromkeys(COUNT_NAMES, 0)
            row.update(outcomes.get(language, {}))
            row.update(self._characters.get(language, {}))
            report[language] = row
        return report

    # --- the rules ----------------------------------------------------------------------

    def _language(self, language_id: str) -> str:
        name = language_name(language_id)
        known = set(self._tally.counts()) | set(self._characters)
        known |= {s.language for s in self._suggestions.values()}
        if name not in known and len(known) >= MAX_LANGUAGES:
            return OTHER_LANGUAGE
        return name

    def _continued(self, uri: str, offset: int, text: str) -> _Suggestion | None:
        """The open suggestion of the document that `text` at `offset` is the rest of."""
        for suggestion in reversed(self._suggestions.values()):
            if (
                suggestion.uri == uri
                and suggestion.open
                and suggestion.following
                and suggestion.point == offset
                and suggestion.insert[suggestion.typed :] == text
            ):
                return suggestion
        return None

    def _take(self, suggestion: _Suggestion, begin: int, end: int, now: float) -> None:
        """`text[begin:end]` accepted: counted, and checked `SURVIVAL_S` later."""
        if end <= begin:
            return
        self._add(suggestion.language, CHARACTERS_ACCEPTED, utf16_units(suggestion.text[begin:end]))
        suggestion.checks.append(_Check(begin=begin, end=end, due=now + SURVIVAL_S))
        suggestion.taken = end

    def _follow(self, suggestion: _Suggestion, start: int, old_end: int, inserted: str) -> None:
        """One change (`[start, old_end)` of the old text became `inserted`) applied to what
        the suggestion knows of the document."""
        point = suggestion.point
        delta = len(inserted) - (old_end - start)
        typed_along = 0
        if start == old_end == point and inserted and suggestion.following:
            # Rule 2: typing (or the client's accept) at the point.
            rest = suggestion.text[suggestion.typed :]
            matched = common_prefix_length(inserted, rest)
            after = inserted[matched:]
            if matched == len(inserted) or (matched and set(after) <= _AUTO_CLOSED):
                typed_along = matched
            else:
                if suggestion.open and Outcome.SHOWN in suggestion.seen:
                    self._tally.note(suggestion.language, suggestion.seen, Outcome.REJECTED)
                suggestion.open = suggestion.following = False
        elif inserted == "" and old_end == point and suggestion.start <= start:
            # Erased back along it: still on show while nothing taken was erased (what is
            # typed again after an accepted part was erased is the user's, not kept text).
            suggestion.typed = start - suggestion.start
            suggestion.following = suggestion.open and suggestion.typed >= suggestion.taken
        elif start <= point and old_end >= suggestion.start:
            suggestion.following = False  # changed where it stands: it no longer applies
        elif old_end <= suggestion.start:
            suggestion.start += delta
        # Rule 5: the characters standing follow the change.
        standing: list[tuple[int, int, int]] = []
        for at, offset, length in suggestion.standing:
            if old_end <= at:
                standing.append((at + delta, offset, length))
            elif start >= at + length:
                standing.append((at, offset, length))
            else:
                if start > at:
                    standing.append((at, offset, start - at))
                if old_end < at + length:
                    cut = old_end - at
                    standing.append((old_end + delta, offset + cut, length - cut))
        if typed_along:
            standing.append((point, suggestion.typed, typed_along))
            suggestion.typed += typed_along
        suggestion.standing = standing

    def _check(self, suggestion: _Suggestion, check: _Check) -> None:
        kept = sum(
            utf16_units(suggestion.text[max(check.begin, offset) : min(check.end, offset + n)])
            for _, offset, n in suggestion.standing
            if offset < check.end and offset + n > check.begin
        )
        self._add(
            suggestion.language,
            CHARACTERS_CHECKED,
            utf16_units(suggestion.text[check.begin : check.end]),
        )
        self._add(suggestion.language, CHARACTERS_KEPT, kept)
        suggestion.checks.remove(check)

    def _add(self, language: str, name: str, n: int) -> None:
        row = self._characters.setdefault(language, dict.fromkeys(CHARACTER_COUNTS, 0))
        row[name] += n

    def _drop_if_done(self, suggestion: _Suggestion) -> None:
        """A suggestion with no outcome left to come and no check waiting is forgotten, and
        a document with no suggestion left is no longer followed."""
        if suggestion.open or suggestion.checks:
            return
        self._suggestions.pop(suggestion.id, None)
        if not any(s.uri == suggestion.uri for s in self._suggestions.values()):
            self._texts.pop(suggestion.uri, None)

    def _bound(self) -> None:
        while len(self._suggestions) > KEPT_SUGGESTIONS:
            _, oldest = self._suggestions.popitem(last=False)
            for check in list(oldest.checks):
                self._check(oldest, check)
            if not any(s.uri == oldest.uri for s in self._suggestions.values()):
                self._texts.pop(oldest.uri, None)
