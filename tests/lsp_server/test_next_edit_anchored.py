"""Propagation of what a substitution leaves silent: tokens only added or only removed, made
again where the same anchors (and, with a grammar, the same syntax nodes) stand; several tokens
replaced at once, split into renames; scope, strings and comments from the syntax tree; and no
proposal while the word at the cursor is half typed."""

from __future__ import annotations

import pytest

from lsp_server.documents import DocumentSnapshot
from lsp_server.next_edit.editor import WORD_PAUSE_SECONDS, NextEditor, half_typed
from lsp_server.next_edit.history import EditHistory
from lsp_server.next_edit.propagate import propagate

URI = "file:///work/src/example"

# (name, language, before, (old, new) made at the first `old`, the document after every proposal)
CASES = [
    (
        "python: await added before one call, at the same call elsewhere",
        "python",
        "async def a():\n    x = fetch(1)\n    y = fetch(2)\n    s = 'x = fetch(3)'\n",
        ("x = fetch(1)", "x = await fetch(1)"),
        "async def a():\n    x = await fetch(1)\n    y = await fetch(2)\n    s = 'x = fetch(3)'\n",
    ),
    (
        "typescript: a statement's semicolon added after the same call",
        "typescript",
        "function f() {\n  log()\n  run(1);\n  log()\n  // log()\n}\n",
        ("log()\n  run", "log();\n  run"),
        "function f() {\n  log();\n  run(1);\n  log();\n  // log()\n}\n",
    ),
    (
        "go: an argument removed where the same anchors stand",
        "go",
        'func f() {\n\tlog(ctx, msg)\n\tx := 1\n\tlog(ctx, msg)\n\ts := "log(ctx, msg)"\n}\n',
        ("log(ctx, msg)", "log(msg)"),
        'func f() {\n\tlog(msg)\n\tx := 1\n\tlog(msg)\n\ts := "log(ctx, msg)"\n}\n',
    ),
    (
        "java: a modifier already there is not added again",
        "java",
        "class A {\n  void run() {}\n  final void run() {}\n}\n",
        ("  void run()", "  final void run()"),
        "class A {\n  final void run() {}\n  final void run() {}\n}\n",
    ),
    (
        "rust: two names replaced in one change are each renamed",
        "rust",
        "fn f(a: u32, b: u32) -> u32 {\n    let c = a + b;\n    a * b + c\n}\n",
        ("a: u32, b: u32", "x: u32, y: u32"),
        "fn f(x: u32, y: u32) -> u32 {\n    let c = x + y;\n    x * y + c\n}\n",
    ),
    (
        "python: a name in a string or comment is left alone by a multi-token edit",
        "python",
        "def f(a, b):\n    # a and b\n    return a + b, 'a'\n",
        ("a, b", "p, q"),
        "def f(p, q):\n    # a and b\n    return p + q, 'a'\n",
    ),
    (
        "python: an argument added to one helper's call is not added to another helper's",
        "python",
        "x = (\n    dict_attrs(defaults)\n    | str_attrs(defaults)\n"
        "    | dict_attrs(defaults)\n)\n",
        ("dict_attrs(defaults)", "dict_attrs(defaults, strict)"),
        "x = (\n    dict_attrs(defaults, strict)\n    | str_attrs(defaults)\n"
        "    | dict_attrs(defaults, strict)\n)\n",
    ),
    (
        "java: a modifier added to a constructor is not added to a `new` of its class",
        "java",
        "class A {\n  A(int a) {}\n  static A make() { return new A(1); }\n}\n",
        ("  A(int a)", "  public A(int a)"),
        "class A {\n  public A(int a) {}\n  static A make() { return new A(1); }\n}\n",
    ),
    (
        "go: a statement rewritten around its names is new code, not renames",
        "go",
        "func f() {\n\tdt := g(t)\n\tuse(t)\n}\n\nfunc h() {\n\tuse(t)\n}\n",
        ("dt := g(t)", "x := tmp.g(dt, 0)"),
        "func f() {\n\tx := tmp.g(dt, 0)\n\tuse(t)\n}\n\nfunc h() {\n\tuse(t)\n}\n",
    ),
    (
        "python: a name fixed in one function is not changed where another binds its own",
        "python",
        "def a(exc):\n    log(e)\n\n\ndef b(items):\n    for e in items:\n        log(e)\n",
        ("log(e)", "log(exc)"),
        "def a(exc):\n    log(exc)\n\n\ndef b(items):\n    for e in items:\n        log(e)\n",
    ),
    (
        "go: a use pointed at another declared variable is not a rename of the first",
        "go",
        "package p\n\nfunc f(flags []Flag) {\n\tflag := flags[0]\n\tfor _, f := range flags {\n"
        "\t\tuse(flag.Names())\n\t\tlog(flag)\n\t}\n}\n",
        ("use(flag.Names())", "use(f.Names())"),
        "package p\n\nfunc f(flags []Flag) {\n\tflag := flags[0]\n\tfor _, f := range flags {\n"
        "\t\tuse(f.Names())\n\t\tlog(flag)\n\t}\n}\n",
    ),
    (
        "go: a line inserted between the same two lines in each test, not elsewhere",
        "go",
        "package p\n\nfunc A(t *T) {\n\tapp := New()\n\tapp.Commands = []Command{}\n}\n\n"
        "func B(t *T) {\n\tapp := New()\n\tapp.Commands = []Command{}\n}\n\n"
        "func C(t *T) {\n\tapp := Other()\n\tapp.Commands = []Command{}\n}\n",
        ("\tapp := New()\n\tapp.Commands", "\tapp := New()\n\tapp.HideHelp = true\n\tapp.Commands"),
        "package p\n\nfunc A(t *T) {\n\tapp := New()\n\tapp.HideHelp = true\n"
        "\tapp.Commands = []Command{}\n}\n\n"
        "func B(t *T) {\n\tapp := New()\n\tapp.HideHelp = true\n\tapp.Commands = []Command{}\n}\n\n"
        "func C(t *T) {\n\tapp := Other()\n\tapp.Commands = []Command{}\n}\n",
    ),
    (
        "javascript: a removed string argument is removed where the same call holds it",
        "javascript",
        "function f() {\n  a = md('full', defaults)\n  b = md('full', defaults)\n"
        "  c = md('zero', defaults)\n  s = \"md('full', defaults)\"\n}\n",
        ("a = md('full', defaults)", "a = md(defaults)"),
        "function f() {\n  a = md(defaults)\n  b = md(defaults)\n"
        "  c = md('zero', defaults)\n  s = \"md('full', defaults)\"\n}\n",
    ),
    (
        "go: a parameter removed only from the callbacks whose body does not use it",
        "go",
        "package p\n\nfunc A() {\n\tOsExiter = func(rc int) {\n\t\tcalled = true\n\t}\n}\n\n"
        "func B() {\n\tOsExiter = func(rc int) {\n\t\tcode = rc\n\t}\n}\n\n"
        "func C() {\n\tOsExiter = func(rc int) {\n\t\tcalled = true\n\t}\n}\n",
        ("func A() {\n\tOsExiter = func(rc int)", "func A() {\n\tOsExiter = func(int)"),
        "package p\n\nfunc A() {\n\tOsExiter = func(int) {\n\t\tcalled = true\n\t}\n}\n\n"
        "func B() {\n\tOsExiter = func(rc int) {\n\t\tcode = rc\n\t}\n}\n\n"
        "func C() {\n\tOsExiter = func(int) {\n\t\tcalled = true\n\t}\n}\n",
    ),
    (
        "python: a string's prefix is code: `br` -> `rb` reaches the other prefixes",
        "python",
        'def f():\n    a = br"x"\n    b = br"y"\n    return a + b\n',
        ('br"x"', 'rb"x"'),
        'def f():\n    a = rb"x"\n    b = rb"y"\n    return a + b\n',
    ),
    (
        "typescript: the same rewrite of a check where the checked name differs",
        "typescript",
        "function f(a, b) {\n  if (typeof a !== 'undefined') {}\n"
        "  if (typeof b !== 'undefined') {}\n  const s = \"typeof c !== 'undefined'\"\n}\n",
        ("typeof a !== 'undefined'", "a !== undefined"),
        "function f(a, b) {\n  if (a !== undefined) {}\n"
        "  if (b !== undefined) {}\n  const s = \"typeof c !== 'undefined'\"\n}\n",
    ),
    (
        "python: a call rewritten where its receiver differs, not where more differs",
        "python",
        "class A(B):\n    def setup(self, cfg):\n        B.setup(self, cfg)\n"
        "        C.setup(self, cfg)\n        D.setup(self, other)\n",
        ("B.setup(self, cfg)", "super().setup(cfg)"),
        "class A(B):\n    def setup(self, cfg):\n        super().setup(cfg)\n"
        "        super().setup(cfg)\n        D.setup(self, other)\n",
    ),
    (
        "go: numbers changed together are one value, not renames",
        "go",
        "var d = date(2019, 1, 1)\nvar opts = []int{1, 2}\n",
        ("date(2019, 1, 1)", "date(2020, 7, 1)"),
        "var d = date(2020, 7, 1)\nvar opts = []int{1, 2}\n",
    ),
    (
        "python: an identity made a comparison is that one place's meaning",
        "python",
        "def t():\n    assert fn(1) is A\n    assert fn(2) is B\n",
        ("fn(1) is A", "fn(1) == A"),
        "def t():\n    assert fn(1) == A\n    assert fn(2) is B\n",
    ),
]


