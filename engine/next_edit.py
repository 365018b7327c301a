"""Next-edit prompts: each next-edit model's
prompt format, the stops that end its answer, reading the answer back as a rewritten editable
region, and that rewrite as minimal edits.

A next-edit model is shown the user's recent edits (unified diffs, or old and new blocks) and
the code around the cursor with an editable region marked in it; it answers with the region
rewritten. The formats are the ones the published models were trained on, each checked against
its makers' own code (cited at each format). Formats are named by the `nextEditFormat` setting
(`zeta1`, `zeta2`, `sweep`, `none`), or detected from the tokenizer's special tokens like FIM
families (engine/fim.py).

Detection is deliberately narrow: a format is detected only when its own markers are special
tokens of the tokenizer. Zeta v1 keeps its markers as plain text in its base model's tokenizer
(Sweep's write-up, blog.sweep.dev/posts/oss-next-edit, counts 7 tokens each), and Zeta 2's
FIM tokens are every Seed-Coder's, as Sweep's `<|file_sep|>` is every Qwen2.5-Coder's:
detecting on those would take any base coder for a next-edit model, so for such a model the
setting names the format.

Prompts are pieces, as `fim.fim_pieces` makes them: a marker (special token by id where the
tokenizer has it, text otherwise) or the user's text, which is never parsed for special tokens
for a local model. A remote server gets the pieces' text.

Sweep Next-Edit follows Sweep's own code: `sweep-autocomplete` (PyPI 0.1.1, Apache-2.0, by
Sweep AI), the local server Sweep's VS Code extension (sweepai/vscode-nes, commit fa52a26)
starts for its local mode, which builds the prompt, its stops and reads the answer
(sweep_autocomplete/autocomplete/next_edit_autocomplete.py, cited at the format). The model
cards on the Hugging Face hub could not be read here; re-implementations found elsewhere
differ from Sweep's server in details (a `.diff` suffix on the edits' sections, no line
ranges, conflict markers in place of `original:` / `updated:`), and were not followed.

Left out, for want of a source by its makers to check it against: Continue Instinct (its
training code, continuedev/instinct, was not available; Continue's client, core/nextEdit,
shows it is chat messages with the model's chat template, Zeta v1's markers and a long system
prompt of Continue's own: a chat rendering this module does not have, and text to copy
verbatim).
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.fim import Piece, encode_pieces
from engine.text import common_affixes
from engine.types import StopConditions

if TYPE_CHECKING:
    from engine.backend import Tokenizer


class NextEditFamily(enum.StrEnum):
    """The next-edit formats, by the `nextEditFormat` value that names each."""

    ZETA1 = "zeta1"
    ZETA2 = "zeta2"
    SWEEP = "sweep"


#: What `nextEditFormat` may be: a family, or "none" for no next-edit model.
NEXT_EDIT_FORMAT_SETTINGS: tuple[str, ...] = (*(f.value for f in NextEditFamily), "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecentEdit:
    """One recent edit of a file: its path and its unified diff (hunks from `@@`; a `---` /
    `+++` header, if there is one, is dropped: each format names the file its own way)."""

    path: str
    diff: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NextEditInput:
    """What a next-edit prompt is made of. `text` is the document's text around the cursor;
    the editable region (`region_start`, `region_end`) and the `cursor` are offsets into it
    (code points). `at_file_start`: `text` begins at the start of the file. `edits`: the
    recent edits, oldest first."""

    path: str
    text: str
    region_start: int
    region_end: int
    cursor: int
    edits: tuple[RecentEdit, ...] = ()
    at_file_start: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.region_start <= self.cursor <= self.region_end <= len(self.text):
            raise ValueError(
                "need 0 <= region_start <= cursor <= region_end <= len(text), got "
                f"{self.region_start}, {self.cursor}, {self.region_end}, {len(self.text)}"
            )

    @property
    def before(self) -> str:
        return self.text[: self.region_start]

    @property
    def region(self) -> str:
        return self.text[self.region_start : self.region_end]

    @property
    def after(self) -> str:
        return self.text[self.region_end :]

    @property
    def before_cursor(self) -> str:
        return self.text[self.region_start : self.cursor]

    @property
    def after_cursor(self) -> str:
        return self.text[self.cursor : self.region_end]


# A piece (`fim.Piece`) is (is a special token, text): a marker is a special piece where the
# tokenizer has it as one, and text otherwise; other pieces are the user's text.


@dataclass(frozen=True, slots=True, kw_only=True)
class NextEditFormat:
    """A next-edit model's format.

    `signature`: the special tokens a tokenizer must have for the format to be detected
    (its own markers; see the module docstring). `markers`: every marker the format writes
    (a remote server reads them in the user's code too: a caller may refuse such code).
    `end`: the text that ends the rewrite; generation stops there, and it is kept in the
    output so that `parse` can tell a finished rewrite from a cut one. `also_ends`: other
    texts that end it as `end` does. `ends_at_eos`: the model's own end-of-generation token
    (hidden, no stop reason) ends a rewrite too; otherwise a rewrite ended there is cut.
    """

    family: NextEditFamily
    signature: tuple[str, ...]
    markers: tuple[str, ...]
    end: str
    pieces: Callable[[NextEditInput], list[Piece]]
    also_ends: tuple[str, ...] = ()
    ends_at_eos: bool = False
    #: The rewritten region read from the model's answer (which ends with `end` when the
    #: model finished), for the prompt made of the input; None when it is no valid rewrite.
    parse: Callable[[str, NextEditInput], str | None]

    @property
    def ends(self) -> tuple[str, ...]:
        """Every text that ends a rewrite, `end` first."""
        return (self.end, *self.also_ends)


def _hunks(diff: str) -> str:
    """`diff` without a `---` / `+++` file header, ending in a newline."""
    lines = diff.splitlines(keepends=True)
    while lines and lines[0].startswith(("--- ", "+++ ")):
        lines.pop(0)
    text = "".join(lines)
    return text if not text or text.endswith("\n") else text + "\n"


def _rust_debug_str(text: str) -> str:
    """`text` quoted as Rust's `{:?}` writes a path: in double quotes, with `"`, `\\` and
    a newline escaped."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _line_ended(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


class _Pieces:
    """Pieces built in order; adjacent text is joined."""

    def __init__(self) -> None:
        self.items: list[Piece] = []

    def marker(self, text: str) -> None:
        self.items.append((True, text))

    def text(self, text: str) -> None:
        if not text:
            return
        if self.items and not self.items[-1][0]:
            self.items[-1] = (False, self.items[-1][1] + text)
        else:
            self.items.append((False, text))


# --- Zeta v1 ----------------------------------------------------------------------------------
# Zed's Zeta (zed-industries/zeta, Qwen2.5-Coder-7B tuned). Followed: zed-industries/zed
# crates/zeta/src/zeta.rs (the markers, events written as `User edited {path:?}:` and a ```diff
# block, joined by a blank line, oldest first; parsing the answer between the region markers,
# the cursor marker removed) and crates/zeta_prompt/src/zeta_prompt.rs `mod zeta1` (the
# instruction, the section headers, the excerpt: ```path, `<|start_of_file|>` where the excerpt
# starts the file, the region's start marker on its own line, a newline before the end marker).
# The event's path is quoted as zeta.rs's `{:?}` wrote it while the model's training data was
# gathered (the later `mod zeta1` writes it unquoted).
# The region is meant to be whole lines, ending before a newline, as Zed cuts it.

_ZETA1_CURSOR = "<|user_cursor_is_here|>"
_ZETA1_START_OF_FILE = "<|start_of_file|>"
_ZETA1_REGION_START = "<|editable_region_start|>"
_ZETA1_REGION_END = "<|editable_region_end|>"
_ZETA1_INSTRUCTION = (
    "### Instruction:\n"
    "You are a code completion assistant and your task is to analyze user edits and then "
    "rewrite an excerpt that the user provides, suggesting the appropriate edits within the "
    "excerpt, taking into account the cursor location.\n\n"
    "### User Edits:\n\n"
)
_ZETA1_EXCERPT_HEADER = "\n\n### User Excerpt:\n\n"
_ZETA1_RESPONSE_HEADER = "\n\n### Response:\n"


def _zeta1_pieces(given: NextEditInput) -> list[Piece]:
    out = _Pieces()
    out.text(_ZETA1_INSTRUCTION)
    events = [
        f"User edited {_rust_debug_str(edit.path)}:\n```diff\n{_hunks(edit.diff)}\n```"
        for edit in given.edits
        if _hunks(edit.diff)
    ]
    out.text("\n\n".join(events))
    out.text(_ZETA1_EXCERPT_HEADER)
    out.text(f"```{given.path}\n")
    if given.at_file_start:
        out.marker(_ZETA1_START_OF_FILE)
        out.text("\n")
    out.text(given.before)
    out.marker(_ZETA1_REGION_START)
    out.text("\n" + given.before_cursor)
    out.marker(_ZETA1_CURSOR)
    out.text(given.after_cursor + "\n")
    out.marker(_ZETA1_REGION_END)
    out.text(given.after + "\n```" + _ZETA1_RESPONSE_HEADER)
    return out.items


def _zeta1_parse(answer: str, given: NextEditInput) -> str | None:
    """The region between the answer's region markers (the model writes the excerpt back),
    the newline after the start marker and before the end marker dropped, the cursor marker
    removed as Zed does. None without exactly one of each marker in that order, or with an
    other marker of the format inside."""
    if answer.count(_ZETA1_REGION_START) != 1 or answer.count(_ZETA1_REGION_END) != 1:
        return None
    start = answer.index(_ZETA1_REGION_START) + len(_ZETA1_REGION_START)
    end = answer.index(_ZETA1_REGION_END)
    if end < start:
        return None
    region = answer[start:end]
    if _ZETA1_START_OF_FILE in region:
        return None
    region = region.removeprefix("\n")
    region = region.removesuffix("\n")
    return region.replace(_ZETA1_CURSOR, "")


ZETA1 = NextEditFormat(
    family=NextEditFamily.ZETA1,
    signature=(_ZETA1_REGION_START, _ZETA1_CURSOR, _ZETA1_REGION_END),
    markers=(_ZETA1_START_OF_FILE, _ZETA1_REGION_START, _ZETA1_CURSOR, _ZETA1_REGION_END),
    end=_ZETA1_REGION_END,
    pieces=_zeta1_pieces,
    parse=_zeta1_parse,
)


# --- Zeta 2 -----------------------------------------------------------------------------------
# Zed's Zeta 2 (zed-industries/zeta-2, Seed-Coder-8B tuned). Followed: zed-industries/zed
# crates/zeta_prompt/src/zeta_prompt.rs `mod seed_coder` (Zed's `V0211SeedCoder` format, named
# "Zeta2" there): SPM order, the code after the region behind `<[fim-suffix]>`, then behind
# `<[fim-prefix]>` the edit history as a `<filename>edit_history` file of `--- a/path` /
# `+++ b/path` diffs and a blank line, then `<filename>path`, the code before the region and
# the region between `<<<<<<< CURRENT` and `=======` with `<|user_cursor|>` in it, then
# `<[fim-middle]>`. The model writes the new region and `>>>>>>> UPDATED`; Zed strips that
# end marker and the cursor marker (`clean_zeta2_model_output`). Related files, which Zed
# puts before the history, are not given here.

_ZETA2_FIM_SUFFIX = "<[fim-suffix]>"
_ZETA2_FIM_PREFIX = "<[fim-prefix]>"
_ZETA2_FIM_MIDDLE = "<[fim-middle]>"
_ZETA2_FILE = "<filename>"
_ZETA2_CURSOR = "<|user_cursor|>"
_ZETA2_CURRENT = "<<<<<<< CURRENT"
_ZETA2_SEPARATOR = "======="
_ZETA2_UPDATED = ">>>>>>> UPDATED"


def _zeta2_path(path: str) -> str:
    return path.lstrip("/")


def _zeta2_pieces(given: NextEditInput) -> list[Piece]:
    out = _Pieces()
    out.marker(_ZETA2_FIM_SUFFIX)
    out.text(_line_ended(given.after) or "\n")
    out.marker(_ZETA2_FIM_PREFIX)
    events = [
        f"--- a/{_zeta2_path(e.path)}\n+++ b/{_zeta2_path(e.path)}\n{_hunks(e.diff)}"
        for e in given.edits
        if _hunks(e.diff)
    ]
    if events:
        out.marker(_ZETA2_FILE)
        out.text("edit_history\n" + "".join(events) + "\n")
    out.marker(_ZETA2_FILE)
    out.text(f"{given.path}\n{given.before}")
    out.marker(_ZETA2_CURRENT)
    out.text("\n" + given.before_cursor)
    out.marker(_ZETA2_CURSOR)
    # Zed ends the region's last line before the separator where the region does not.
    out.text(_line_ended(given.after_cursor) or "\n")
    out.marker(_ZETA2_SEPARATOR)
    out.text("\n")
    out.marker(_ZETA2_FIM_MIDDLE)
    return out.items


def _zeta2_parse(answer: str, given: NextEditInput) -> str | None:
    """The new region: the answer up to its `>>>>>>> UPDATED` line, the cursor marker
    removed as Zed does, and the line end the prompt added to a region without one dropped
    again. None without the end marker, with other text after it, or with a block marker of
    the format inside (the model opening another block)."""
    end = answer.find(_ZETA2_UPDATED)
    if end < 0 or answer[end + len(_ZETA2_UPDATED) :].strip("\n"):
        return None
    region = answer[:end]
    if end > 0 and not region.endswith("\n"):
        return None  # the end marker starts a line of its own
    if _ZETA2_CURRENT in region:
        return None
    region = region.replace(_ZETA2_CURSOR, "")
    if not given.region.endswith("\n"):
        region = region.removesuffix("\n")
    return region


ZETA2 = NextEditFormat(
    family=NextEditFamily.ZETA2,
    # Seed-Coder's FIM tokens alone are every Seed-Coder's: the cursor marker must be special.
    signature=(_ZETA2_FIM_SUFFIX, _ZETA2_FIM_PREFIX, _ZETA2_FIM_MIDDLE, _ZETA2_CURSOR),
    markers=(
        _ZETA2_FIM_SUFFIX,
        _ZETA2_FIM_PREFIX,
        _ZETA2_FIM_MIDDLE,
        _ZETA2_FILE,
        _ZETA2_CURSOR,
        _ZETA2_CURRENT,
        _ZETA2_SEPARATOR,
        _ZETA2_UPDATED,
    ),
    end=_ZETA2_UPDATED,
    pieces=_zeta2_pieces,
    parse=_zeta2_parse,
)


# --- Sweep Next-Edit --------------------------------------------------------------------------
# Sweep's Next-Edit models (sweepai/sweep-next-edit-0.5B and -1.5B, Qwen2.5-Coder tuned).
# Followed: Sweep's own local server, the `sweep-autocomplete` package (PyPI 0.1.1, Apache-2.0,
# by Sweep AI; what Sweep's VS Code extension, sweepai/vscode-nes at fa52a26, starts for its
# local mode), sweep_autocomplete/autocomplete/next_edit_autocomplete.py (`prompt`,
# `diff_format`, `format_recent_changes_and_prev_section`, `_fetch_next_edits_core`) and
# next_edit_autocomplete_utils.py (`extract_diff_parts`, `parse_hunk`,
# `strip_leading_empty_newlines`). Qwen2.5-Coder's repository layout: a `<|file_sep|>` before
# each "file". First the file, as it was before the recent edits; then each recent edit as a
# file named `path:start:end` holding `original:` and `updated:` (its changed lines with one
# line of context), oldest first, the last six; then the region as `original/path:s:e` (the
# recent edits undone in it), `current/path:s:e` (as it is, `<|cursor|>` at the cursor) and
# `updated/path:s:e`, after which the model writes the new region and ends with `<|file_sep|>`
# or `<|endoftext|>` (the server's stops). `s:e` are as the server writes them: the cursor's
# line within the region (from 1), and that plus the region's line count.
# Left as Sweep's server leaves them for its local model: no retrieved snippets of other files
# and no prefill (the region's first lines written for the model: its `changes_above_cursor`
# mode) - the region is the model's to rewrite whole, as with the Zeta formats. Two choices of
# ours: the file section is the shown window with the edits undone in the region only (the
# server has the file as it was opened), and only edits of this file are undone in it (the
# server tries every file's).

_SWEEP_FILE = "<|file_sep|>"
_SWEEP_CURSOR = "<|cursor|>"
_SWEEP_END_OF_TEXT = "<|endoftext|>"
#: Recent edits shown: the server keeps the last six.
_SWEEP_MAX_EDITS = 6
#: A line the server's training data sometimes ends an answer with (its comment says so).
_SWEEP_NO_NEWLINE = " No newline at end of file"


def _diff_sides(hunks: str, context: int) -> tuple[str, str]:
    """The old and the new text of a diff's body lines (`@@` lines skipped), from `context`
    lines before its first changed line to `context` after its last."""
    body = [line for line in hunks.splitlines(keepends=True) if not line.startswith("@@")]
    changed = [i for i, line in enumerate(body) if line.startswith(("-", "+"))]
    if not changed:
        return "", ""
    old: list[str] = []
    new: list[str] = []
    for line in body[max(0, changed[0] - context) : changed[-1] + context + 1]:
        if not line.startswith("+"):
            old.append(line[1:])
        if not line.startswith("-"):
            new.append(line[1:])
    return "".join(old), "".join(new)


def _sweep_lines(hunks: str) -> tuple[int, int]:
    """The range a recent edit is named by, as the server's `parse_hunk` reads it: the new
    side's first line from the first `@@` header, and its last (the server counts the new
    side's lines from the second line after the header). (1, 1) without a header."""
    lines = hunks.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("@@")), None)
    if header is None:
        return 1, 1
    fields = lines[header].split()
    try:
        start = int(fields[2].lstrip("+").split(",")[0])
    except (IndexError, ValueError):
        return 1, 1
    count = sum(1 for line in lines[header + 2 :] if not line.startswith(("-", "@@")))
    return start, start + count - 1


