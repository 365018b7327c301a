"""A document as an editor holds it, for the next-edit tests: changes sent as an editor sends
them (Neovim's rename as a delete and one change per typed character), next edits asked for
and applied as a client applies them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lsp_helpers import Session, apply_changes, lsp_lines, request_json

INLINE_EDIT = "textDocument/copilotInlineEdit"


class Document:
    """A document as the editor holds it: its text and version, changed as an editor sends
    changes."""

    def __init__(self, session: Session, text: str, uri: str, language_id: str) -> None:
        self.session, self.text, self.version = session, text, 1
        self.uri = session.open(text, uri=uri, language_id=language_id)

    def send(self, changes: Sequence[dict[str, Any]]) -> None:
        self.version += 1
        self.session.change(self.uri, self.version, changes)
        self.text = apply_changes(self.text, changes, self.session.encoding)

    def point(self, offset: int) -> dict[str, int]:
        before = self.text[:offset]
        line = len(lsp_lines(before)) - 1
        column = len(lsp_lines(before)[-1])
        position = self.session.position(self.text, line, column)
        return {"line": position.line, "character": position.character}

    def replace(self, old: str, new: str, occurrence: int = 0) -> None:
        """Replace the `occurrence`th `old` by `new` in one change, as VS Code sends a paste."""
        start = _nth(self.text, old, occurrence)
        self.send([{"range": self._range(start, start + len(old)), "text": new}])

    def replace_as_neovim_types(self, old: str, new: str, occurrence: int = 0) -> None:
        """Replace the `occurrence`th `old` by `new` as Neovim sends it: a delete, then one
        change per typed character, all in one notification."""
        start = _nth(self.text, old, occurrence)
        changes = [{"range": self._range(start, start + len(old)), "text": ""}]
        text = self.text[:start] + self.text[start + len(old) :]
        for i, char in enumerate(new):
            at = self._range_in(text, start + i, start + i)
            changes.append({"range": at, "text": char})
            text = text[: start + i] + char + text[start + i :]
        self.send(changes)

    def _range(self, start: int, end: int) -> dict[str, Any]:
        return self._range_in(self.text, start, end)

    def _range_in(self, text: str, start: int, end: int) -> dict[str, Any]:
        def point(offset: int) -> dict[str, int]:
            lines = lsp_lines(text[:offset])
            position = self.session.position(text, len(lines) - 1, len(lines[-1]))
            return {"line": position.line, "character": position.character}

        return {"start": point(start), "end": point(end)}

    async def next_edits(self, cursor: int, version: int | None = None) -> list[dict[str, Any]]:
        params = {
            "textDocument": {
                "uri": self.uri,
                "version": self.version if version is None else version,
            },
            "position": self.point(cursor),
        }
        answer = await request_json(self.session, INLINE_EDIT, params)
        return list(answer["edits"])

    def accept(self, edits: Sequence[dict[str, Any]]) -> None:
        """Apply the edits as a client does: every range is in the text the server saw, so
        from the last to the first."""
        for edit in sorted(
            edits,
            key=lambda e: (e["range"]["start"]["line"], e["range"]["start"]["character"]),
            reverse=True,
        ):
            assert edit["textDocument"] == {"uri": self.uri, "version": self.version}
            self.text = apply_changes(
                self.text, [{"range": edit["range"], "text": edit["text"]}], self.session.encoding
            )


def _nth(text: str, old: str, occurrence: int) -> int:
    at = -1
    for _ in range(occurrence + 1):
        at = text.index(old, at + 1)
    return at
