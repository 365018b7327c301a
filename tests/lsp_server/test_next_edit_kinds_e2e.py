"""Next edits of every kind through the real server, as a client sends the edit (one change,
as VS Code sends a paste or a multi-cursor edit) and applies the answer: an insertion, a
deletion, several names replaced at once and the same rewrite where one name differs, a comment
directive, a string's end, a line's copies, each in three languages (or in the languages that
have it); and what is never proposed: inside strings and comments, after an undo, while a word
is half typed, and what each place decides for itself."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from lsp_helpers import Session, lsp_session
from next_edit_client import Document
from pytest_lsp import client_capabilities

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session() -> AsyncIterator[Session]:
    capabilities = client_capabilities("visual_studio_code@v1.65.2")
    async with lsp_session(capabilities, {"infill": {"debounceMs": 0}}) as s:
        status = await s.until_loaded()
        assert status["status"] == "ready", status
        yield s


# (kind and language, language id, suffix, before, (old, new) replaced at its first place,
# the document once every proposal is applied). Strings and comments hold the old text too:
# they must be left as they are.
KINDS = [
    (
        "insertion, python: await before the same call",
        "python",
        "py",
        "async def a():\n    x = fetch(1)\n    y = fetch(2)\n    # x = fetch(3)\n"
        "    s = 'y = fetch(4)'\n",
        ("x = fetch(1)", "x = await fetch(1)"),
        "async def a():\n    x = await fetch(1)\n    y = await fetch(2)\n    # x = fetch(3)\n"
        "    s = 'y = fetch(4)'\n",
    ),
    (
        "insertion, go: an argument added to the same function's calls",
        "go",
        "go",
        "package p\n\nfunc f() {\n\tc := NewContext(set, globalSet)\n"
        "\td := NewContext(set, set)\n\te := Other(set, set)\n"
        '\ts := "NewContext(set, set)"\n}\n',
        ("NewContext(set, globalSet)", "NewContext(nil, set, globalSet)"),
        "package p\n\nfunc f() {\n\tc := NewContext(nil, set, globalSet)\n"
        "\td := NewContext(nil, set, set)\n\te := Other(set, set)\n"
        '\ts := "NewContext(set, set)"\n}\n',
    ),
    (
        "insertion, typescript: a return type after the same parameters",
        "typescript",
        "ts",
        "export const sha256 = async (data: Data) => {\n  return hash(data)\n}\n"
        "export const sha1 = async (data: Data) => {\n  return hash(data)\n}\n"
        "// export const md5 = async (data: Data) => {}\n",
        ("sha256 = async (data: Data) =>", "sha256 = async (data: Data): Promise<string> =>"),
        "export const sha256 = async (data: Data): Promise<string> => {\n  return hash(data)\n}\n"
        "export const sha1 = async (data: Data): Promise<string> => {\n  return hash(data)\n}\n"
        "// export const md5 = async (data: Data) => {}\n",
    ),
    (
        "deletion, go: an argument removed where the same call stands",
        "go",
        "go",
        'func f() {\n\tlog(ctx, msg)\n\tx := 1\n\tlog(ctx, msg)\n\ts := "log(ctx, msg)"\n}\n',
        ("log(ctx, msg)", "log(msg)"),
        'func f() {\n\tlog(msg)\n\tx := 1\n\tlog(msg)\n\ts := "log(ctx, msg)"\n}\n',
    ),
    (
        "deletion, javascript: a key written again as its shorthand",
        "javascript",
        "js",
        "function rule(fn, alt) {\n  a.push({\n    fn: fn,\n    alt: alt\n  })\n"
        "  b.push({\n    fn: fn,\n    alt: alt\n  })\n  // fn: fn,\n}\n",
        ("    fn: fn,\n    alt: alt\n  })\n  b", "    fn,\n    alt: alt\n  })\n  b"),
        "function rule(fn, alt) {\n  a.push({\n    fn,\n    alt: alt\n  })\n"
        "  b.push({\n    fn,\n    alt: alt\n  })\n  // fn: fn,\n}\n",
    ),
    (
        "deletion, java: a modifier removed where the same declaration starts",
        "java",
        "java",
        "class A {\n  final void run() {}\n  final void stop() {}\n"
        '  String s = "final void run()";\n}\n',
        ("  final void run()", "  void run()"),
        'class A {\n  void run() {}\n  void stop() {}\n  String s = "final void run()";\n}\n',
    ),
    (
        "several names at once, rust: each renamed at its uses",
        "rust",
        "rs",
        "fn f(a: u32, b: u32) -> u32 {\n    let c = a + b; // a and b\n    a * b + c\n}\n",
        ("a: u32, b: u32", "x: u32, y: u32"),
        "fn f(x: u32, y: u32) -> u32 {\n    let c = x + y; // a and b\n    x * y + c\n}\n",
    ),
    (
        "several names at once, python: each renamed at its uses",
        "python",
        "py",
        "def f(a, b):\n    # a and b\n    return a + b, 'a'\n",
        ("a, b", "p, q"),
        "def f(p, q):\n    # a and b\n    return p + q, 'a'\n",
    ),
    (
        "several names at once, typescript: across two lines",
        "typescript",
        "ts",
        "function area() {\n  const width = 2\n  const height = 3\n"
        "  // width by height\n  return width * height\n}\n",
        ("width = 2\n  const height", "w = 2\n  const h"),
        "function area() {\n  const w = 2\n  const h = 3\n"
        "  // width by height\n  return w * h\n}\n",
    ),
    (
        "analogous, python: a call's receiver differs",
        "python",
        "py",
        "class A(B, C):\n    def setup(self, cfg):\n        B.setup(self, cfg)\n"
        "        C.setup(self, cfg)\n        # D.setup(self, cfg)\n        D.setup(self, other)\n",
        ("B.setup(self, cfg)", "super().setup(cfg)"),
        "class A(B, C):\n    def setup(self, cfg):\n        super().setup(cfg)\n"
        "        super().setup(cfg)\n        # D.setup(self, cfg)\n        D.setup(self, other)\n",
    ),
    (
        "analogous, typescript: the checked name differs",
        "typescript",
        "ts",
        "function f(a, b) {\n  if (typeof a !== 'undefined') {}\n"
        "  if (typeof b !== 'undefined') {}\n  const s = \"typeof c !== 'undefined'\"\n}\n",
        ("typeof a !== 'undefined'", "a !== undefined"),
        "function f(a, b) {\n  if (a !== undefined) {}\n"
        "  if (b !== undefined) {}\n  const s = \"typeof c !== 'undefined'\"\n}\n",
    ),
    (
        "analogous, javascript: an operand's receiver differs",
        "javascript",
        "js",
        "function f(err, e) {\n  log(options.trace && err.stack)\n"
        "  log(options.trace && e.stack)\n  // options.trace && x.stack\n}\n",
        ("options.trace && err.stack", "(options.trace && err.stack)"),
        "function f(err, e) {\n  log((options.trace && err.stack))\n"
        "  log((options.trace && e.stack))\n  // options.trace && x.stack\n}\n",
    ),
    (
        "lines removed, typescript: the same lint directive at any depth",
        "typescript",
        "ts",
        "function f() {\n  // eslint-disable-next-line quotes\n  a('x')\n  if (y) {\n"
        "    // eslint-disable-next-line quotes\n    b('x')\n  }\n"
        "  const s = `\n  // eslint-disable-next-line quotes\n  `\n}\n",
        ("  // eslint-disable-next-line quotes\n  a", "  a"),
        "function f() {\n  a('x')\n  if (y) {\n    b('x')\n  }\n"
        "  const s = `\n  // eslint-disable-next-line quotes\n  `\n}\n",
    ),
    (
        "lines removed, go: a commented-out debug line",
        "go",
        "go",
        'func f() {\n\t//log.Printf("output: %q", buf.Bytes())\n\tx()\n'
        '\tfor {\n\t\t//log.Printf("output: %q", buf.Bytes())\n\t}\n}\n',
        ('\t//log.Printf("output: %q", buf.Bytes())\n\tx()', "\tx()"),
        "func f() {\n\tx()\n\tfor {\n\t}\n}\n",
    ),
    (
        "lines removed, python: a debug call, not its look-alike in a string",
        "python",
        "py",
        'def f():\n    print("debug", x, y)\n    a()\n\n\ndef g():\n    print("debug", x, y)\n'
        '    s = """\n    print("debug", x, y)\n    """\n',
        ('    print("debug", x, y)\n    a()', "    a()"),
        'def f():\n    a()\n\n\ndef g():\n    s = """\n    print("debug", x, y)\n    """\n',
    ),
    (
        "deletion, javascript: a parameter removed, its argument at the calls",
        "javascript",
        "js",
        "function process(state, delimiters) {\n  return delimiters\n}\n"
        "process(state, state.delimiters)\nprocess(state, meta.delimiters)\n"
        "other(state, x)\n// process(state, x)\n",
        ("process(state, delimiters) {", "process(delimiters) {"),
        "function process(delimiters) {\n  return delimiters\n}\n"
        "process(state.delimiters)\nprocess(meta.delimiters)\n"
        "other(state, x)\n// process(state, x)\n",
    ),
    (
        "deletion, python: a method's parameter removed, not self at the calls",
        "python",
        "py",
        "class A:\n    def run(self, ctx, name):\n        return name\n\n\n"
        "a = A()\na.run(ctx, 'x')\na.run(ctx, 'y', extra)\n",
        ("def run(self, ctx, name):", "def run(self, name):"),
        "class A:\n    def run(self, name):\n        return name\n\n\n"
        "a = A()\na.run('x')\na.run(ctx, 'y', extra)\n",
    ),
    (
        "deletion, go: a parameter removed, its argument at the calls",
        "go",
        "go",
        "package p\n\nfunc show(w io.Writer, name string) {}\n\n"
        'func f() {\n\tshow(os.Stdout, "a")\n\tshow(out, "b")\n}\n',
        ("func show(w io.Writer, name string)", "func show(name string)"),
        'package p\n\nfunc show(name string) {}\n\nfunc f() {\n\tshow("a")\n\tshow("b")\n}\n',
    ),
    (
        "deletion, typescript: a statement's optional ; at every statement end",
        "typescript",
        "ts",
        "import { a } from './a';\nconst b = a(1);\nexport const c = () => {\n"
        "  return b;\n};\nconst s = 'x;';\n",
        ("import { a } from './a';", "import { a } from './a'"),
        "import { a } from './a'\nconst b = a(1)\nexport const c = () => {\n"
        "  return b\n}\nconst s = 'x;'\n",
    ),
    (
        "insertion, javascript: a statement's ; at every statement end",
        "javascript",
        "js",
        "'use strict'\nconst md = require('md')\nfunction f() {\n  return md\n}\n",
        ("'use strict'", "'use strict';"),
        "'use strict';\nconst md = require('md');\nfunction f() {\n  return md;\n}\n",
    ),
    (
        "insertion, python: an import moved to another module, the old one removed",
        "python",
        "py",
        "import sys\nfrom .tuples import is_namedtuple\n\nx = is_namedtuple\n",
        ("import sys\n", "import sys\nfrom .cols import is_namedtuple\n"),
        "import sys\nfrom .cols import is_namedtuple\n\nx = is_namedtuple\n",
    ),
    (
        "insertion, typescript: the same import line moved up",
        "typescript",
        "ts",
        "import { useState } from './hooks'\nconst x = 1\nimport { Suspense, render } from '..'\n",
        (
            "import { useState } from './hooks'\n",
            "import { Suspense, render } from '..'\nimport { useState } from './hooks'\n",
        ),
        "import { Suspense, render } from '..'\nimport { useState } from './hooks'\nconst x = 1\n",
    ),
    (
        "insertion, java: an import moved to another package, the old one removed",
        "java",
        "java",
        "package p;\n\nimport java.util.List;\nimport org.old.Helper;\n\nclass A {}\n",
        ("import java.util.List;\n", "import java.util.List;\nimport org.next.Helper;\n"),
        "package p;\n\nimport java.util.List;\nimport org.next.Helper;\n\nclass A {}\n",
    ),
    (
        "deletion, java: the diamond at the other constructor calls of the type",
        "java",
        "java",
        "class A {\n  List<Node> a = new ArrayList<Node>();\n"
        "  List<String> b = new ArrayList<String>();\n  Map<K, V> m = new HashMap<K, V>();\n"
        '  String s = "new ArrayList<Element>()";\n}\n',
        ("new ArrayList<Node>()", "new ArrayList<>()"),
        "class A {\n  List<Node> a = new ArrayList<>();\n"
        "  List<String> b = new ArrayList<>();\n  Map<K, V> m = new HashMap<K, V>();\n"
        '  String s = "new ArrayList<Element>()";\n}\n',
    ),
    (
        "insertion, typescript: a member made private at its this. uses",
        "typescript",
        "ts",
        "class R {\n  node: Node\n  constructor() {\n    this.node = new Node()\n  }\n"
        "  add() {\n    this.node.insert()\n    other.node.insert()\n  }\n}\n",
        ("  node: Node", "  #node: Node"),
        "class R {\n  #node: Node\n  constructor() {\n    this.#node = new Node()\n  }\n"
        "  add() {\n    this.#node.insert()\n    other.node.insert()\n  }\n}\n",
    ),
    (
        "in a string, go: a template's field changed in that template, not in another",
        "go",
        "go",
        "package p\n\nvar A = `{{if .App.UsageText}}\n{{.App.UsageText}}{{end}}`\n\n"
        "var B = `{{.App.UsageText}}`\n",
        ("{{if .App.UsageText}}", "{{if .App.Description}}"),
        "package p\n\nvar A = `{{if .App.Description}}\n{{.App.Description}}{{end}}`\n\n"
        "var B = `{{.App.UsageText}}`\n",
    ),
    (
        "in a string, python: a call in an f-string's braces is code, changed in every f-string",
        "python",
        "py",
        'def f(char, c):\n    a = f"Unexpected: {repr(char)}"\n\n\n'
        'def g(char):\n    b = f"Bad: {repr(char)}"\n',
        ('f"Unexpected: {repr(char)}"', 'f"Unexpected: {char!r}"'),
        'def f(char, c):\n    a = f"Unexpected: {char!r}"\n\n\n'
        'def g(char):\n    b = f"Bad: {char!r}"\n',
    ),
    (
        "insertion, typescript: a trailing comma after each list's last item",
        "typescript",
        "ts",
        "const a = f(\n  {statusText: undefined, status}\n)\nconst b = [\n  1,\n  2\n]\n"
        "const c = {\n  x: 1, // last\n}\nconst s = `\n  y\n`\n"
        "function g() {\n  return b\n}\ntype T = {\n  a: number\n}\n",
        ("  {statusText: undefined, status}\n", "  {statusText: undefined, status},\n"),
        "const a = f(\n  {statusText: undefined, status},\n)\nconst b = [\n  1,\n  2,\n]\n"
        "const c = {\n  x: 1, // last\n}\nconst s = `\n  y\n`\n"
        "function g() {\n  return b\n}\ntype T = {\n  a: number\n}\n",
    ),
    (
        "insertion, python: a trailing comma after each call's last argument",
        "python",
        "py",
        "x = f(\n    a,\n    b\n)\ny = g(\n    c\n)\n# h(\n#     d\n# )\n",
        ("    b\n)", "    b,\n)"),
        "x = f(\n    a,\n    b,\n)\ny = g(\n    c,\n)\n# h(\n#     d\n# )\n",
    ),
    (
        "deletion, python: a trailing comma before its closer on the line",
        "python",
        "py",
        'env = {"SHELL": "/bin/bash", "TESTING": "True",}\n'
        'r = invoke(app, ["delete-all",])\ns = "[1,]"\n',
        ('"TESTING": "True",}', '"TESTING": "True"}'),
        'env = {"SHELL": "/bin/bash", "TESTING": "True"}\n'
        'r = invoke(app, ["delete-all"])\ns = "[1,]"\n',
    ),
    (
        "lines removed, javascript: a lint directive of two words",
        "javascript",
        "js",
        "function a() {\n  /*jshint -W040 */\n  return this\n}\n"
        "function b() {\n    /*jshint -W040 */\n  return this\n}\n",
        ("  /*jshint -W040 */\n  return this\n}\nfunction b", "  return this\n}\nfunction b"),
        "function a() {\n  return this\n}\nfunction b() {\n  return this\n}\n",
    ),
    (
        "lines removed, python: a dictionary's entry in each test",
        "python",
        "py",
        'def test_a():\n    env = {\n        "SHELL": "bash",\n'
        '        "_TESTING": "True",\n    }\n\n\n'
        'def test_b():\n    env = {\n        "_TESTING": "True",\n    }\n',
        ('        "SHELL": "bash",\n        "_TESTING": "True",\n', '        "SHELL": "bash",\n'),
        'def test_a():\n    env = {\n        "SHELL": "bash",\n    }\n\n\n'
        "def test_b():\n    env = {\n    }\n",
    ),
    (
        "deletion, java: a throws clause removed from the class's other methods",
        "java",
        "java",
        "class W {\n  public void flush() throws IOException {}\n"
        "  public void close() throws IOException {}\n  void f() {\n"
        "    Runnable r = new Runnable() { public void run() throws IOException {} };\n  }\n}\n",
        ("flush() throws IOException {", "flush() {"),
        "class W {\n  public void flush() {}\n  public void close() {}\n  void f() {\n"
        "    Runnable r = new Runnable() { public void run() throws IOException {} };\n  }\n}\n",
    ),
    (
        "deletion, java: final removed from the block's other locals, not from a field",
        "java",
        "java",
        "class T {\n  static final int Z = 1;\n  void t() {\n    final Proto a = make();\n"
        "    final Proto b = make();\n  }\n}\n",
        ("    final Proto a", "    Proto a"),
        "class T {\n  static final int Z = 1;\n  void t() {\n    Proto a = make();\n"
        "    Proto b = make();\n  }\n}\n",
    ),
    (
        "a string's phrase, typescript: the same literal in another test",
        "typescript",
        "ts",
        "it('a', () => {\n  expect(h).toBe('application/json; charset=UTF-8')\n})\n"
        "it('b', () => {\n  expect(h).toEqual(['application/json; charset=UTF-8'])\n})\n",
        ("application/json; charset=UTF-8')", "application/json')"),
        "it('a', () => {\n  expect(h).toBe('application/json')\n})\n"
        "it('b', () => {\n  expect(h).toEqual(['application/json'])\n})\n",
    ),
    (
        "insertion, rust: a keyword that makes the type after it another kind of node",
        "rust",
        "rs",
        "fn a() -> Result<(), Box<error::Error>> {\n    Ok(())\n}\n"
        "fn b() -> Result<(), Box<error::Error>> {\n    Ok(())\n}\n"
        "// fn c() -> Result<(), Box<error::Error>>\n",
        ("fn a() -> Result<(), Box<error::Error>>", "fn a() -> Result<(), Box<dyn error::Error>>"),
        "fn a() -> Result<(), Box<dyn error::Error>> {\n    Ok(())\n}\n"
        "fn b() -> Result<(), Box<dyn error::Error>> {\n    Ok(())\n}\n"
        "// fn c() -> Result<(), Box<error::Error>>\n",
    ),
    (
        "insertion, python: a package before the same module, at any depth",
        "python",
        "py",
        "from subcommands import tutorial001\n\n\ndef test_main():\n"
        "    from subcommands.tutorial001 import main\n\n    main()\n"
        "    assert out == 'from subcommands import x'\n",
        ("from subcommands import", "from docs_src.subcommands import"),
        "from docs_src.subcommands import tutorial001\n\n\ndef test_main():\n"
        "    from docs_src.subcommands.tutorial001 import main\n\n    main()\n"
        "    assert out == 'from subcommands import x'\n",
    ),
    (
        "insertion, python: a line added above the same comment",
        "python",
        "py",
        "def f(\n    a: int = 0,\n    hook: Callable = None,\n    # Custom type\n"
        "    parser: int = 0,\n):\n    pass\n\n\ndef g(\n    b: int = 0,\n"
        "    hook: Callable = None,\n    # Custom type\n    click_type: int = 0,\n):\n"
        "    pass\n",
        (
            "hook: Callable = None,\n    # Custom type\n    parser",
            "hook: Callable = None,\n    factory: Callable = None,\n    # Custom type\n    parser",
        ),
        "def f(\n    a: int = 0,\n    hook: Callable = None,\n    factory: Callable = None,\n"
        "    # Custom type\n    parser: int = 0,\n):\n    pass\n\n\ndef g(\n    b: int = 0,\n"
        "    hook: Callable = None,\n    factory: Callable = None,\n    # Custom type\n"
        "    click_type: int = 0,\n):\n    pass\n",
    ),
    (
        "deletion, java: a call removed before a message that differs at each place",
        "java",
        "java",
        "class T {\n  void a() {\n"
        '    errors.add(new ParseError(reader.pos(), "Unexpected %s", c));\n'
        '    errors.add(new ParseError(reader.pos(), "Invalid reference"));\n'
        '    log("new ParseError(reader.pos(), x");\n  }\n}\n',
        ('ParseError(reader.pos(), "Unexpected', 'ParseError(reader, "Unexpected'),
        "class T {\n  void a() {\n"
        '    errors.add(new ParseError(reader, "Unexpected %s", c));\n'
        '    errors.add(new ParseError(reader, "Invalid reference"));\n'
        '    log("new ParseError(reader.pos(), x");\n  }\n}\n',
    ),
    (
        "deletion, rust: a borrow removed before arrays of other strings",
        "rust",
        "rs",
        "fn t() {\n"
        '    Command::new("bash").args(&["--norc", "-c", source]).assert();\n'
        '    Command::new("zsh").args(&["-c", source]).assert();\n'
        '    let s = ".args(&[\\"-c\\"])";\n}\n',
        ('args(&["--norc"', 'args(["--norc"'),
        "fn t() {\n"
        '    Command::new("bash").args(["--norc", "-c", source]).assert();\n'
        '    Command::new("zsh").args(["-c", source]).assert();\n'
        '    let s = ".args(&[\\"-c\\"])";\n}\n',
    ),
    (
        "deletion, python: a line of strings removed from the same dict in each test",
        "python",
        "py",
        "def test_a():\n    run(env={\n        **os.environ,\n"
        '        "_TESTING": "True",\n        "_TEST_DISABLE": "True",\n    })\n\n\n'
        "def test_b():\n    run(env={\n        **os.environ,\n"
        '        "_TESTING": "True",\n        "_TEST_DISABLE": "True",\n    })\n',
        ('        "_TESTING": "True",\n        "_TEST_DIS', '        "_TEST_DIS'),
        "def test_a():\n    run(env={\n        **os.environ,\n"
        '        "_TEST_DISABLE": "True",\n    })\n\n\n'
        "def test_b():\n    run(env={\n        **os.environ,\n"
        '        "_TEST_DISABLE": "True",\n    })\n',
    ),
    (
        "replacement, javascript: a string that names a kind, in every function",
        "javascript",
        "js",
        "function a(type) {\n  if (type !== 'sexpr') {\n    push(type)\n  }\n}\n"
        "function b(type) {\n  return type === 'sexpr'\n}\n// 'sexpr' nodes\n",
        ("type !== 'sexpr'", "type !== 'SubExpression'"),
        "function a(type) {\n  if (type !== 'SubExpression') {\n    push(type)\n  }\n}\n"
        "function b(type) {\n  return type === 'SubExpression'\n}\n// 'sexpr' nodes\n",
    ),
    (
        "replacement, go: a string that names a kind, in every function",
        "go",
        "go",
        'package p\n\nfunc a(t string) bool {\n\treturn t == "sexpr"\n}\n\n'
        'func b(t string) bool {\n\tif t != "sexpr" {\n\t\treturn false\n\t}\n'
        '\treturn true\n}\n\n// "sexpr" is a subexpression\n',
        ('t == "sexpr"', 't == "SubExpression"'),
        'package p\n\nfunc a(t string) bool {\n\treturn t == "SubExpression"\n}\n\n'
        'func b(t string) bool {\n\tif t != "SubExpression" {\n\t\treturn false\n\t}\n'
        '\treturn true\n}\n\n// "sexpr" is a subexpression\n',
    ),
    (
        "replacement, java: a class renamed where it is imported, and at its uses",
        "java",
        "java",
        "import com.google.protobuf.GeneratedMessage;\n\nclass T {\n"
        "  void a() {\n    register(GeneratedMessage.class);\n  }\n"
        '  // GeneratedMessage\n  String s = "GeneratedMessage";\n}\n',
        ("protobuf.GeneratedMessage;", "protobuf.GeneratedMessageV3;"),
        "import com.google.protobuf.GeneratedMessageV3;\n\nclass T {\n"
        "  void a() {\n    register(GeneratedMessageV3.class);\n  }\n"
        '  // GeneratedMessage\n  String s = "GeneratedMessage";\n}\n',
    ),
    (
        "replacement, go: a method renamed where it is declared, at its calls, not at a function",
        "go",
        "go",
        "package p\n\nfunc (mx *Mux) Chain(fns ...Middleware) Router {\n\treturn mx\n}\n\n"
        "func (mx *Mux) Group(fn func(r Router)) Router {\n\tim := mx.Chain()\n\treturn im\n}\n\n"
        "func (mx *Mux) handler() {\n\th := Chain(mx.middlewares...)\n\tuse(h)\n}\n",
        ("func (mx *Mux) Chain(", "func (mx *Mux) With("),
        "package p\n\nfunc (mx *Mux) With(fns ...Middleware) Router {\n\treturn mx\n}\n\n"
        "func (mx *Mux) Group(fn func(r Router)) Router {\n\tim := mx.With()\n\treturn im\n}\n\n"
        "func (mx *Mux) handler() {\n\th := Chain(mx.middlewares...)\n\tuse(h)\n}\n",
    ),
    (
        "deletion, python: a base removed from each class, whatever the class is named",
        "python",
        "py",
        "def test_handlers():\n    class Foo(object):\n        pass\n\n"
        "    class Bar(object):\n        pass\n\n    register(Foo, Bar, object)\n"
        '    doc = "class Baz(object)"\n',
        ("class Foo(object):", "class Foo:"),
        "def test_handlers():\n    class Foo:\n        pass\n\n"
        "    class Bar:\n        pass\n\n    register(Foo, Bar, object)\n"
        '    doc = "class Baz(object)"\n',
    ),
    (
        "deletion, go: a call removed from an argument of the same function only",
        "go",
        "go",
        "package p\n\nfunc h(w http.ResponseWriter, r *http.Request) {\n"
        '\tid := chi.URLParam(r.Context(), "articleID")\n'
        '\tctx := context.WithValue(r.Context(), "article", id)\n'
        '\tlog(chi.URLParam(r.Context(), "userID"))\n\tnext(ctx)\n}\n',
        ('chi.URLParam(r.Context(), "articleID")', 'chi.URLParam(r, "articleID")'),
        "package p\n\nfunc h(w http.ResponseWriter, r *http.Request) {\n"
        '\tid := chi.URLParam(r, "articleID")\n'
        '\tctx := context.WithValue(r.Context(), "article", id)\n'
        '\tlog(chi.URLParam(r, "userID"))\n\tnext(ctx)\n}\n',
    ),
    (
        "deletion, java: an argument removed from the same constructor's calls",
        "java",
        "java",
        "class B {\n  void a(Token t) {\n"
        "    Comment c = new Comment(t.getData(), baseUri);\n  }\n"
        "  void b(Token t) {\n    node = new Comment(other.getData(), baseUri);\n"
        "    link = new Link(t.getData(), baseUri);\n  }\n}\n",
        ("new Comment(t.getData(), baseUri)", "new Comment(t.getData())"),
        "class B {\n  void a(Token t) {\n"
        "    Comment c = new Comment(t.getData());\n  }\n"
        "  void b(Token t) {\n    node = new Comment(other.getData());\n"
        "    link = new Link(t.getData(), baseUri);\n  }\n}\n",
    ),
    (
        "insertion, rust: an argument added last to the same function's calls",
        "rust",
        "rs",
        "fn run(cli: Cli) {\n    if cli.sort {\n"
        "        printer.print_results(languages.into_iter())?;\n    } else {\n"
        "        printer.print_results(languages.iter())?;\n    }\n"
        "    printer.print_total(languages.iter())?;\n"
        "    printer.print_results(a.iter(), b)?;\n}\n",
        (
            "print_results(languages.into_iter())",
            "print_results(languages.into_iter(), cli.compact)",
        ),
        "fn run(cli: Cli) {\n    if cli.sort {\n"
        "        printer.print_results(languages.into_iter(), cli.compact)?;\n    } else {\n"
        "        printer.print_results(languages.iter(), cli.compact)?;\n    }\n"
        "    printer.print_total(languages.iter())?;\n"
        "    printer.print_results(a.iter(), b)?;\n}\n",
    ),
    (
        "insertion, javascript: an argument added last to the same function's calls",
        "javascript",
        "js",
        "function load(key, cwd, obj) {\n  key = applyExtends(key, cwd)\n"
        "  obj = applyExtends(obj[key], rootPath || cwd)\n  other(obj[key], cwd)\n}\n",
        ("applyExtends(key, cwd)", "applyExtends(key, cwd, deep)"),
        "function load(key, cwd, obj) {\n  key = applyExtends(key, cwd, deep)\n"
        "  obj = applyExtends(obj[key], rootPath || cwd, deep)\n  other(obj[key], cwd)\n}\n",
    ),
    (
        "insertion, python: an argument added first to the same function's calls",
        "python",
        "py",
        "def f(a, b):\n    node = ProgramNode([a], {})\n    other = ProgramNode(b, c)\n"
        "    more = ProgramNode(b, c, d)\n    ProgramNodes([a], {})\n",
        ("node = ProgramNode([a], {})", "node = ProgramNode(None, [a], {})"),
        "def f(a, b):\n    node = ProgramNode(None, [a], {})\n"
        "    other = ProgramNode(None, b, c)\n"
        "    more = ProgramNode(b, c, d)\n    ProgramNodes([a], {})\n",
    ),
    (
        "replacement, rust: format arguments written into the string, at every format call",
        "rust",
        "rs",
        'fn f(selection: &str, a: u8, b: u8, c: u8) {\n    print!("{}", selection);\n'
        '    let s = format!("{} of {}", a, b);\n    let t = format!("{:?}", c);\n'
        '    // print!("{}", x);\n}\n',
        ('print!("{}", selection)', 'print!("{selection}")'),
        'fn f(selection: &str, a: u8, b: u8, c: u8) {\n    print!("{selection}");\n'
        '    let s = format!("{a} of {b}");\n    let t = format!("{:?}", c);\n'
        '    // print!("{}", x);\n}\n',
    ),
    (
        "replacement in prose, rust: a hyphenated option's name is one word",
        "rust",
        "rs",
        "/// --count, --files-with-matches and --files-without-matches show no matches.\n"
        "fn skip() {}\n\n/// With --files-without-matches we stop at the first match.\n"
        "fn quit() {}\n",
        ("and --files-without-matches", "and --files-without-match"),
        "/// --count, --files-with-matches and --files-without-match show no matches.\n"
        "fn skip() {}\n\n/// With --files-without-match we stop at the first match.\n"
        "fn quit() {}\n",
    ),
    (
        "replacement in prose, python: a hyphenated option's name is one word",
        "python",
        "py",
        'def skip():\n    """With --files-without-matches, no matches are shown."""\n\n\n'
        'def quit():\n    """--files-with-matches or --files-without-matches: stop."""\n',
        ("With --files-without-matches", "With --files-without-match"),
        'def skip():\n    """With --files-without-match, no matches are shown."""\n\n\n'
        'def quit():\n    """--files-with-matches or --files-without-match: stop."""\n',
    ),
    (
        "comment appended, python: a linter's directive after the lines that read alike",
        "python",
        "py",
        "def t(meta):\n    with raises(E):\n        meta.version\n    with raises(E):\n"
        "        meta.summary\n    meta.name = 1\n    s = 'meta.x'\n",
        ("meta.version\n", "meta.version  # noqa: B018\n"),
        "def t(meta):\n    with raises(E):\n        meta.version  # noqa: B018\n"
        "    with raises(E):\n        meta.summary  # noqa: B018\n    meta.name = 1\n"
        "    s = 'meta.x'\n",
    ),
    (
        "comment appended, javascript: a linter's directive after the lines that read alike",
        "javascript",
        "js",
        "function f(a, b) {\n  console.log(a);\n  console.log(b);\n  console.error(a, b);\n}\n",
        ("console.log(a);", "console.log(a); // eslint-disable-line no-console"),
        "function f(a, b) {\n  console.log(a); // eslint-disable-line no-console\n"
        "  console.log(b); // eslint-disable-line no-console\n  console.error(a, b);\n}\n",
    ),
    (
        "comment appended, go: a linter's directive after the lines that read alike",
        "go",
        "go",
        "func f(a, b *os.File) {\n\tdefer a.Close()\n\tdefer b.Close()\n\ta.Close()\n}\n",
        ("defer a.Close()", "defer a.Close() //nolint:errcheck"),
        "func f(a, b *os.File) {\n\tdefer a.Close() //nolint:errcheck\n"
        "\tdefer b.Close() //nolint:errcheck\n\ta.Close()\n}\n",
    ),
    (
        "comment edited, python: the same directive where it reads the same",
        "python",
        "py",
        "reveal_type(A.__init__)  # noqa\nx = 1  # type: int\nreveal_type(B.__init__)  # noqa\n",
        ("(A.__init__)  # noqa", "(A.__init__)  # noqa: F821"),
        "reveal_type(A.__init__)  # noqa: F821\nx = 1  # type: int\n"
        "reveal_type(B.__init__)  # noqa: F821\n",
    ),
    (
        "comment edited, typescript: the same directive where it reads the same",
        "typescript",
        "ts",
        "function f(x: number) {\n  /* istanbul ignore next */\n  if (x) {\n    return 1;\n  }\n"
        "  /* istanbul ignore else */\n  if (x > 1) {\n    return 2;\n  }\n"
        "  /* istanbul ignore next */\n  return 3;\n}\n",
        ("/* istanbul ignore next */\n  if", "/* istanbul ignore next -- @preserve */\n  if"),
        "function f(x: number) {\n  /* istanbul ignore next -- @preserve */\n  if (x) {\n"
        "    return 1;\n  }\n  /* istanbul ignore else */\n  if (x > 1) {\n    return 2;\n  }\n"
        "  /* istanbul ignore next -- @preserve */\n  return 3;\n}\n",
    ),
    (
        "comment dropped, javascript: from the lines that start alike",
        "javascript",
        "js",
        "it('a', () => {\n  process = false; // eslint-disable-line no-global-assign\n"
        "  run();\n  process = real; // eslint-disable-line no-global-assign\n"
        "  other = 1; // eslint-disable-line no-global-assign\n});\n",
        ("false; // eslint-disable-line no-global-assign", "false;"),
        "it('a', () => {\n  process = false;\n  run();\n  process = real;\n"
        "  other = 1; // eslint-disable-line no-global-assign\n});\n",
    ),
    (
        "string's end, go: an escape added to the same argument of the same function",
        "go",
        "go",
        'func f(err error) {\n\tfmt.Fprintf(os.Stderr, "Failed to fire hook", err)\n'
        '\tfmt.Fprintf(os.Stderr, "Failed to obtain reader, %v", err)\n'
        '\tlog.Printf("Failed to write", err)\n}\n',
        ('"Failed to fire hook"', '"Failed to fire hook\\n"'),
        'func f(err error) {\n\tfmt.Fprintf(os.Stderr, "Failed to fire hook\\n", err)\n'
        '\tfmt.Fprintf(os.Stderr, "Failed to obtain reader, %v\\n", err)\n'
        '\tlog.Printf("Failed to write", err)\n}\n',
    ),
    (
        "string's end, python: a full stop dropped from the same keyword of the same function",
        "python",
        "py",
        'def test_a():\n    with pytest.raises(E, match="can only be True."):\n        f()\n'
        '    with pytest.raises(E, match="Don\'t mix these."):\n        g()\n'
        '    check(E, match="Left as it is.")\n',
        ('be True."', 'be True"'),
        'def test_a():\n    with pytest.raises(E, match="can only be True"):\n        f()\n'
        '    with pytest.raises(E, match="Don\'t mix these"):\n        g()\n'
        '    check(E, match="Left as it is.")\n',
    ),
    (
        "string's end, javascript: a file's suffix added to the same argument",
        "javascript",
        "js",
        "it('a', function (done) {\n  runMochaJSON('passing-sync', ['--no-async'], done);\n"
        "  runMochaJSON('passing-async', ['--timeout', '100'], done);\n"
        "  other('passing-async', done);\n});\n",
        ("'passing-sync'", "'passing-sync.fixture.js'"),
        "it('a', function (done) {\n"
        "  runMochaJSON('passing-sync.fixture.js', ['--no-async'], done);\n"
        "  runMochaJSON('passing-async.fixture.js', ['--timeout', '100'], done);\n"
        "  other('passing-async', done);\n});\n",
    ),
    (
        "message rewritten, java: the same whole message elsewhere",
        "java",
        "java",
        'class T {\n  void a() {\n    assertContains(m, "Could not find a constructor in '
        'java.lang.Double.");\n  }\n  void b() {\n    assertContains(m, "Could not find a '
        'constructor in java.lang.Double.");\n    assertContains(m, "Could not find a '
        'constructor in java.lang.Double. Or else.");\n  }\n}\n',
        ("Could not find a constructor in java.lang.Double.", "No implementation was bound."),
        'class T {\n  void a() {\n    assertContains(m, "No implementation was bound.");\n'
        '  }\n  void b() {\n    assertContains(m, "No implementation was bound.");\n'
        '    assertContains(m, "Could not find a constructor in java.lang.Double. Or else.");'
        "\n  }\n}\n",
    ),
    (
        "code holding strings, go: arguments swapped where the same arguments stand",
        "go",
        "go",
        'func TestA(t *testing.T) {\n\tassert.Equal(eFunc.err, `can not add field "func"`)\n'
        "}\n\nfunc TestB(t *testing.T) {\n\tassert.Equal(eFunc.err, `can not add field "
        '"func"`)\n\tassert.Equal(other.err, `can not add field "func"`)\n}\n',
        (
            'eFunc.err, `can not add field "func"`',
            '`can not add field "func"`, eFunc.err',
        ),
        'func TestA(t *testing.T) {\n\tassert.Equal(`can not add field "func"`, eFunc.err)\n'
        '}\n\nfunc TestB(t *testing.T) {\n\tassert.Equal(`can not add field "func"`, '
        'eFunc.err)\n\tassert.Equal(other.err, `can not add field "func"`)\n}\n',
    ),
    (
        "code holding strings, python: arguments swapped where the same arguments stand",
        "python",
        "py",
        'def test_a(e):\n    assert_equal(e.err, "can not add field")\n\n\n'
        'def test_b(e, o):\n    assert_equal(e.err, "can not add field")\n'
        '    assert_equal(o.err, "can not add field")\n',
        ('e.err, "can not add field"', '"can not add field", e.err'),
        'def test_a(e):\n    assert_equal("can not add field", e.err)\n\n\n'
        'def test_b(e, o):\n    assert_equal("can not add field", e.err)\n'
        '    assert_equal(o.err, "can not add field")\n',
    ),
    (
        "under a formatter's line breaks, java: an import's class renamed at its uses",
        "java",
        "java",
        "import com.google.inject.util.Jsr330;\nimport java.util.List;\n\nclass T {\n"
        "  void a() {\n    Provider<String> p = Jsr330.guicify(q);\n"
        "    assertSame(p, Jsr330.guicify(p));\n  }\n}\n",
        ("util.Jsr330;\n", "util.Providers;\n\n"),
        "import com.google.inject.util.Providers;\n\nimport java.util.List;\n\nclass T {\n"
        "  void a() {\n    Provider<String> p = Providers.guicify(q);\n"
        "    assertSame(p, Providers.guicify(p));\n  }\n}\n",
    ),
    (
        "under a formatter's line breaks, python: a function renamed at its other calls",
        "python",
        "py",
        "def f(a, b):\n    x = old_name(a, b)\n    y = old_name(b, a)\n    return 'old_name'\n",
        ("x = old_name(a, b)", "x = new_name(\n        a, b\n    )"),
        "def f(a, b):\n    x = new_name(\n        a, b\n    )\n    y = new_name(b, a)\n"
        "    return 'old_name'\n",
    ),
    (
        "under a formatter's line breaks, typescript: a function renamed at its other calls",
        "typescript",
        "ts",
        "const x = oldName(alpha, beta);\nconst y = oldName(beta, alpha);\n// oldName(alpha)\n",
        ("const x = oldName(alpha, beta);", "const x = newName(\n  alpha,\n  beta\n);"),
        "const x = newName(\n  alpha,\n  beta\n);\nconst y = newName(beta, alpha);\n"
        "// oldName(alpha)\n",
    ),
    (
        "node's built-in modules, javascript: node: before each, no package's",
        "javascript",
        "js",
        "const path = require('path');\nconst request = require('supertest');\n"
        "const {EventEmitter} = require('events');\nconst s = 'fs';\n",
        ("require('path')", "require('node:path')"),
        "const path = require('node:path');\nconst request = require('supertest');\n"
        "const {EventEmitter} = require('node:events');\nconst s = 'fs';\n",
    ),
    (
        "node's built-in modules, typescript: node: before each, no package's",
        "typescript",
        "ts",
        "import fs from 'fs';\nimport test from 'ava';\nimport {promisify} from 'util';\n",
        ("from 'fs'", "from 'node:fs'"),
        "import fs from 'node:fs';\nimport test from 'ava';\n"
        "import {promisify} from 'node:util';\n",
    ),
    (
        "annotation's line dropped, java: the whole line from the class's other methods",
        "java",
        "java",
        "class M {\n  /** a */\n  @CheckReturnValue\n  public static Module a() {\n"
        "    return null;\n  }\n\n  @CheckReturnValue\n  public static Module b() {\n"
        "    return null;\n  }\n}\n",
        ("  @CheckReturnValue\n  public static Module a", "  public static Module a"),
        "class M {\n  /** a */\n  public static Module a() {\n    return null;\n  }\n\n"
        "  public static Module b() {\n    return null;\n  }\n}\n",
    ),
    (
        "deletion, rust: a unit return type from the other functions",
        "rust",
        "rs",
        "impl T {\n    pub fn set_kind(&mut self, kind: Kind) -> () {\n        self.kind = kind;\n"
        "    }\n\n    pub fn set_title(&mut self, title: String) -> () {\n"
        "        self.title = title;\n    }\n}\n",
        ("kind: Kind) -> () {", "kind: Kind) {"),
        "impl T {\n    pub fn set_kind(&mut self, kind: Kind) {\n        self.kind = kind;\n"
        "    }\n\n    pub fn set_title(&mut self, title: String) {\n"
        "        self.title = title;\n    }\n}\n",
    ),
    (
        "deletion, rust: a lifetime parameter from the other functions",
        "rust",
        "rs",
        "impl P {\n    fn line_number<'s>(&self, n: usize) -> Option<String> {\n        None\n"
        "    }\n\n    fn git_marker<'s>(&self, n: usize) -> Option<String> {\n        None\n"
        "    }\n}\n",
        ("line_number<'s>(", "line_number("),
        "impl P {\n    fn line_number(&self, n: usize) -> Option<String> {\n        None\n"
        "    }\n\n    fn git_marker(&self, n: usize) -> Option<String> {\n        None\n"
        "    }\n}\n",
    ),
    (
        "insertion within an argument, rust: dyn before the same type in another function",
        "rust",
        "rs",
        "impl A for X {\n    fn print_snip(&mut self, _handle: &mut Write) -> Result<()> {\n"
        "        Ok(())\n    }\n}\n\nimpl A for Y {\n"
        "    fn print_snip(&mut self, handle: &mut Write) -> Result<()> {\n        Ok(())\n"
        "    }\n}\n",
        ("_handle: &mut Write", "_handle: &mut dyn Write"),
        "impl A for X {\n    fn print_snip(&mut self, _handle: &mut dyn Write) -> Result<()> {\n"
        "        Ok(())\n    }\n}\n\nimpl A for Y {\n"
        "    fn print_snip(&mut self, handle: &mut dyn Write) -> Result<()> {\n        Ok(())\n"
        "    }\n}\n",
    ),
    (
        "insertion within an argument, go: a pointer to the same type in another function",
        "go",
        "go",
        "func a(w io.Writer, c Config) error {\n\treturn nil\n}\n\n"
        "func b(c Config) error {\n\treturn nil\n}\n",
        ("w io.Writer, c Config", "w io.Writer, c *Config"),
        "func a(w io.Writer, c *Config) error {\n\treturn nil\n}\n\n"
        "func b(c *Config) error {\n\treturn nil\n}\n",
    ),
    (
        "line's copies, javascript: an operator changed where the same line stands",
        "javascript",
        "js",
        "it('a', () => {\n  app(function (req, res) {\n    res.end(req.headers.cookie || '');\n"
        "  });\n});\nit('b', () => {\n  app(function (req, res) {\n"
        "    res.end(req.headers.cookie || '');\n    res.end(req.headers.other || '');\n"
        "  });\n});\n",
        ("cookie || ''", "cookie ?? ''"),
        "it('a', () => {\n  app(function (req, res) {\n    res.end(req.headers.cookie ?? '');\n"
        "  });\n});\nit('b', () => {\n  app(function (req, res) {\n"
        "    res.end(req.headers.cookie ?? '');\n    res.end(req.headers.other || '');\n"
        "  });\n});\n",
    ),
    (
        "line's copies, go: a condition's operators changed where the same line stands",
        "go",
        "go",
        "func a(cmd *Command) {\n\tfor _, c := range cmd.Commands() {\n"
        "\t\tif !c.IsAvailableCommand() || c == cmd.helpCommand {\n\t\t\tcontinue\n"
        "\t\t}\n\t}\n}\n\n"
        "func b(cmd *Command) {\n\tfor _, c := range cmd.Commands() {\n"
        "\t\tif !c.IsAvailableCommand() || c == cmd.helpCommand {\n\t\t\tcontinue\n\t\t}\n\t}\n}\n",
        ("() || c == cmd", "() && c != cmd"),
        "func a(cmd *Command) {\n\tfor _, c := range cmd.Commands() {\n"
        "\t\tif !c.IsAvailableCommand() && c != cmd.helpCommand {\n\t\t\tcontinue\n"
        "\t\t}\n\t}\n}\n\n"
        "func b(cmd *Command) {\n\tfor _, c := range cmd.Commands() {\n"
        "\t\tif !c.IsAvailableCommand() && c != cmd.helpCommand {\n\t\t\tcontinue\n\t\t}\n\t}\n}\n",
    ),
    (
        "line's copies, python: an operator changed where the same line stands",
        "python",
        "py",
        "def a(items, force):\n    if items.count(x) == 0 or force:\n        return 1\n\n\n"
        "def b(items, force):\n    if items.count(x) == 0 or force:\n        return 2\n"
        "    if items.count(y) == 0 or force:\n        return 3\n",
        ("== 0 or force:\n        return 1", "== 0 and force:\n        return 1"),
        "def a(items, force):\n    if items.count(x) == 0 and force:\n        return 1\n\n\n"
        "def b(items, force):\n    if items.count(x) == 0 and force:\n        return 2\n"
        "    if items.count(y) == 0 or force:\n        return 3\n",
    ),
    (
        "lines removed, rust: a call whose string holds an equals sign",
        "rust",
        "rs",
        'fn a() {\n    bat()\n        .arg("--color=always")\n        .arg("--color-scheme=dark")\n'
        '        .run();\n    bat()\n        .arg("--color=never")\n'
        '        .arg("--color-scheme=dark")\n        .run();\n}\n',
        (
            '        .arg("--color-scheme=dark")\n        .run();\n    bat()',
            "        .run();\n    bat()",
        ),
        'fn a() {\n    bat()\n        .arg("--color=always")\n        .run();\n    bat()\n'
        '        .arg("--color=never")\n        .run();\n}\n',
    ),
    (
        "surroundings alike, javascript: text dropped where it stands among the same text",
        "javascript",
        "js",
        "describe('a', () => {\n  it('runs', () => {\n"
        "    r.logs[0].split('\\n').should.deep.equal(['./command dream', 'Options:'])\n  })\n"
        "  it('runs too', () => {\n"
        "    r.logs[0].split('\\n').should.deep.equal(['./command cyclic', 'Options:'])\n  })\n"
        "})\n",
        ("['./command dream'", "['command dream'"),
        "describe('a', () => {\n  it('runs', () => {\n"
        "    r.logs[0].split('\\n').should.deep.equal(['command dream', 'Options:'])\n  })\n"
        "  it('runs too', () => {\n"
        "    r.logs[0].split('\\n').should.deep.equal(['command cyclic', 'Options:'])\n  })\n"
        "})\n",
    ),
    (
        "surroundings alike, python: text dropped where it stands among the same text",
        "python",
        "py",
        "def test_a(result):\n    assert (\n"
        "        \"Error: Invalid value for 'USER_ID': 'x'\" in result.output\n"
        "        or \"Error: Invalid value for 'USER_ID': x\" in result.output\n    )\n",
        ("\"Error: Invalid value for 'USER_ID': 'x'\"", "\"Invalid value for 'USER_ID': 'x'\""),
        "def test_a(result):\n    assert (\n"
        "        \"Invalid value for 'USER_ID': 'x'\" in result.output\n"
        "        or \"Invalid value for 'USER_ID': x\" in result.output\n    )\n",
    ),
    (
        "surroundings alike, go: text dropped where it stands among the same text",
        "go",
        "go",
        'func TestA(t *testing.T) {\n\tcheck(t, []string{"./command dream", "Options:"})\n}\n\n'
        'func TestB(t *testing.T) {\n\tcheck(t, []string{"./command cyclic", "Options:"})\n}\n',
        ('{"./command dream"', '{"command dream"'),
        'func TestA(t *testing.T) {\n\tcheck(t, []string{"command dream", "Options:"})\n}\n\n'
        'func TestB(t *testing.T) {\n\tcheck(t, []string{"command cyclic", "Options:"})\n}\n',
    ),
]


@pytest.mark.parametrize(
    ("language", "suffix", "text", "edit"),
    [
        ("javascript", "js", "let a = 1\nlet b = 2\nb = 3\n", ("let a", "const a")),
        (
            "java",
            "java",
            "class A {\n  public void a() {}\n  public void b() {}\n}\n",
            ("public void a()", "private void a()"),
        ),
    ],
    ids=["let made const", "a method made private"],
)
async def test_a_declaring_word_changed_in_one_declaration_proposes_nothing(
    session: Session, language: str, suffix: str, text: str, edit: tuple[str, str]
) -> None:
    """`let` -> `const` is that declaration's (the other `let`s may be reassigned), as a
    method made private is that method's."""
    document = Document(session, text, f"file:///e2e/kinds/declaring.{suffix}", language)
    old, new = edit
    document.replace(old, new)
    edits = await document.next_edits(cursor=document.text.index(new) + len(new))
    assert edits == [], edits