def _sweep_changes(edits: Sequence[RecentEdit]) -> list[tuple[RecentEdit, str, str]]:
    """The recent edits the prompt shows, oldest first, each with its old and new text (one
    line of context): as the server, whitespace-only edits left out, the last six kept."""
    shown = []
    for edit in edits:
        hunks = _hunks(edit.diff)
        old, new = _diff_sides(hunks, 0)
        if old.strip() == new.strip():
            continue
        shown.append((edit, *_diff_sides(hunks, 1)))
    return shown[-_SWEEP_MAX_EDITS:]


def _sweep_original(region: str, given: NextEditInput) -> str:
    """The region before the recent edits of its file that the prompt shows: newest first,
    each edit's new text (with a line of context, else without) put back to its old text,
    until one is not found."""
    for edit, _, _ in reversed(_sweep_changes(given.edits)):
        if edit.path != given.path:
            continue
        hunks = _hunks(edit.diff)
        for context in (1, 0):
            old, new = _diff_sides(hunks, context)
            if new.strip() and new in region:
                region = region.replace(new, old, 1)
                break
        else:
            break
    return region


def _sweep_cursor_line(region: str, at: int) -> int:
    """The cursor's line in the region, from 0, as the server's `get_line_number_from_position`
    counts it."""
    if at <= 0:
        return 0
    if at >= len(region):
        return max(0, len(region.splitlines()) - 1)
    return region.count("\n", 0, at)


