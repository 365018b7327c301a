"""Context beyond the current file: snippets of the other open documents.

Two sources, as in the editors' assistants users know:
- neighbouring documents (Copilot's "neighboring tabs"): sliding windows of lines over every
  other open document, ranked by the Jaccard similarity of their identifiers to the lines
  around the cursor;
- recently edited or viewed regions (llama.vim's ring of chunks): where the user edited
  (`didChange`) or asked for a completion, newest first, near ones merged, oldest evicted;
  a region's text is read from its document when a selection is made, so it is never stale.

The best candidates that fit the `contextTokens` budget are chosen, then ordered by document
and line (never by score), and put at the very start of the prompt. The selection is kept per
document and made again only when the cursor leaves its region (more than `REGION_LINES` lines
from where it was made), the budget or model changes, or a snippet's document was closed or
changed a lot: typing keeps the prompt's start byte-identical, so the model's KV cache is
reused from one keystroke to the next.

Everything here runs on the event loop; what crosses into the prompt is frozen.
"""

from __future__ import annotations

import enum
import keyword
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from engine.fim import RepoFile
from engine.text import split_lines
from lsp_server.documents import DocumentSnapshot, lines_at

log = logging.getLogger(__name__)

#: Lines in a window over a neighbouring document, and how far the next one starts. Small
#: windows: the budget is a few hundred tokens, and a 20-line window is about a function.
WINDOW_LINES = 20
WINDOW_STRIDE = 10
#: Lines up to the cursor that the candidates are compared with (Copilot compares with the
#: lines before the cursor: what the user is writing now).
QUERY_LINES = 20
#: How far (in lines) the cursor may move from where the selection was made before it is
#: made again.
REGION_LINES = 16
#: Recently edited or viewed regions kept, and the lines each holds.
RING_REGIONS = 16
RING_LINES = 20
#: The most a recent region's score is raised by its recency (the newest gets all of it);
#: only a region that shares some identifier with the cursor's lines is a candidate.
RECENT_BONUS = 0.1
#: Other documents looked at, most recently used first, and how much of each: a selection
#: over huge files costs no more than over a few ordinary ones.
MAX_DOCUMENTS = 16
MAX_SCAN_CHARS = 256 * 1024
#: A kept snippet whose lines now share less than this (Jaccard of identifiers) with what
#: was taken has "changed a lot": the selection is made again.
STILL_THE_SAME = 0.5
#: Documents whose selection is kept.
KEPT_DOCUMENTS = 64
#: A candidate whose non-blank lines are this much already in the current file near the
#: cursor tells the model nothing new, and a copy of the very code being written (the same
#: file open twice, a duplicate) makes it repeat what is there: left out (llama.vim's rule).
ALREADY_THERE = 0.9
#: Characters around the cursor that count as "near" for that rule.
NEAR_CHARS = 16_000

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Words that say nothing about which code is related.
_STOP_WORDS = frozenset(keyword.kwlist) | {"self", "cls", "None", "True", "False", "return"}


@dataclass(frozen=True, slots=True, kw_only=True)
class OtherDocument:
    """Another open document as a request saw it (the text is shared, not copied)."""

    uri: str
    version: int | None
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Snippet:
    """Whole lines of another document, labelled with its path."""

    uri: str
    path: str
    first_line: int
    text: str

    @property
    def line_count(self) -> int:
        return len(split_lines(self.text))


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptContext:
    """What goes in front of the current file in the prompt."""

    path: str  # the current document's label
    repo: str | None  # the workspace folder's name, where the format names a repository
    language_id: str
    snippets: tuple[Snippet, ...]

    def files(self) -> tuple[RepoFile, ...]:
        return tuple(RepoFile(path=s.path, text=s.text) for s in self.snippets)


class PlainStyle(enum.StrEnum):
    """How other files are written for a model without file markers
    (docs/decisions/crossfile-context.md measures both). CODE: a path comment line, then the
    code as it is. COMMENTS: the code commented out line by line under "Compare this snippet
    from PATH:" (Copilot's form)."""

    CODE = "code"
    COMMENTS = "comments"


#: The plain-text form used (the winner in docs/decisions/crossfile-context.md on the default
#: model).
PLAIN_STYLE = PlainStyle.CODE