@pytest.mark.parametrize(
    ("language", "suffix", "text", "edit"),
    [
        (
            "javascript",
            "js",
            "self.pkgConf = function (key) {\n  return key\n}\n"
            "keys.forEach(function (key) {\n  use(key)\n})\n",
            ("function (key) {\n  return", "function (key, path) {\n  return"),
        ),
        (
            "python",
            "py",
            "def f(c, parse):\n    if not c:\n        pass\n    elif c == 'N':\n"
            "        return 1\n    elif c == 'I':\n        return 2\n",
            ("elif c == 'N'", "elif parse and c == 'N'"),
        ),
        (
            "typescript",
            "ts",
            "const a = () => {\n  save(state)\n  setItem()\n}\n"
            "const b = async () => {\n  await setItem()\n}\n",
            ("  setItem()\n}\nconst b", "  void setItem()\n}\nconst b"),
        ),
        (
            "python",
            "py",
            'def test_a():\n    d = storage_class(foo="bar")\n\n\n'
            'def test_b():\n    d = storage_class(foo="baz")\n',
            ('storage_class(foo="bar")', 'storage_class(foo="bar", baz=None)'),
        ),
    ],
    ids=[
        "one function expression's parameter",
        "one case of a chain of string cases",
        "void before a call that another keyword holds",
        "an argument by keyword added to one call",
    ],
)
async def test_an_insertion_at_a_look_alike_place_of_another_role_proposes_nothing(
    session: Session, language: str, suffix: str, text: str, edit: tuple[str, str]
) -> None:
    """A parameter added to a method assigned as `function (key)` is not added to a callback
    written the same way; a condition added to the `'N'` case of a chain is not added to the
    `'I'` case: the values after it make each line its own case."""
    document = Document(session, text, f"file:///e2e/kinds/look-alike.{suffix}", language)
    old, new = edit
    document.replace(old, new)
    edits = await document.next_edits(cursor=document.text.index(new) + len(new))
    assert edits == [], edits