def proposed(language: str, before: str, old: str, new: str) -> str:
    after = before.replace(old, new, 1)
    history = EditHistory()
    history.opened(URI, before)
    group = history.changed(URI, after, now=0.0)
    assert group is not None
    edits = propagate(after, group, reverted=history.reverted(URI), language_id=language)
    text = after
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


@pytest.mark.parametrize(
    ("language", "before", "edit", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_same_change_reaches_the_places_a_user_expects(
    language: str, before: str, edit: tuple[str, str], expected: str
) -> None:
    assert proposed(language, before, *edit) == expected


@pytest.mark.parametrize("language", ["python", "typescript", "go"])
def test_a_word_typed_letter_by_letter_waits_until_the_cursor_leaves_it(language: str) -> None:
    history = EditHistory()
    text = "count = 1\nuse(count)\n"
    history.opened(URI, text)
    typed = text
    for n in range(1, 4):  # `count` erased, then `t`, `o`, `t` typed one change at a time
        typed = "total"[:n] + text[len("count") :]
        group = history.changed(URI, typed, now=0.1 * n)
    assert group is not None
    at_word = DocumentSnapshot.at(typed, 3, uri=URI, language_id=language)
    elsewhere = DocumentSnapshot.at(typed, len(typed), uri=URI, language_id=language)
    assert half_typed(at_word, group, now=0.35)  # asked 50 ms after the last key
    assert not half_typed(elsewhere, group, now=0.35)
    # A pause on the word finishes it (VS Code's extension asks 300 ms after the last key).
    assert not half_typed(at_word, group, now=group.ended + WORD_PAUSE_SECONDS + 0.01)


def test_a_whole_word_inserted_at_once_is_finished() -> None:
    history = EditHistory()
    history.opened(URI, "count = 1\n")
    group = history.changed(URI, "total = 1\n", now=0.0)
    assert group is not None
    assert not half_typed(DocumentSnapshot.at("total = 1\n", 5, uri=URI), group, now=0.0)


async def test_a_rename_accepted_one_use_at_a_time_keeps_proposing_the_rest() -> None:
    """VS Code applies one proposed edit at a time: each applied use is a change of its own
    into the name the function now declares, and the uses left are still proposed."""
    text = "def f(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"
    editor = NextEditor()
    editor.opened(URI, text)
    renamed = text.replace("total = 0", "amount = 0")
    editor.changed(URI, renamed, 0.0)
    for left in (2, 1):
        snap = DocumentSnapshot.at(renamed, 0, uri=URI, language_id="python")
        suggestions = await editor.suggest(snap, now=10.0)
        assert suggestions is not None
        assert len(suggestions) == left
        edit = suggestions[0].edit
        renamed = renamed[: edit.start] + edit.text + renamed[edit.end :]
        editor.changed(URI, renamed, 1.0)
    assert renamed == text.replace("total", "amount")