def _sweep_pieces(given: NextEditInput) -> list[Piece]:
    current = given.region
    original = _sweep_original(current, given)
    if current.endswith("\n") and original.endswith("\n"):
        current, original = current[:-1], original[:-1]
    line = _sweep_cursor_line(given.region, given.cursor - given.region_start)
    span = f"{line + 1}:{line + len(current.splitlines()) + 1}"
    out = _Pieces()
    out.marker(_SWEEP_FILE)
    # The file as it was: the region's full original (its line end kept).
    out.text(f"{given.path}\n{given.before}{_sweep_original(given.region, given)}{given.after}")
    out.text("\n")
    for i, (edit, old, new) in enumerate(_sweep_changes(given.edits)):
        if i:
            out.text("\n")
        start, end = _sweep_lines(_hunks(edit.diff))
        out.marker(_SWEEP_FILE)
        old, new = old.strip("\n"), new.strip("\n")
        out.text(f"{edit.path}:{start}:{end}\noriginal:\n{old}\nupdated:\n{new}")
    out.text("\n")
    out.marker(_SWEEP_FILE)
    out.text(f"original/{given.path}:{span}\n{original}\n")
    out.marker(_SWEEP_FILE)
    cut = given.cursor - given.region_start
    out.text(f"current/{given.path}:{span}\n{current[:cut]}")
    out.marker(_SWEEP_CURSOR)
    out.text(f"{current[cut:]}\n")
    out.marker(_SWEEP_FILE)
    out.text(f"updated/{given.path}:{span}\n")
    return out.items


