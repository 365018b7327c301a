"""Documents as the client sees them: LSP line breaks, positions in the negotiated encoding, and
snapshots that refuse positions outside the document.

The documents are pygls's, made by a pygls `Workspace` exactly as the server makes them
(`use_lsp_lines`), and edited through the workspace as `didChange` edits them.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from lsp_helpers import apply_changes, lsp_lines
from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.workspace import TextDocument, Workspace
from pygls.workspace.position_codec import PositionCodec

from lsp_server import documents
from lsp_server.documents import (
    DocumentSnapshot,
    InvalidPosition,
    exceeds_bytes,
    find_document,
    position_at,
    snapshot,
    use_lsp_lines,
)

UTF8 = types.PositionEncodingKind.Utf8
UTF16 = types.PositionEncodingKind.Utf16
UTF32 = types.PositionEncodingKind.Utf32
ENCODINGS = [UTF8, UTF16, UTF32]
URI = "file:///project/example.py"

#: Code points: 0-4 `x = "`, 5 `e`, 6 U+0301 (combining acute), 7 `日`, 8-11 the emoji
#: 👩🏽‍💻 (woman, skin tone, zero-width joiner, laptop), 12 `"`, 13 `;` ... 19 `1`.
LINE = 'x = "e\u0301日👩🏽\u200d💻"; y = 1'
FIRST = "# 日本\n"  # the line above it: 5 code points
TEXT = FIRST + LINE + "\n"


def open_document(text: str, encoding: str, uri: str = URI) -> tuple[Workspace, TextDocument]:
    workspace = Workspace(None, position_encoding=encoding)
    use_lsp_lines(workspace)
    workspace.put_text_document(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
    )
    return workspace, workspace.get_text_document(uri)


def edit(
    workspace: Workspace, version: int, *changes: tuple[tuple[int, int, int, int], str]
) -> TextDocument:
    """Apply `changes` in order, as one `didChange` notification does."""
    for (start_line, start_char, end_line, end_char), text in changes:
        workspace.update_text_document(
            types.VersionedTextDocumentIdentifier(uri=URI, version=version),
            types.TextDocumentContentChangePartial(
                range=types.Range(
                    start=types.Position(line=start_line, character=start_char),
                    end=types.Position(line=end_line, character=end_char),
                ),
                text=text,
            ),
        )
    return workspace.get_text_document(URI)


def at(line: int, character: int) -> types.Position:
    return types.Position(line=line, character=character)


def units(text: str, encoding: str) -> int:
    count: int = PositionCodec(encoding).client_num_units(text)  # pygls: unannotated
    return count


# --- positions in each encoding ---------------------------------------------------------------

# (encoding, client character on LINE, code points before the cursor). The unit counts are
# written out: UTF-16 counts 2 for each astral character (👩, 🏽, 💻), UTF-8 counts bytes.
POSITIONS = [
    (UTF16, 0, 0),
    (UTF16, 5, 5),
    (UTF16, 7, 7),  # after the combining mark
    (UTF16, 8, 8),  # after 日
    (UTF16, 10, 9),  # after 👩 (a surrogate pair)
    (UTF16, 12, 10),  # after the skin tone
    (UTF16, 13, 11),  # after the zero-width joiner
    (UTF16, 15, 12),  # after 💻
    (UTF16, 23, 20),  # the end of the line
    (UTF8, 5, 5),
    (UTF8, 6, 6),
    (UTF8, 8, 7),  # U+0301 is 2 bytes
    (UTF8, 11, 8),  # 日 is 3
    (UTF8, 15, 9),  # 👩 is 4
    (UTF8, 19, 10),
    (UTF8, 22, 11),  # the joiner is 3
    (UTF8, 26, 12),
    (UTF8, 34, 20),
    (UTF32, 12, 12),
    (UTF32, 20, 20),
]


@pytest.mark.parametrize(("encoding", "character", "code_points"), POSITIONS)
def test_a_position_converts_through_the_negotiated_encoding(
    encoding: str, character: int, code_points: int
) -> None:
    _, document = open_document(TEXT, encoding)
    snap = snapshot(document, at(1, character))
    assert snap.line == 1
    assert snap.character == code_points
    assert snap.offset == len(FIRST) + code_points
    assert snap.prefix == FIRST + LINE[:code_points]
    assert snap.suffix == LINE[code_points:] + "\n"
    assert snap.text == TEXT
    assert (snap.uri, snap.version, snap.language_id) == (URI, 1, "python")


@pytest.mark.parametrize(("encoding", "width"), [(UTF16, 23), (UTF8, 34), (UTF32, 20)])
def test_the_end_of_a_line_is_a_position_and_one_past_it_is_refused(
    encoding: str, width: int
) -> None:
    _, document = open_document(TEXT, encoding)
    assert snapshot(document, at(1, width)).suffix == "\n"
    with pytest.raises(InvalidPosition, match="past the end of line 1"):
        snapshot(document, at(1, width + 1))
    # The first line is shorter: a position valid on the second line is not valid there.
    first_width = units("# 日本", encoding)
    assert snapshot(document, at(0, first_width)).offset == len("# 日本")
    with pytest.raises(InvalidPosition, match="past the end of line 0"):
        snapshot(document, at(0, first_width + 1))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_empty_line_after_a_final_line_break_holds_the_cursor(encoding: str) -> None:
    _, document = open_document(TEXT, encoding)
    snap = snapshot(document, at(2, 0))
    assert snap.offset == len(TEXT)
    assert snap.suffix == ""
    with pytest.raises(InvalidPosition, match="past the end of the document"):
        snapshot(document, at(3, 0))
    with pytest.raises(InvalidPosition, match="past the end of line 2"):
        snapshot(document, at(2, 1))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_without_a_final_line_break_the_last_line_is_the_last_position(encoding: str) -> None:
    _, document = open_document("a = 1\nb = 2", encoding)
    assert snapshot(document, at(1, 5)).offset == len("a = 1\nb = 2")
    with pytest.raises(InvalidPosition, match="past the end of the document"):
        snapshot(document, at(2, 0))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_empty_document_has_one_position(encoding: str) -> None:
    _, document = open_document("", encoding)
    snap = snapshot(document, at(0, 0))
    assert (snap.offset, snap.prefix, snap.suffix) == (0, "", "")
    with pytest.raises(InvalidPosition):
        snapshot(document, at(0, 1))
    with pytest.raises(InvalidPosition):
        snapshot(document, at(1, 0))


# --- what is and is not a line break ------------------------------------------------------------

# Characters `str.splitlines` breaks at and LSP does not: only \n, \r\n and \r end a line.
NOT_LINE_BREAKS = ["\u2028", "\u2029", "\u0085", "\f", "\v", "\x1c", "\x1d", "\x1e"]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("separator", NOT_LINE_BREAKS, ids=lambda s: f"U+{ord(s):04X}")
def test_unicode_separators_inside_a_line_do_not_start_a_new_line(
    separator: str, encoding: str
) -> None:
    text = f"a = 'x{separator}y'; b = 1\nc = 2\n"
    _, document = open_document(text, encoding)
    assert len(document.lines) == 2
    before_b = f"a = 'x{separator}y'; "
    snap = snapshot(document, at(0, units(before_b, encoding)))
    assert snap.prefix == before_b
    assert snap.suffix.startswith("b = 1\n")
    # The second line is line 1, and the empty line after the final break is line 2.
    assert snapshot(document, at(1, 4)).suffix == "2\n"
    assert snapshot(document, at(2, 0)).offset == len(text)
    with pytest.raises(InvalidPosition):
        snapshot(document, at(3, 0))


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("separator", NOT_LINE_BREAKS, ids=lambda s: f"U+{ord(s):04X}")
def test_edits_after_a_unicode_separator_apply_at_the_right_place(
    separator: str, encoding: str
) -> None:
    text = f"a = 'x{separator}y'; b = 1\nc = 2\n"
    workspace, _ = open_document(text, encoding)
    one = units(f"a = 'x{separator}y'; b = ", encoding)
    document = edit(
        workspace,
        2,
        ((0, one, 0, one + 1), "42"),  # on the separator's line, after it
        ((1, 4, 1, 5), "3"),  # on the next line
        ((2, 0, 2, 0), f"d = '{separator}'\n"),  # at the very end
    )
    assert document.source == f"a = 'x{separator}y'; b = 42\nc = 3\nd = '{separator}'\n"
    assert document.version == 2


# --- CRLF and CR ------------------------------------------------------------------------------

CRLF_TEXT = "def f():\r\n    return 1\r\n\r\nx = 'é👩'\r\n"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_crlf_line_ends_are_not_positions(encoding: str) -> None:
    _, document = open_document(CRLF_TEXT, encoding)
    snap = snapshot(document, at(1, 12))
    assert snap.prefix == "def f():\r\n    return 1"
    assert snap.suffix == "\r\n\r\nx = 'é👩'\r\n"
    with pytest.raises(InvalidPosition, match="past the end of line 1"):
        snapshot(document, at(1, 13))  # between \r and \n
    assert snapshot(document, at(2, 0)).prefix == "def f():\r\n    return 1\r\n"
    width = units("x = 'é👩'", encoding)
    assert snapshot(document, at(3, width)).suffix == "\r\n"
    assert snapshot(document, at(4, 0)).offset == len(CRLF_TEXT)
    with pytest.raises(InvalidPosition):
        snapshot(document, at(5, 0))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_several_edits_in_one_notification_on_a_crlf_document(encoding: str) -> None:
    workspace, _ = open_document(CRLF_TEXT, encoding)
    after_emoji = units("x = 'é👩", encoding)
    document = edit(
        workspace,
        5,
        ((1, 11, 1, 12), "n"),  # return 1 -> return n
        ((0, 6, 0, 6), "n"),  # f() -> f(n)
        ((2, 0, 3, 0), ""),  # drop the blank line: line 3 becomes line 2
        ((2, after_emoji, 2, after_emoji), "🏽"),  # type after the emoji, on the moved line
        ((3, 0, 3, 0), "y = f(2)\r\n"),  # add a line at the end
    )
    assert document.source == "def f(n):\r\n    return n\r\nx = 'é👩🏽'\r\ny = f(2)\r\n"
    snap = snapshot(document, at(3, 8))
    assert snap.prefix.endswith("\r\ny = f(2)")


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_lone_cr_ends_a_line(encoding: str) -> None:
    _, document = open_document("a = 1\rb = 2\rc", encoding)
    assert snapshot(document, at(1, 5)).prefix == "a = 1\rb = 2"
    assert snapshot(document, at(2, 1)).offset == len("a = 1\rb = 2\rc")
    with pytest.raises(InvalidPosition):
        snapshot(document, at(1, 6))


@pytest.mark.parametrize(
    "text",
    ["a = 1\nb = 2\nc", "a = 1\r\nb = 2\r\nc", "a = 1\rb = 2\rc", "a = 1\u2028x\nb = 2\x0cy\rc"],
)
def test_a_snapshot_at_an_offset_counts_lines_as_the_editor_does(text: str) -> None:
    """The document an accepted suggestion leaves is snapshot at an offset: its line and
    column are those `snapshot` gives for the same place (LSP's three line ends, and nothing
    else ends a line)."""
    _, document = open_document(text, UTF32)
    for offset in range(len(text) + 1):
        if text[offset - 1 : offset + 1] == "\r\n":
            continue  # between the two characters of one line end: no position
        made = DocumentSnapshot.at(text, offset, uri=URI)
        seen = snapshot(document, at(made.line, made.character))
        assert (seen.offset, seen.line, seen.character) == (offset, made.line, made.character)


@pytest.mark.parametrize("encoding", [UTF8, UTF16, UTF32])
@pytest.mark.parametrize("text", ["é = 1\r\nb = '😀'\rc\n", "x", "", "a\u2028b\nλ = 2\n\n"])
def test_an_offset_has_the_position_a_snapshot_of_it_has(text: str, encoding: str) -> None:
    """Where a server-side edit starts and ends, as the client counts: the position from
    which `snapshot` finds the same offset again, in every encoding."""
    _, document = open_document(text, encoding)
    for offset in range(len(text) + 1):
        if text[offset - 1 : offset + 1] == "\r\n":
            continue  # between the two characters of one line end: no position
        position = position_at(text, offset, document.position_codec)
        assert snapshot(document, position).offset == offset
    with pytest.raises(ValueError, match="outside the text"):
        position_at(text, len(text) + 1, document.position_codec)


def test_a_snapshot_does_not_follow_later_edits() -> None:
    workspace, document = open_document("x = 1\n", UTF16)
    snap = snapshot(document, at(0, 4))
    edit(workspace, 2, ((0, 0, 0, 0), "y = 2\n"))
    assert snap.text == "x = 1\n"
    assert (snap.offset, snap.version) == (4, 1)
    assert workspace.get_text_document(URI).source == "y = 2\nx = 1\n"


@pytest.mark.parametrize(
    "uri",
    [
        "file:///ws/my%20dir/x.py",  # a space
        "file:///ws/caf%C3%A9.py",  # a non-ASCII name, escaped as VS Code sends it
        "file:///c%3A/Users/me/x.py",  # a Windows drive as VS Code sends it
        "file:///C:/Users/me/x.py",  # and as Neovim sends it
        "file:///ws/a%23b/c%3Fd.py",  # `#` and `?` in the path
        "untitled:Untitled-1",  # an unsaved buffer
        URI,
    ],
)
def test_an_open_document_is_found_by_the_uri_the_editor_sent(uri: str) -> None:
    workspace, _ = open_document("x = 1\n", UTF16, uri)
    document = find_document(workspace, uri)
    assert document is not None
    assert document.source == "x = 1\n"
    assert document.uri == uri  # edits go back under the URI the editor knows


def test_a_document_that_was_never_opened_is_not_read_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "on disk.py"
    path.write_text("x = 1\n")
    workspace, _ = open_document("y = 2\n", UTF16)
    assert find_document(workspace, path.as_uri()) is None
    workspace.remove_text_document(URI)
    assert find_document(workspace, URI) is None


# --- edits ------------------------------------------------------------------------------------

#: Pieces of text that random documents and edits are made of: every line break, characters of
#: one to four UTF-8 bytes and two UTF-16 units, and a separator that is not a line break.
PIECES = ["a", "bc", " ", "\n", "\r\n", "\r", "é", "日", "👩", "\u2028", "x = 1\n"]


CONVERTER = get_converter()


def _random_text(rng: random.Random, pieces: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(pieces))


def _random_position(rng: random.Random, text: str, encoding: str) -> dict[str, int]:
    lines = lsp_lines(text)
    line = rng.randrange(len(lines))
    content = lines[line]
    return {"line": line, "character": units(content[: rng.randint(0, len(content))], encoding)}


@pytest.mark.parametrize("chunk", [1, 2, 5, documents._CHUNK])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_random_edits_give_the_text_an_independent_model_of_lsp_edits_gives(
    encoding: str, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Edits are applied where the editor means them, on documents with every kind of line
    break, checked against `lsp_helpers.apply_changes` (which shares no code with the server);
    small chunks put chunk ends everywhere, between \r and \n too."""
    monkeypatch.setattr(documents, "_CHUNK", chunk)
    rng = random.Random(f"{encoding} {chunk}")
    for _ in range(200):
        text = _random_text(rng, rng.randint(0, 40))
        workspace, _ = open_document(text, encoding)
        changes = []
        expected = text
        for _ in range(rng.randint(1, 4)):
            a = _random_position(rng, expected, encoding)
            b = _random_position(rng, expected, encoding)
            start, end = sorted([a, b], key=lambda p: (p["line"], p["character"]))
            change = {"range": {"start": start, "end": end}, "text": _random_text(rng, 3)}
            expected = apply_changes(expected, [change], encoding)
            changes.append(change)
        for change in changes:
            workspace.update_text_document(
                types.VersionedTextDocumentIdentifier(uri=URI, version=2),
                CONVERTER.structure(change, types.TextDocumentContentChangePartial),
            )
        document = workspace.get_text_document(URI)
        assert document.source == expected, (text, changes)