#: Line comments by LSP language id (the ranking's second prompt and its test of a comment
#: line use it too, lsp_server/rerank.py); a language not named here gets `//` in a path
#: comment.
LINE_COMMENTS: dict[str, str] = {
    **dict.fromkeys(
        (
            "javascript",
            "javascriptreact",
            "typescript",
            "typescriptreact",
            "java",
            "c",
            "cpp",
            "csharp",
            "go",
            "rust",
            "swift",
            "kotlin",
            "scala",
            "dart",
            "php",
        ),
        "//",
    ),
    **dict.fromkeys(
        (
            "python",
            "ruby",
            "perl",
            "r",
            "shellscript",
            "powershell",
            "yaml",
            "toml",
            "dockerfile",
            "makefile",
            "elixir",
            "julia",
            "nim",
            "coffeescript",
            "cmake",
        ),
        "#",
    ),
    **dict.fromkeys(("lua", "sql", "haskell", "elm", "ada", "purescript"), "--"),
    **dict.fromkeys(("clojure", "lisp", "scheme", "racket"), ";"),
    **dict.fromkeys(("erlang", "matlab", "latex", "tex", "prolog"), "%"),
    "vb": "'",
    "vim": '"',
    "bat": "REM",
}
#: Languages with block comments only.
_BLOCK_COMMENT: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("html", "xml", "markdown", "vue", "svelte"), ("<!--", "-->")),
    **dict.fromkeys(("css", "scss", "less"), ("/*", "*/")),
}


def comment(language_id: str, text: str) -> str:
    """`text` (one line, no break) as a comment line in the language."""
    if language_id in _BLOCK_COMMENT:
        start, end = _BLOCK_COMMENT[language_id]
        return f"{start} {text} {end}"
    return f"{LINE_COMMENTS.get(language_id, '//')} {text}"


def render_plain(context: PromptContext, style: PlainStyle = PLAIN_STYLE) -> str:
    """The snippets as text in the current file's language, to go before its prefix; each
    starts on a line of its own, and the current file's path comment ends it."""
    lang = context.language_id
    out: list[str] = []
    for snippet in context.snippets:
        text = snippet.text if snippet.text.endswith("\n") else snippet.text + "\n"
        if style is PlainStyle.CODE:
            out.append(comment(lang, snippet.path) + "\n" + text)
        else:
            out.append(comment(lang, f"Compare this snippet from {snippet.path}:") + "\n")
            out.extend(comment(lang, line).rstrip() + "\n" for line in text.splitlines())
    out.append(comment(lang, context.path) + "\n")
    return "".join(out)


# --- paths ------------------------------------------------------------------------------------