def _leading_blank_lines(text: str) -> int:
    lines = text.split("\n")
    count = 0
    while count < len(lines) - 1 and not lines[count].strip():
        count += 1
    return count


def _sweep_parse(answer: str, given: NextEditInput) -> str | None:
    """The new region: the answer up to its end (`<|file_sep|>` or `<|endoftext|>`), read as
    the server reads it: an answer opening with a special token is none, the line its
    training data sometimes adds after the code dropped, blank lines the region does not start
    with dropped from the start, the cursor marker removed (unless the code spells it), and
    the line end the prompt put after the region dropped again. An empty answer is the region
    unchanged, as the server reads it. None without the end, with text after it, or with a
    section marker inside (the model writing another file)."""
    for end in (_SWEEP_FILE, _SWEEP_END_OF_TEXT):
        at = answer.find(end)
        if at >= 0:
            break
    else:
        return None
    if answer[at + len(end) :].strip():
        return None
    region = answer[:at]
    if _SWEEP_FILE in region or _SWEEP_END_OF_TEXT in region or region.startswith("<|"):
        return None
    if region.rstrip("\n").endswith(_SWEEP_NO_NEWLINE):
        region = region.split(_SWEEP_NO_NEWLINE, 1)[0]
    lines = region.split("\n")
    extra = _leading_blank_lines(region) - _leading_blank_lines(given.region)
    region = "\n".join(lines[max(0, extra) :])
    if _SWEEP_CURSOR not in given.region:
        region = region.replace(_SWEEP_CURSOR, "")
    if not region.strip("\n"):
        return given.region
    region = region.removesuffix("\n")
    return region + "\n" if given.region.endswith("\n") else region