@pytest.mark.parametrize(
    ("language", "suffix", "text", "edit"),
    [
        (
            "rust",
            "rs",
            "pub mod assets;\npub mod controller;\nmod decorations;\npub mod output;\n"
            "pub mod printer;\n",
            ("pub mod output", "mod output"),
        ),
        (
            "javascript",
            "js",
            "describe('a', function () {\n  this.timeout(1000);\n});\n"
            "describe('b', function () {\n  this.timeout(1000);\n});\n",
            ("this.timeout(1000)", "this.timeout(2000)"),
        ),
        (
            "python",
            "py",
            "stack = StackSummary.from_list(frames)  # type: ignore\n"
            "stack = StackSummary.from_list(other)  # type: ignore\n",
            ("(frames)  # type: ignore", "(frames)"),
        ),
        (
            "python",
            "py",
            "def a(pair):\n    d, t = pair\n    return d\n\n\n"
            "def b(pair):\n    d, t = pair\n    return d, t\n",
            ("d, t = pair\n    return d\n", "d, _ = pair\n    return d\n"),
        ),
    ],
    ids=[
        "rust's visibility dropped from one module",
        "a number changed in one of two copied lines",
        "a bare type: ignore dropped from one line",
        "a name made _ in the one function that no longer uses it",
    ],
)
async def test_a_change_that_each_place_decides_for_itself_proposes_nothing(
    session: Session, language: str, suffix: str, text: str, edit: tuple[str, str]
) -> None:
    """Which items a crate exports, a test's timeout, where the type checker still needs its
    `# type: ignore`, which function no longer uses a name: each place's own, never its
    copies'."""
    document = Document(session, text, f"file:///e2e/kinds/own-{language}.{suffix}", language)
    old, new = edit
    document.replace(old, new)
    edits = await document.next_edits(cursor=document.text.index(new) + len(new))
    assert edits == [], edits


