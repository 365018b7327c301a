"""Propagation, the second source of next edits: the last edit's substitution at the other places
that still hold the old tokens, without a model.

Each case is a document before and after the user's edit, and the document a user would see
after accepting every proposal; the proposals are applied as an editor applies them. Every
case also checks what an editor relies on: proposals are minimal, do not overlap, never touch
the place just edited, and come nearest first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsp_server.next_edit.history import PAUSE_S, EditHistory
from lsp_server.next_edit.propagate import ProposedEdit, propagate

URI = "file:///work/src/example"


def apply(text: str, edits: tuple[ProposedEdit, ...]) -> str:
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


def proposals(before: str, after: str) -> tuple[ProposedEdit, ...]:
    """What propagation proposes after the user turned `before` into `after` (one edit)."""
    history = EditHistory()
    history.opened(URI, before)
    group = history.changed(URI, after, now=0.0)
    assert group is not None
    edits = propagate(after, group, reverted=history.reverted(URI))
    check_shape(after, edits, group.start, group.end)
    return edits


def check_shape(text: str, edits: tuple[ProposedEdit, ...], start: int, end: int) -> None:
    spans = sorted((e.start, e.end) for e in edits)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(spans))
    for edit in edits:
        assert edit.end <= start or edit.start >= end, "the place just edited is never proposed"
        old = text[edit.start : edit.end]
        assert not (old and edit.text and old[0] == edit.text[0]), "common prefix not trimmed"
        assert not (old and edit.text and old[-1] == edit.text[-1]), "common suffix not trimmed"
    distances = [abs(e.start - start) for e in edits]
    assert distances == sorted(distances), "nearest first"


@dataclass(frozen=True)
class Case:
    name: str
    before: str
    edit: tuple[str, str]  # the first occurrence of [0] in `before` becomes [1]
    expected: str  # the document with every proposal accepted


PY_RENAME = """\
def area(width, height):
    count = width * height
    print("count", count)  # count is the area
    return count


def other():
    count = 1
    return count
"""

PY_LITERAL = """\
PORT = 8080
FALLBACK = 18080


def serve(app):
    app.run(port=8080)  # 8080 by default
    log("listening on 8080")
    return connect("localhost", 8080)
"""

PY_ARGUMENT = """\
def load(url):
    first = fetch(url, 3)
    second = fetch(url, 3)
    third = fetch(url, 4)
    other = prefetch(url, 3)
    return fetch(url, 3), first, second, third, other
"""

TS_RENAME = """\
export function total(items: number[]): number {
  let sum = 0;
  for (const item of items) {
    sum += item; // sum so far
  }
  return sum;
}

export function summary(): string {
  const sum = "sum";
  return sum;
}
"""

TS_ARGUMENT = """\
export function paint(ui: Ui): void {
  setTheme(ui.header, "light");
  setTheme(ui.body, "light");
  setTheme(ui.footer, "light-ish");
  // "light" until the user picks
}
"""

GO_RENAME = """\
package stats

func Sum(values []int) int {
\ttotal := 0
\tfor _, v := range values {
\t\ttotal += v // running total
\t}
\treturn total
}
"""

GO_LITERAL = """\
package main

func main() {
\tgo serve(":8080")
\thealth(":8080")
\tlog.Printf("serving :8080")
}
"""

RUST_RENAME = """\
fn longest<'a>(x: &'a str, y: &'a str) -> &'a str {
    if x.len() > y.len() {
        x
    } else {
        y
    }
}