SWEEP = NextEditFormat(
    family=NextEditFamily.SWEEP,
    # `<|file_sep|>` alone is every Qwen2.5-Coder's: the cursor marker must be special too.
    signature=(_SWEEP_FILE, _SWEEP_CURSOR),
    markers=(_SWEEP_FILE, _SWEEP_CURSOR),
    end=_SWEEP_FILE,
    also_ends=(_SWEEP_END_OF_TEXT,),
    # `<|endoftext|>` is Qwen2.5-Coder's end of generation: a backend that stops there on its
    # own (hidden, as a model's EOS is) has still seen the rewrite end.
    ends_at_eos=True,
    pieces=_sweep_pieces,
    parse=_sweep_parse,
)

#: Detection order: most specific signature first.
NEXT_EDIT_FORMATS: tuple[NextEditFormat, ...] = (ZETA2, SWEEP, ZETA1)
NEXT_EDIT_FAMILIES: dict[str, NextEditFormat] = {f.family.value: f for f in NEXT_EDIT_FORMATS}


def detect_next_edit_format(
    special_token_id: Callable[[str], int | None],
) -> NextEditFormat | None:
    """The format whose own markers are all special tokens of this tokenizer, or None."""
    for fmt in NEXT_EDIT_FORMATS:
        if all(special_token_id(token) is not None for token in fmt.signature):
            return fmt
    return None