async def test_an_insertion_taken_back_proposes_nothing(session: Session) -> None:
    text = "async def a():\n    x = fetch(1)\n    y = fetch(2)\n"
    document = Document(session, text, "file:///e2e/kinds/undo.py", "python")
    document.replace("x = fetch(1)", "x = await fetch(1)")
    assert await document.next_edits(cursor=document.text.index("await") + 6)
    document.replace("x = await fetch(1)", "x = fetch(1)")
    assert await document.next_edits(cursor=document.text.index("x =") + 3) == []


async def test_a_half_typed_word_waits_until_the_cursor_leaves_it(session: Session) -> None:
    """Typed a letter at a time (one change each, as an editor sends keystrokes), `count`
    becoming `total`: nothing while the cursor stands after the word being typed, the whole
    rename once the cursor has left it."""
    text = "def f(count):\n    return count + count\n"
    document = Document(session, text, "file:///e2e/kinds/typing.py", "python")
    document.replace("count", "")
    start = text.index("count")
    for typed in "tot":
        at = start + document.text[start:].index("):")
        document.send([{"range": document._range(at, at), "text": typed}])
        assert await document.next_edits(cursor=at + 1) == []
    for typed in "al":
        at = start + document.text[start:].index("):")
        document.send([{"range": document._range(at, at), "text": typed}])
    assert await document.next_edits(cursor=start + len("total")) == []
    edits = await document.next_edits(cursor=0)  # the cursor moved away
    document.accept(edits)
    assert document.text == "def f(total):\n    return total + total\n"