fn other(x: u32) -> u32 {
    x + 1
}
"""

RUST_ARGUMENT = """\
fn timeouts() -> [Duration; 3] {
    let connect = Duration::from_secs(30);
    let read = Duration::from_secs(30);
    let total = Duration::from_secs(300);
    [connect, read, total]
}
"""

CASES = [
    Case(
        "python rename of a local stays in its function, out of strings and comments",
        PY_RENAME,
        ("count =", "total ="),
        PY_RENAME.replace("count =", "total =", 1).replace(
            '    print("count", count)  # count is the area\n    return count\n\n',
            '    print("count", total)  # count is the area\n    return total\n\n',
        ),
    ),
    Case(
        "python changed literal: whole numbers only, in code only",
        PY_LITERAL,
        ("PORT = 8080", "PORT = 9090"),
        PY_LITERAL.replace("PORT = 8080", "PORT = 9090")
        .replace("port=8080", "port=9090")
        .replace('"localhost", 8080', '"localhost", 9090'),
    ),
    Case(
        "python added argument where the call is the same",
        PY_ARGUMENT,
        ("fetch(url, 3)", "fetch(url, 3, retries=2)"),
        PY_ARGUMENT.replace(" fetch(url, 3)", " fetch(url, 3, retries=2)"),
    ),
    Case(
        "typescript rename of a local",
        TS_RENAME,
        ("let sum", "let acc"),
        TS_RENAME.replace("let sum", "let acc")
        .replace("    sum += item;", "    acc += item;")
        .replace("  return sum;\n}\n\nexport", "  return acc;\n}\n\nexport"),
    ),
    Case(
        "typescript changed string argument: equal literals in code only",
        TS_ARGUMENT,
        ('header, "light"', 'header, "dark"'),
        TS_ARGUMENT.replace('header, "light"', 'header, "dark"').replace(
            'body, "light"', 'body, "dark"'
        ),
    ),
    Case(
        "go rename with tabs",
        GO_RENAME,
        ("total := 0", "sum := 0"),
        GO_RENAME.replace("total := 0", "sum := 0")
        .replace("total += v", "sum += v")
        .replace("return total", "return sum"),
    ),
    Case(
        "go changed literal",
        GO_LITERAL,
        ('serve(":8080")', 'serve(":9090")'),
        GO_LITERAL.replace('(":8080")', '(":9090")'),
    ),
    Case(
        "rust parameter rename on the header stays in the function; lifetimes are no strings",
        RUST_RENAME,
        ("x: &'a str", "first: &'a str"),
        RUST_RENAME.replace("x: &'a str", "first: &'a str")
        .replace("if x.len()", "if first.len()")
        .replace("        x\n", "        first\n"),
    ),
    Case(
        "rust changed argument: the same number, not a longer one",
        RUST_ARGUMENT,
        ("from_secs(30);\n    let read", "from_secs(60);\n    let read"),
        RUST_ARGUMENT.replace("from_secs(30)", "from_secs(60)"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_propagation_reaches_the_document_a_user_expects(case: Case) -> None:
    old, new = case.edit
    assert old in case.before
    after = case.before.replace(old, new, 1)

    edits = proposals(case.before, after)

    assert apply(after, edits) == case.expected


def test_an_added_keyword_before_a_call_reaches_its_other_calls() -> None:
    before = (
        "async def show(user_id):\n"
        "    user = fetch_user(user_id)\n"
        "    posts = fetch_posts(user_id)\n"
        "    friend = fetch_user(user.friend)\n"
        "    again = await fetch_user(user_id)\n"
        "    return prefetch_user(user_id)\n"
    )
    after = before.replace("user = fetch_user", "user = await fetch_user")

    edits = proposals(before, after)

    assert apply(after, edits) == after.replace("friend = fetch_user", "friend = await fetch_user")


def test_an_added_keyword_on_a_definition_needs_the_same_line() -> None:
    method = "    def run(self):\n        pass\n"
    before = f"class A:\n{method}\n\nclass B:\n{method}"
    after = before.replace("    def run", "    async def run", 1)

    edits = proposals(before, after)

    assert apply(after, edits) == before.replace("def run", "async def run")


def test_a_renamed_function_reaches_its_callers_outside_it() -> None:
    before = "def load(path):\n    return open(path)\n\n\ndata = load('a')\nmore = load('b')\n"
    after = before.replace("def load", "def read")

    edits = proposals(before, after)

    assert apply(after, edits) == before.replace("load", "read")


def test_nearest_first_and_minimal() -> None:
    before = "n = 1\nm = n\nk = n\nj = n\n"
    after = before.replace("k = n", "k = nn")  # the middle use, extended

    edits = proposals(before, after)

    assert [after[: e.start].count("\n") for e in edits] == [1, 3, 0]
    assert all(e.start == e.end and e.text == "n" for e in edits)
    assert apply(after, edits) == "nn = 1\nm = nn\nk = nn\nj = nn\n"


def test_only_whole_tokens_and_same_side_of_a_dot() -> None:
    before = "count = 0\ncounter = count\nself.count = count + recount\n"
    after = before.replace("count = 0", "total = 0")

    edits = proposals(before, after)

    assert apply(after, edits) == "total = 0\ncounter = total\nself.count = total + recount\n"


def test_nothing_when_every_other_use_is_in_a_string_or_comment() -> None:
    before = (
        'timeout = 5\n# timeout in seconds\nprint("timeout")\n'
        "doc = '''the timeout\nis long'''\nurl = `timeout`\n"
    )
    after = before.replace("timeout = 5", "deadline = 5")

    assert proposals(before, after) == ()


def test_slash_comments_in_c_like_code_and_division_in_python() -> None:
    ts = "const rate = 2;\n// rate per second\n/* rate\n   again */\nuse(rate);\n"
    ts_after = ts.replace("const rate", "const speed")
    assert apply(ts_after, proposals(ts, ts_after)) == ts_after.replace("use(rate)", "use(speed)")

    py = "rate = 2\nhalf = rate // 2  # rate halved\nuse(rate)\n"
    py_after = py.replace("rate = 2", "speed = 2")
    assert apply(py_after, proposals(py, py_after)) == (
        "speed = 2\nhalf = speed // 2  # rate halved\nuse(speed)\n"
    )


def test_an_edit_inside_a_comment_propagates_in_comments() -> None:
    before = "# owner: alice\nx = 1  # ask alice\nalice = 2\n"
    after = before.replace("owner: alice", "owner: bob")

    edits = proposals(before, after)

    assert apply(after, edits) == "# owner: bob\nx = 1  # ask bob\nbob = 2\n"


def test_punctuation_alone_is_not_propagated() -> None:
    before = "if a == b:\n    pass\nif c == d:\n    pass\n"
    after = before.replace("a == b", "a != b")

    assert proposals(before, after) == ()


def test_a_whitespace_change_is_not_propagated() -> None:
    before = "x = f(a,b)\ny = f(a,b)\n"
    after = before.replace("f(a,b)", "f(a, b)", 1)

    assert proposals(before, after) == ()


def test_nothing_after_an_undo() -> None:
    before = "count = 0\ncount += 1\nprint(count)\n"
    renamed = before.replace("count = 0", "total = 0")
    history = EditHistory()
    history.opened(URI, before)
    first = history.changed(URI, renamed, now=0.0)
    assert first is not None
    assert propagate(renamed, first) != ()

    undo = history.changed(URI, before, now=PAUSE_S + 5)  # Ctrl+Z after a pause

    assert undo is not None
    assert propagate(before, undo, reverted=history.reverted(URI)) == ()
    # The same rename typed again is not proposed either: the user said no to it.
    again = history.changed(URI, renamed, now=PAUSE_S + 20)
    assert again is not None
    assert propagate(renamed, again, reverted=history.reverted(URI)) == ()


def test_nothing_after_an_undo_within_the_pause() -> None:
    before = "count = 0\nprint(count)\n"
    renamed = before.replace("count = 0", "total = 0")
    history = EditHistory()
    history.opened(URI, before)
    history.changed(URI, renamed, now=0.0)
    assert history.changed(URI, before, now=0.3) is None

    again = history.changed(URI, renamed, now=10.0)

    assert again is not None
    assert propagate(renamed, again, reverted=history.reverted(URI)) == ()


def test_neovim_rename_sent_as_many_changes_in_one_notification() -> None:
    before = "count = 0\ncount += 1\nprint(count)\n"
    text = before
    text = text[:0] + text[5:]  # `ciw`: the word deleted
    for i, char in enumerate("total"):  # then one change per typed character
        text = text[:i] + char + text[i:]
    history = EditHistory()
    history.opened(URI, before)

    group = history.changed(URI, text, now=0.0)  # all of them, applied by pygls

    assert group is not None
    edits = propagate(text, group)
    assert apply(text, edits) == before.replace("count", "total")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ("a = 1\nprint(a)", "a = 1\nprint(b)", "b = 1\nprint(b)"),
        ("a = 1\nprint(a)", "b = 1\nprint(a)", "b = 1\nprint(b)"),
        ("y = f\ny = f", "y = f\ny = f()", "y = f()\ny = f()"),
        ("", "x", "x"),
    ],
)
def test_edits_at_the_ends_of_the_document(before: str, after: str, expected: str) -> None:
    assert apply(after, proposals(before, after)) == expected


def test_a_stale_group_proposes_nothing() -> None:
    before = "count = 0\nprint(count)\n"
    after = before.replace("count = 0", "total = 0")
    history = EditHistory()
    history.opened(URI, before)
    group = history.changed(URI, after, now=0.0)
    assert group is not None

    assert propagate("something else entirely\n", group) == ()


def test_non_ascii_identifiers() -> None:
    before = "def fläche(breite, höhe):\n    größe = breite * höhe\n    return größe\n"
    after = before.replace("größe =", "maß =")

    edits = proposals(before, after)

    assert apply(after, edits) == before.replace("größe", "maß")
    assert not any(e.start == before.index("größe") for e in edits)


def test_emoji_in_strings_before_the_uses_keep_offsets_right() -> None:
    before = 'count = 0\nprint("🎉 count 🎉", count)\nlog("🚀🚀")\ncount += 1\n'
    after = before.replace("count = 0", "total = 0")

    edits = proposals(before, after)

    assert apply(after, edits) == (
        'total = 0\nprint("🎉 count 🎉", total)\nlog("🚀🚀")\ntotal += 1\n'
    )


def test_crlf_documents() -> None:
    before = "function f() {\r\n  let n = 1;\r\n  return n + n;\r\n}\r\n"
    after = before.replace("let n", "let k")

    edits = proposals(before, after)

    assert apply(after, edits) == before.replace("n = 1", "k = 1").replace("n + n", "k + k")


_WORDS = ["a", "b", "ab", "a1", "é", "(", ")", ".", "=", "# a b", '"a"', "'b'", "8", "\n", "\n    "]


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.sampled_from(_WORDS), min_size=1, max_size=60),
    pick=st.integers(0, 1000),
    replacement=st.sampled_from(["z", "ab", "a", "zz9", "ü"]),
)
def test_any_rename_gives_whole_token_minimal_non_overlapping_proposals(
    words: list[str], pick: int, replacement: str
) -> None:
    before = " ".join(words)
    names = list(re.finditer(r"\b(?:a|b|ab|a1|é)\b", before))
    if not names:
        return
    name = names[pick % len(names)]
    after = before[: name.start()] + replacement + before[name.end() :]
    if after == before:
        return

    edits = proposals(before, after)  # checks overlap, minimality, nearest first

    for edit in edits:
        # Each proposal rewrites a whole-word occurrence of the old name into the new one.
        word_before = re.search(r"\w*$", after[: edit.start])
        word_after = re.match(r"\w*", after[edit.end :])
        assert word_before is not None  # \w* matches anywhere
        assert word_after is not None
        start = edit.start - len(word_before[0])
        end = edit.end + len(word_after[0])
        assert after[start:end] == name[0]
        assert after[start : edit.start] + edit.text + after[edit.end : end] == replacement


def test_a_name_its_function_does_not_bind_is_renamed_in_the_whole_file() -> None:
    """`Exception` is not a local of `first`: its uses in other functions are the same name."""
    before = (
        "def first():\n    raise Exception('a')\n\n"
        "def second(Exception_count):\n    raise Exception('b')\n"
    )
    after = before.replace("raise Exception('a')", "raise ValueError('a')")

    assert apply(after, proposals(before, after)) == before.replace(
        "raise Exception(", "raise ValueError("
    )


def test_a_local_renamed_where_it_is_bound_stays_in_its_function() -> None:
    before = "def f():\n    n = 1\n    return n\n\ndef g(n):\n    return n\n"
    after = before.replace("    n = 1", "    count = 1")

    assert apply(after, proposals(before, after)) == (
        "def f():\n    count = 1\n    return count\n\ndef g(n):\n    return n\n"
    )


def test_a_typo_fixed_in_prose_is_fixed_in_the_other_messages() -> None:
    before = (
        "def a():\n    warn('it will be remoevd soon')\n\n"
        "def b():\n    # remoevd in 3.0\n    warn('remoevd: use c')\n"
    )
    after = before.replace("be remoevd soon", "be removed soon")

    assert apply(after, proposals(before, after)) == before.replace("remoevd", "removed")


def test_a_one_word_string_changes_only_where_the_same_literal_stands() -> None:
    before = 'mode = "light"\ntitle = "light and dark"\ncolor("light")\n'
    after = before.replace('mode = "light"', 'mode = "dark"')

    assert apply(after, proposals(before, after)) == (
        'mode = "dark"\ntitle = "light and dark"\ncolor("dark")\n'
    )


# --- rules settled on the main set's misses and false edits (bench/next_edit.py) ----------


def test_a_wrapped_name_is_wrapped_only_where_the_same_bracket_stands() -> None:
    before = (
        "def parse(boundary):\n"
        "    a = re.compile(b'%s--%s' % (BREAK, boundary, BREAK))\n"
        "    b = re.compile(b'%s?--%s' % (BREAK, boundary, BREAK))\n"
        "    self.boundary = boundary\n"
        "    return len(boundary)\n"
    )
    after = before.replace("(BREAK, boundary, BREAK)", "(BREAK, re.escape(boundary), BREAK)", 1)

    assert apply(after, proposals(before, after)) == before.replace(
        "(BREAK, boundary, BREAK)", "(BREAK, re.escape(boundary), BREAK)"
    )


def test_a_changed_none_stays_where_the_line_is_the_same() -> None:
    before = (
        "def set_cookie(\n"
        "    key: str,\n"
        "    path: str | None = None,\n"
        "    domain: str | None = None,\n"
        "    secure: bool = False,\n"
        "):\n"
        "    return None\n"
    )
    after = before.replace("path: str | None = None", 'path: str | None = "/"')

    assert proposals(before, after) == ()


def test_a_keyword_replaced_names_nothing_to_repeat() -> None:
    before = "def f():\n    try:\n        a()\n    except E:\n        pass\n    try:\n        b()\n"
    after = before.replace("    try:\n        a()", "    if ready:\n        a()")

    assert proposals(before, after) == ()


def test_an_added_line_is_not_repeated_above_its_twins() -> None:
    before = "def test():\n    run()\n    assert out == [\n        1,\n    ]\n    assert out == [\n"
    after = before.replace("    run()\n", "    run()\n    # the default is not shown\n")

    assert proposals(before, after) == ()


def test_a_whole_line_pattern_matches_whole_lines_only() -> None:
    before = "def f(proxy):\n    proxy.wrapped\n    assert proxy.wrapped is x\n    proxy.wrapped\n"
    after = before.replace("    proxy.wrapped\n", "    proxy.wrapped  # noqa: B018\n", 1)

    assert apply(after, proposals(before, after)) == before.replace(
        "    proxy.wrapped\n", "    proxy.wrapped  # noqa: B018\n"
    )


def test_two_insertions_read_as_one_span_propose_nothing_at_a_shared_token() -> None:
    before = "def f():\n    check(loads(dumps(inf)), inf)\n    check(loads(dumps(nan)), nan)\n"
    after = before.replace("loads(dumps(inf))", "loads(dumps(inf, a=1), a=1)")

    assert proposals(before, after) == ()


def test_a_comparison_with_none_is_fixed_where_it_compares_with_none() -> None:
    before = (
        "def f(a, b):\n    if a == None:\n        return 0\n    return a == 0\n\n"
        "def g(c):\n    return c == None\n"
    )
    after = before.replace("if a == None", "if a is None")

    assert apply(after, proposals(before, after)) == before.replace("== None", "is None")


def test_a_type_comparison_is_fixed_where_the_same_call_is_compared() -> None:
    before = (
        "def test_a(s):\n    assert type(s['b']) == bytes\n    assert len(s) == 3\n\n"
        "def test_b(exc):\n    assert type(exc) == ZeroDivisionError\n    assert exc == other\n"
    )
    after = before.replace("type(s['b']) == bytes", "type(s['b']) is bytes")

    assert apply(after, proposals(before, after)) == after.replace(
        "type(exc) == ZeroDivisionError", "type(exc) is ZeroDivisionError"
    )


def test_an_expression_replaced_is_replaced_in_the_other_functions() -> None:
    before = "def index():\n    1 // 0\n\n\ndef get(self):\n    1 // 0\n    return 1\n"
    after = before.replace("1 // 0", "raise ZeroDivisionError", 1)

    assert apply(after, proposals(before, after)) == before.replace(
        "1 // 0", "raise ZeroDivisionError"
    )


def test_a_version_in_prose_changes_in_the_other_docstrings_not_in_code() -> None:
    before = (
        'def a():\n    """Deprecated, removed in 2.4."""\n    return 2.4\n\n'
        'def b():\n    warn("b is deprecated and will be removed in 2.4.")\n'
    )
    after = before.replace('removed in 2.4."""', 'removed in 3.0."""')

    assert apply(after, proposals(before, after)) == (
        'def a():\n    """Deprecated, removed in 3.0."""\n    return 2.4\n\n'
        'def b():\n    warn("b is deprecated and will be removed in 3.0.")\n'
    )


def test_a_method_renamed_at_a_call_through_self_is_renamed_at_its_definition() -> None:
    before = (
        "def _sync(x):\n    return x\n\n\n"
        "class Browser:\n"
        "    def run(self):\n        self._sync(1)\n\n"
        "    def _sync(self, x):\n        return _sync(x)\n"
    )
    after = before.replace("self._sync(1)", "self._sync_all(1)")

    assert apply(after, proposals(before, after)) == after.replace(
        "    def _sync(self", "    def _sync_all(self"
    )


def test_a_rename_typed_letter_by_letter_proposes_the_whole_new_name() -> None:
    """One `didChange` per keystroke, within the pause: one group, so the proposals after the
    last letter put the whole name at the other uses."""
    before = "def f():\n    count = 0\n    return count\n"
    history = EditHistory()
    history.opened(URI, before)
    at = before.index("count")
    text = before[:at] + before[at + len("count") :]
    history.changed(URI, text, now=0.0)
    for i, char in enumerate("amount"):
        text = text[: at + i] + char + text[at + i :]
        group = history.changed(URI, text, now=0.1 * (i + 1))
    assert group is not None

    assert apply(text, propagate(text, group)) == before.replace("count", "amount")