def next_edit_format(
    setting: str | None, special_token_id: Callable[[str], int | None]
) -> NextEditFormat | None:
    """The format `nextEditFormat` names ("none": no next-edit model), else (unset) the one
    the tokenizer's special tokens name. A named format needs no special tokens: the published
    models write their markers as text. ValueError for a name that is no format."""
    if setting is None:
        return detect_next_edit_format(special_token_id)
    if setting == "none":
        return None
    fmt = NEXT_EDIT_FAMILIES.get(setting)
    if fmt is None:
        raise ValueError(
            f"nextEditFormat {setting!r} is none of {', '.join(NEXT_EDIT_FORMAT_SETTINGS)}"
        )
    return fmt


def next_edit_pieces(
    fmt: NextEditFormat, given: NextEditInput, *, has_token: Callable[[str], bool]
) -> list[Piece]:
    """The prompt's pieces: markers the tokenizer has as special tokens flagged, every other
    marker joined into the text around it (the published models saw them as text)."""
    out = _Pieces()
    for is_marker, text in fmt.pieces(given):
        if is_marker and has_token(text):
            out.marker(text)
        else:
            out.text(text)
    return out.items


def next_edit_stops(
    fmt: NextEditFormat, special_token_id: Callable[[str], int | None]
) -> StopConditions:
    """Where generation ends: at the format's end markers, kept in the output for `parse`
    (a special token's id where the tokenizer has it as one, else the text)."""
    ids: list[int] = []
    texts: list[str] = []
    for end in fmt.ends:
        token_id = special_token_id(end)
        if token_id is not None:
            ids.append(token_id)
        else:
            texts.append(end)
    return StopConditions(
        stop=tuple(texts),
        stop_token_ids_visible=tuple(ids),
        include_stop_str_in_output=bool(texts),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class NextEditPrompt:
    """A next-edit prompt: a local model's token ids (None for a remote server, which gets
    `text`), its text (for logs), its format's family and where its generation ends."""

    token_ids: tuple[int, ...] | None
    text: str
    family: NextEditFamily
    stops: StopConditions


def build_next_edit_prompt(
    backend: Tokenizer, fmt: NextEditFormat, given: NextEditInput
) -> NextEditPrompt:
    """The prompt as `backend`'s ids: the model's BOS where it wants one, the markers it has
    as special tokens by id, everything else (the user's code above all) as plain text."""

    def special(token: str) -> int:
        token_id = backend.special_token_id(token)
        assert token_id is not None  # a marker is a special piece only where the tokenizer has it
        return token_id

    pieces = next_edit_pieces(
        fmt, given, has_token=lambda t: backend.special_token_id(t) is not None
    )
    ids, text = encode_pieces(backend, pieces, special=special)
    return NextEditPrompt(
        token_ids=tuple(ids),
        text=text,
        family=fmt.family,
        stops=next_edit_stops(fmt, backend.special_token_id),
    )


def render_next_edit_text(fmt: NextEditFormat, given: NextEditInput) -> NextEditPrompt:
    """The prompt as text, for a remote server that tokenizes it with its model's tokenizer
    (and adds its own BOS). The server parses all of it for special tokens: code that spells
    a marker out reaches its model as that marker, as with `fim.render_fim_text`."""
    return NextEditPrompt(
        token_ids=None,
        text="".join(text for _, text in fmt.pieces(given)),
        family=fmt.family,
        stops=next_edit_stops(fmt, no_special_token),
    )


def no_special_token(token: str) -> int | None:
    """A remote server's ids are unknown here: it has no special token we could name (its
    stops are text, its format is the one named)."""
    return None


def parse_rewrite(fmt: NextEditFormat, answer: str, given: NextEditInput) -> str | None:
    """The editable region as the model rewrote it in `answer` (its text up to and with the
    end marker), for the prompt made of `given`; None when the answer is no valid rewrite
    (cut before its end marker, markers missing, doubled or out of order)."""
    return fmt.parse(answer, given)


# --- The rewrite as edits ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionEdit:
    """Replace the old region's `start:end` (code points) with `text`."""

    start: int
    end: int
    text: str


def region_edits(old: str, new: str) -> tuple[RegionEdit, ...]:
    """The rewrite `old` -> `new` as minimal, non-overlapping edits in order of offset.

    1. The two are compared line by line (difflib, no junk heuristic), so that changes on
       separate lines are separate edits (a run of changed lines as many as before, one edit
       a line), and a deleted or added line is one edit of whole lines.
    2. Each changed run of lines is trimmed to what it changes: the common prefix and suffix
       of its old and new text (character by character) are left out of the edit.
    Line ends are text like any other: a CRLF stays a CRLF, and only a changed one is edited.
    """
    if old == new:
        return ()
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    old_at = _offsets(old_lines)
    new_at = _offsets(new_lines)
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    edits: list[RegionEdit] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            # As many lines as before: each changed line is its own edit.
            runs = [(i1 + k, i1 + k + 1, j1 + k, j1 + k + 1) for k in range(i2 - i1)]
        else:
            runs = [(i1, i2, j1, j2)]
        for a1, a2, b1, b2 in runs:
            before = old[old_at[a1] : old_at[a2]]
            after = new[new_at[b1] : new_at[b2]]
            if before != after:
                _add(edits, _trimmed(old_at[a1], before, after))
    return tuple(edits)


def _add(edits: list[RegionEdit], edit: RegionEdit) -> None:
    """Append `edit`, joined with the last one where they touch."""
    if edits and edits[-1].end == edit.start:
        last = edits.pop()
        edit = RegionEdit(start=last.start, end=edit.end, text=last.text + edit.text)
    edits.append(edit)


def apply_region_edits(old: str, edits: Sequence[RegionEdit]) -> str:
    """`old` with `edits` (non-overlapping, in order) applied."""
    out: list[str] = []
    at = 0
    for edit in edits:
        if edit.start < at or edit.end < edit.start or edit.end > len(old):
            raise ValueError(f"edits overlap or leave the region: {edit}")
        out += [old[at : edit.start], edit.text]
        at = edit.end
    out.append(old[at:])
    return "".join(out)


def _offsets(lines: Sequence[str]) -> list[int]:
    at = [0]
    for line in lines:
        at.append(at[-1] + len(line))
    return at


def _trimmed(start: int, old: str, new: str) -> RegionEdit:
    """The edit replacing `old` (at `start`) by `new`, less what both begin and end with."""
    head, tail = common_affixes(old, new)
    return RegionEdit(
        start=start + head,
        end=start + len(old) - tail,
        text=new[head : len(new) - tail],
    )
