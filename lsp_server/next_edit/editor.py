"""The next editor: what the language server holds for next edit suggestions (a sibling of
`inline/completer.py`), and the calls its handlers make."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from engine.next_edit_model import NextEditModel, RewriteOutcome
from lsp_server.documents import DocumentSnapshot
from lsp_server.inline.latest import LatestWins, unless_superseded
from lsp_server.next_edit.history import EditGroup, EditHistory
from lsp_server.next_edit.offers import Offer, Offers, Outcome, Source
from lsp_server.next_edit.propagate import ProposedEdit, propagate
from lsp_server.next_edit.region import document_edits, region_input

log = logging.getLogger(__name__)

#: What gives the next-edit model (loaded on first use), or None when there is none.
ModelGetter = Callable[[], Awaitable[NextEditModel | None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Suggestion:
    """A next edit as offered: the edit (code points of the snapshot's text) and its offer."""

    edit: ProposedEdit
    offer: Offer


def half_typed(snap: DocumentSnapshot, group: EditGroup, now: float) -> bool:
    """Whether the word at the cursor is still being typed at `now`: the group's last change
    typed one word character less than `WORD_PAUSE_SECONDS` ago and the cursor stands right
    after it. A client that asks on every change (Neovim with sidekick, 100 ms after it)
    would otherwise be offered `count` -> `tot` on the way to `total`; the word is finished
    once the cursor leaves it, a non-word character is typed after it (a new change, not
    `typing`), or the user paused on it. The group is trimmed to what changed, so the
    letters typed last may stand after its end (`count` retyped up to `t` is `coun`
    removed, the `t` kept): the cursor may follow them, word characters only."""
    if not group.typing or snap.offset < group.end or now - group.ended >= WORD_PAUSE_SECONDS:
        return False
    typed = snap.text[group.end : snap.offset]
    return len(typed) <= _WORD_LIMIT and all(c.isalnum() or c == "_" for c in typed)


#: Seconds without a keystroke after which the word at the cursor is finished: typists leave
#: 100-250 ms between keys, and VS Code's extension asks 300 ms after the last change
#: (editors/vscode/src/nextEdit.ts), when the user has paused on the word. The pause is
#: counted from when the server read the keystroke, which on a loaded machine is later than
#: the key: 100 ms of the 300 are left for that.
WORD_PAUSE_SECONDS = 0.2
#: Characters after a typing group's end that still read as the word being typed.
_WORD_LIMIT = 64


class NextEditor:
    """Next edits for every open document: the edit history each `didChange` feeds, the
    edits proposed from it (propagation first, a next-edit model's rewrite when propagation
    has none), and the offers made (for the accept command and the counts)."""

    def __init__(self) -> None:
        self.history = EditHistory()
        self.offers = Offers()
        self._latest = LatestWins()

    def opened(self, uri: str, text: str) -> None:
        self.history.opened(uri, text)

    def changed(self, uri: str, text: str, now: float) -> None:
        self.history.changed(uri, text, now)

    def forget(self, uri: str) -> None:
        """The document was closed (or grew over the size limit): its history, open offers
        and a rewrite under way go."""
        self.history.closed(uri)
        self.offers.forget(uri)
        self._latest.forget(uri)

    async def suggest(
        self,
        snap: DocumentSnapshot,
        model: ModelGetter | None = None,
        *,
        roots: Sequence[str] = (),
        now: float | None = None,
    ) -> tuple[Suggestion, ...] | None:
        """The next edits for `snap`, nearest first (`now`: the clock `changed` was given,
        time.monotonic; the request's time). None when a newer request for the document
        superseded this one (or the document closed) before it was answered.

        1. Propagation: the last change made again at the places that still hold the old
           text; answered at once.
        2. Else the next-edit model, if there is one: it rewrites the region around the cursor
           and the rewrite's differences are the edits (an undo of the user's last change
           left out).
        Nothing when the history has not seen this very text (the edit the user just made is
        what the suggestions come from) or has no edit of this document.
        """
        if self.history.text(snap.uri) != snap.text:
            return ()
        group = self.history.last_group(snap.uri)
        if group is None:
            return ()
        edits = (
            ()
            if half_typed(snap, group, time.monotonic() if now is None else now)
            else propagate(
                snap.text,
                group,
                reverted=self.history.reverted(snap.uri),
                language_id=snap.language_id,
            )
        )
        if edits:
            return self._offered(snap, edits, Source.PROPAGATION)
        if model is None:
            return ()
        superseded = self._latest.claim(snap.uri)
        try:
            rewritten = await unless_superseded(
                self._rewrite(snap, group, model, roots), superseded
            )
        finally:
            self._latest.release(snap.uri, superseded)
        return None if rewritten is None else self._offered(snap, rewritten, Source.MODEL)

    async def _rewrite(
        self,
        snap: DocumentSnapshot,
        last: EditGroup,
        model: ModelGetter,
        roots: Sequence[str],
    ) -> tuple[ProposedEdit, ...]:
        next_model = await model()
        if next_model is None:
            return ()
        region = region_input(snap, self.history.recent(), next_model.count_tokens, roots=roots)
        reverted = self.history.reverted(snap.uri)
        rewrite = await next_model.rewrite(region.given, cache_key=snap.uri)
        log.info(
            "next-edit rewrite %s: %s, %d edit(s), prompt %d tokens, %d written, %.0f ms%s",
            snap.uri.rsplit("/", 1)[-1],
            rewrite.outcome,
            len(rewrite.edits),
            rewrite.prompt_tokens,
            rewrite.output_tokens,
            rewrite.seconds * 1000,
            f": {rewrite.error}" if rewrite.error else "",
        )
        if rewrite.outcome is not RewriteOutcome.EDITED:
            return ()
        return document_edits(region, rewrite.edits, snap.text, last=last, reverted=reverted)

    def _offered(
        self, snap: DocumentSnapshot, edits: Sequence[ProposedEdit], source: Source
    ) -> tuple[Suggestion, ...]:
        """The edits as offers: an edit offered before for this version keeps its id, and
        one the user rejected for this version is not offered again."""
        version = snap.version or 0
        rejected = self.offers.rejected(snap.uri, version)
        return tuple(
            Suggestion(
                edit=edit,
                offer=self.offers.offer(
                    snap.uri, version, source, (edit.start, edit.end, edit.text)
                ),
            )
            for edit in edits
            if (edit.start, edit.end, edit.text) not in rejected
        )

    def report(self, offer_id: str, outcome: Outcome) -> Offer | None:
        return self.offers.report(offer_id, outcome)