def _file_path(uri: str) -> str | None:
    """The decoded path of a `file:` URI, a drive letter in lower case (`/c:/x`), else None."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        return None
    path = unquote(parts.path)
    return re.sub(r"^/([A-Za-z]):", lambda m: "/" + m.group(1).lower() + ":", path)


def display_path(uri: str, roots: Sequence[str] = ()) -> tuple[str, str | None]:
    """The label of a document, and the name of the workspace folder holding it: its path
    relative to that folder, else its file name. URIs as editors send them (`c%3A` drives,
    `%20`, non-ASCII, `untitled:Untitled-1`) are decoded."""
    path = _file_path(uri)
    if path is None:  # untitled:, vscode-notebook-cell:, ...
        name = unquote(urlsplit(uri).path or uri).rstrip("/").rsplit("/", 1)[-1]
        return name or uri, None
    for root_uri in roots:
        root = _file_path(root_uri)
        if root is None:
            continue
        root = root.rstrip("/")
        if path.startswith(root + "/"):
            return path[len(root) + 1 :], root.rsplit("/", 1)[-1] or None
    return path.rstrip("/").rsplit("/", 1)[-1], None


# --- ranking ----------------------------------------------------------------------------------


def identifiers(text: str) -> frozenset[str]:
    """The identifiers of `text`, without keywords (what Jaccard similarity compares)."""
    return frozenset(_IDENTIFIER.findall(text)) - _STOP_WORDS


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def query_text(snap: DocumentSnapshot) -> str:
    """The `QUERY_LINES` lines up to the cursor that candidates are compared with (the
    cursor's whole line among them)."""
    prefix = snap.prefix
    start = len(prefix)
    for _ in range(QUERY_LINES):
        start = prefix.rfind("\n", 0, start)
        if start < 0:
            start = 0
            break
    end = snap.text.find("\n", snap.offset)
    return snap.text[start : len(snap.text) if end < 0 else end]


def windows(uri: str, path: str, text: str) -> list[Snippet]:
    """Sliding windows of `WINDOW_LINES` lines every `WINDOW_STRIDE` lines over the start of
    `text` (at most `MAX_SCAN_CHARS` of it); blank windows left out."""
    lines = split_lines(text[:MAX_SCAN_CHARS])
    out = []
    for first in range(0, max(len(lines) - WINDOW_LINES, 0) + WINDOW_STRIDE, WINDOW_STRIDE):
        chunk = "".join(lines[first : first + WINDOW_LINES])
        if chunk.strip():
            out.append(Snippet(uri=uri, path=path, first_line=first, text=chunk))
        if first + WINDOW_LINES >= len(lines):
            break
    return out


def already_there(text: str, near: frozenset[str]) -> bool:
    """Whether `text`'s non-blank lines are (stripped) mostly among the lines in `near`."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return bool(lines) and sum(line in near for line in lines) >= ALREADY_THERE * len(lines)


def _overlaps(a: Snippet, b: Snippet) -> bool:
    return (
        a.uri == b.uri
        and a.first_line < b.first_line + b.line_count
        and b.first_line < a.first_line + a.line_count
    )


def select_snippets(
    scored: Iterable[tuple[float, Snippet]],
    *,
    budget: int,
    count_tokens: Callable[[str], int],
    header: Callable[[Snippet], str],
) -> tuple[Snippet, ...]:
    """The best-scoring snippets that fit `budget` tokens (each with its `header`), none
    overlapping another; then ordered by path and line, adjacent ones of a document merged,
    so that the order says nothing of the scores and stays put when they shift."""
    chosen: list[Snippet] = []
    left = budget
    ranked = sorted(scored, key=lambda item: (-item[0], item[1].path, item[1].first_line))
    for score, snippet in ranked:
        if score <= 0 or left <= 0:
            break
        if any(_overlaps(snippet, other) for other in chosen):
            continue
        cost = count_tokens(snippet.text) + count_tokens(header(snippet))
        if cost > left:
            continue
        chosen.append(snippet)
        left -= cost
    chosen.sort(key=lambda s: (s.path, s.uri, s.first_line))
    merged: list[Snippet] = []
    for snippet in chosen:
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.uri == snippet.uri
            and last.first_line + last.line_count == snippet.first_line
        ):
            text = last.text if last.text.endswith("\n") else last.text + "\n"
            merged[-1] = Snippet(
                uri=last.uri, path=last.path, first_line=last.first_line, text=text + snippet.text
            )
        else:
            merged.append(snippet)
    return tuple(merged)


# --- the kept state ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Kept:
    """A document's selection and what it was made for."""

    anchor_line: int
    budget: int
    count_tokens: Callable[[str], int]
    context: PromptContext
    versions: tuple[tuple[str, int | None], ...]  # of the snippets' documents


class NeighborContext:
    """The ring of recent regions and each document's kept selection (event loop only)."""

    def __init__(self) -> None:
        self._ring: OrderedDict[tuple[str, int], None] = OrderedDict()  # oldest first
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self.selections = 0  # how many selections were made (tests, logs)

    def note(self, uri: str, line: int) -> None:
        """The user edited or looked at `line` of `uri`: its region becomes the newest; a
        region of the same document that overlaps it by half or more is replaced."""
        first = max(0, line - RING_LINES // 2)
        for key in [k for k in self._ring if k[0] == uri and abs(k[1] - first) < RING_LINES // 2]:
            del self._ring[key]
        self._ring[(uri, first)] = None
        while len(self._ring) > RING_REGIONS:
            self._ring.popitem(last=False)

    def forget(self, uri: str) -> None:
        """A closed document: its regions and its selection go (other documents' selections
        that quote it are made again at their next request)."""
        for key in [k for k in self._ring if k[0] == uri]:
            del self._ring[key]
        self._kept.pop(uri, None)

    def recent_uris(self) -> list[str]:
        """Documents by their most recent region, newest first."""
        return list(dict.fromkeys(uri for uri, _ in reversed(self._ring)))

    def context_for(
        self,
        snap: DocumentSnapshot,
        others: Mapping[str, OtherDocument],
        *,
        budget: int,
        count_tokens: Callable[[str], int],
        roots: Sequence[str] = (),
    ) -> PromptContext | None:
        """The context for a request at `snap`: the kept selection while it holds (see the
        module docstring), else a new one. None when `budget` is 0 (no context)."""
        if budget <= 0:
            self._kept.pop(snap.uri, None)
            return None
        kept = self._kept.get(snap.uri)
        if kept is not None and self._holds(kept, snap, others, budget, count_tokens):
            self._kept.move_to_end(snap.uri)
            return kept.context
        context = self._select(snap, others, budget, count_tokens, roots)
        self._kept[snap.uri] = _Kept(
            anchor_line=snap.line,
            budget=budget,
            count_tokens=count_tokens,
            context=context,
            versions=tuple(dict.fromkeys((s.uri, others[s.uri].version) for s in context.snippets)),
        )
        self._kept.move_to_end(snap.uri)
        while len(self._kept) > KEPT_DOCUMENTS:
            self._kept.popitem(last=False)
        return context

    def _holds(
        self,
        kept: _Kept,
        snap: DocumentSnapshot,
        others: Mapping[str, OtherDocument],
        budget: int,
        count_tokens: Callable[[str], int],
    ) -> bool:
        if kept.budget != budget or kept.count_tokens is not count_tokens:
            return False
        if abs(snap.line - kept.anchor_line) > REGION_LINES:
            return False
        versions = dict(kept.versions)
        for snippet in kept.context.snippets:
            document = others.get(snippet.uri)
            if document is None:
                return False  # closed
            if document.version == versions.get(snippet.uri):
                continue
            now = lines_at(document.text, snippet.first_line, snippet.line_count)
            if jaccard(identifiers(now), identifiers(snippet.text)) < STILL_THE_SAME:
                return False
        return True

    def _select(
        self,
        snap: DocumentSnapshot,
        others: Mapping[str, OtherDocument],
        budget: int,
        count_tokens: Callable[[str], int],
        roots: Sequence[str],
    ) -> PromptContext:
        """1. The documents to look at: the recently used ones first, then the others.
        2. Candidates: their windows, and the recent regions (raised by their recency); not
           those already near the cursor in the current file.
        3. The best that fit the budget, in document and line order."""
        self.selections += 1
        path, repo = display_path(snap.uri, roots)
        context = PromptContext(path=path, repo=repo, language_id=snap.language_id, snippets=())
        recent = [uri for uri in self.recent_uris() if uri in others]
        order = list(dict.fromkeys([*recent, *others]))
        order = [uri for uri in order if uri != snap.uri][:MAX_DOCUMENTS]
        query = identifiers(query_text(snap))
        if not order or not query:
            return context
        paths = {uri: display_path(uri, roots)[0] for uri in order}
        around = snap.text[max(0, snap.offset - NEAR_CHARS) : snap.offset + NEAR_CHARS // 4]
        near = frozenset(line.strip() for line in around.splitlines())
        scored: list[tuple[float, Snippet]] = []
        for uri in order:
            for window in windows(uri, paths[uri], others[uri].text):
                if not already_there(window.text, near):
                    scored.append((jaccard(query, identifiers(window.text)), window))
        regions = [key for key in reversed(self._ring) if key[0] in paths]
        for age, (uri, first) in enumerate(regions):
            text = lines_at(others[uri].text, first, RING_LINES)
            if not text.strip() or already_there(text, near):
                continue
            similarity = jaccard(query, identifiers(text))
            if similarity == 0:  # recency alone is no reason: unrelated code misleads
                continue
            region = Snippet(uri=uri, path=paths[uri], first_line=first, text=text)
            scored.append((similarity + RECENT_BONUS * (1 - age / RING_REGIONS), region))

        def header(snippet: Snippet) -> str:
            return comment(snap.language_id, snippet.path) + "\n"

        snippets = select_snippets(scored, budget=budget, count_tokens=count_tokens, header=header)
        log.debug(
            "context for %s: %d snippet(s) from %d document(s)",
            path,
            len(snippets),
            len({s.uri for s in snippets}),
        )
        return PromptContext(path=path, repo=repo, language_id=snap.language_id, snippets=snippets)