# Code restructured across lines: (kind and language,
# language id, suffix, before, (old, new) replaced at its first place, the document once each
# proposal has been taken in turn). Each is proposed at the nearest place; taking it proposes
# the next. Strings and comments holding the old code are left as they are.
TAKEN_IN_TURN = [
    (
        "lines added, go: after a setting whose string differs in each test",
        "go",
        "go",
        'func TestA(t *testing.T) {\n\tapp := NewApp()\n\tapp.Name = "categories"\n'
        "\tapp.Commands = []Command{}\n}\n\n"
        'func TestB(t *testing.T) {\n\tapp := NewApp()\n\tapp.Name = "visible"\n'
        "\tapp.Commands = []Command{}\n}\n",
        (
            '"categories"\n\tapp.Commands',
            '"categories"\n\tapp.HideHelp = true\n\tapp.Commands',
        ),
        'func TestA(t *testing.T) {\n\tapp := NewApp()\n\tapp.Name = "categories"\n'
        "\tapp.HideHelp = true\n\tapp.Commands = []Command{}\n}\n\n"
        'func TestB(t *testing.T) {\n\tapp := NewApp()\n\tapp.Name = "visible"\n'
        "\tapp.HideHelp = true\n\tapp.Commands = []Command{}\n}\n",
    ),
    (
        "across lines, go: a statement wrapped in a guard at any depth",
        "go",
        "go",
        "func f(a *App) {\n\t_ = ShowAppHelp(cCtx)\n\tif x {\n\t\t_ = ShowAppHelp(cCtx)\n\t}\n"
        '\t// _ = ShowAppHelp(cCtx)\n\ts := "_ = ShowAppHelp(cCtx)"\n}\n',
        ("_ = ShowAppHelp(cCtx)", "if !a.HideHelp {\n\t\t_ = ShowAppHelp(cCtx)\n\t}"),
        "func f(a *App) {\n\tif !a.HideHelp {\n\t\t_ = ShowAppHelp(cCtx)\n\t}\n\tif x {\n"
        "\t\tif !a.HideHelp {\n\t\t\t_ = ShowAppHelp(cCtx)\n\t\t}\n\t}\n"
        '\t// _ = ShowAppHelp(cCtx)\n\ts := "_ = ShowAppHelp(cCtx)"\n}\n',
    ),
    (
        "across lines, java: two statements made one",
        "java",
        "java",
        "class Q {\n  String a() {\n    String data = queue.substring(start, pos);\n"
        "    return data;\n  }\n  String b() {\n    if (x) {\n"
        "      String data = queue.substring(start, pos);\n      return data;\n    }\n"
        "    return null;\n  }\n}\n",
        (
            "String data = queue.substring(start, pos);\n    return data;",
            "return queue.substring(start, pos);",
        ),
        "class Q {\n  String a() {\n    return queue.substring(start, pos);\n  }\n"
        "  String b() {\n    if (x) {\n      return queue.substring(start, pos);\n    }\n"
        "    return null;\n  }\n}\n",
    ),
    (
        "across lines, python: a call split over lines keeps each place's depth",
        "python",
        "py",
        "def f():\n    register(cls, handler)\n    if x:\n        register(cls, handler)\n"
        "    # register(cls, handler)\n",
        ("register(cls, handler)", "register(\n        cls, handler, strict=True\n    )"),
        "def f():\n    register(\n        cls, handler, strict=True\n    )\n    if x:\n"
        "        register(\n            cls, handler, strict=True\n        )\n"
        "    # register(cls, handler)\n",
    ),
    (
        "lines added, go: under a name on each side",
        "go",
        "go",
        "func (h *A) Levels() []Level {\n\treturn []Level{\n\t\tDebugLevel,\n\t\tInfoLevel,\n"
        "\t}\n}\n\nfunc (h *B) Levels() []Level {\n\treturn []Level{\n\t\tDebugLevel,\n"
        "\t\tInfoLevel,\n\t}\n}\n",
        ("[]Level{\n\t\tDebugLevel", "[]Level{\n\t\tTraceLevel,\n\t\tDebugLevel"),
        "func (h *A) Levels() []Level {\n\treturn []Level{\n\t\tTraceLevel,\n\t\tDebugLevel,\n"
        "\t\tInfoLevel,\n\t}\n}\n\nfunc (h *B) Levels() []Level {\n\treturn []Level{\n"
        "\t\tTraceLevel,\n\t\tDebugLevel,\n\t\tInfoLevel,\n\t}\n}\n",
    ),
    (
        "lines added, python: under a name on each side",
        "python",
        "py",
        "def a():\n    levels = (\n        DEBUG,\n        INFO,\n    )\n    return levels\n\n\n"
        "def b():\n    levels = (\n        DEBUG,\n        INFO,\n    )\n    return levels\n",
        ("levels = (\n        DEBUG", "levels = (\n        TRACE,\n        DEBUG"),
        "def a():\n    levels = (\n        TRACE,\n        DEBUG,\n        INFO,\n    )\n"
        "    return levels\n\n\ndef b():\n    levels = (\n        TRACE,\n        DEBUG,\n"
        "        INFO,\n    )\n    return levels\n",
    ),
]