def test_an_edit_deep_in_a_large_document_lands_on_its_line() -> None:
    """Whole chunks of lines are skipped by counting; the line the edit is on is still the one
    the editor means."""
    line = "x = compute(a, b)  # a comment\r\n"
    text = line * 20_000
    workspace, _ = open_document(text, UTF16)
    document = edit(workspace, 2, ((15_000, 4, 15_000, 11), "f"), ((19_999, 0, 20_000, 0), "z\n"))
    lines = lsp_lines(document.source)
    assert lines[15_000] == "x = f(a, b)  # a comment"
    assert lines[14_999] == lines[15_001] == line.rstrip("\r\n")
    assert lines[19_999:] == ["z", ""]
    assert len(document.source) == len(text) - 6 - len(line) + 2


@pytest.mark.parametrize(
    ("text", "limit", "over"),
    [
        ("", 0, False),
        ("abc", 3, False),
        ("abcd", 3, True),
        ("日", 3, False),  # three bytes
        ("日", 2, True),  # one character, but three bytes
        ("👩" * 3, 12, False),
        ("👩" * 3, 11, True),
        ("a" * 10, 40, False),  # four bytes a character could take: not encoded
    ],
)
def test_the_size_limit_counts_utf8_bytes(text: str, limit: int, over: bool) -> None:
    assert exceeds_bytes(text, limit) is over