async def take_in_turn(document: Document, cursor: int) -> int:
    """Take each proposal as a client applies it (one change, the cursor after the new text)
    and ask again, until nothing is proposed; how many were taken."""
    taken = 0
    while edits := await document.next_edits(cursor=cursor):
        assert len(edits) == 1, edits  # one place at a time
        assert taken < 5, f"proposals go on: {edits}"
        [proposal] = edits
        document.send([{"range": proposal["range"], "text": proposal["text"]}])
        start = proposal["range"]["start"]
        lines = document.text.split("\n")
        cursor = sum(len(line) + 1 for line in lines[: start["line"]]) + start["character"]
        cursor += len(proposal["text"])
        taken += 1
    return taken


@pytest.mark.parametrize(
    ("language", "suffix", "before", "edit", "expected", "in_turn"),
    [(*case[1:], False) for case in KINDS] + [(*case[1:], True) for case in TAKEN_IN_TURN],
    ids=[case[0] for case in KINDS + TAKEN_IN_TURN],
)
async def test_each_kind_of_edit_is_proposed_where_it_is_due_and_applies_exactly(
    session: Session,
    language: str,
    suffix: str,
    before: str,
    edit: tuple[str, str],
    expected: str,
    in_turn: bool,
) -> None:
    """Every place at once, or (code restructured) the nearest place, each taken proposing
    the next."""
    name = "".join(c if c.isalnum() else "-" for c in before[:24])
    document = Document(session, before, f"file:///e2e/kinds/{name}-{in_turn}.{suffix}", language)
    old, new = edit
    document.replace(old, new)
    cursor = document.text.index(new) + len(new)
    if in_turn:
        assert await take_in_turn(document, cursor) >= 1, "nothing proposed"
    else:
        edits = await document.next_edits(cursor=cursor)
        assert edits, "nothing proposed"
        document.accept(edits)
    assert document.text == expected
