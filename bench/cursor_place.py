"""Is the cursor in code, a comment or a string: the window's tree (`syntax.place_at`) and the
lexer (`syntax.lexed_place`) against the tree of the whole file (issue 27, "right in every
language").

Run from the repository root:

    .venv/bin/python bench/cursor_place.py [--per-language 400] [--six-languages]
                                           [--files PATH ...] [--json PATH]

Files, none fetched by default:

- Python: the HumanEval programs (prompt, solution and suffix of each single-line task's first
  row) in shared/data/human-eval-infilling;
- JavaScript and Java: the santacoder-fim programs (prompt, line and suffix) in
  shared/data/santacoder-fim;
- TypeScript: this repository's VS Code extension (editors/vscode/src);
- `--files`: more files or folders, the language by the file's ending (.py .js .ts .go .rs
  .java .c .h);
- `--six-languages`: the six projects bench/languages.py reads (fetched into its cache the
  first time, about 48 MB).

Cursors: per language, `--per-language` of them, each in a file taken in turn (round robin over
the files sorted by name) at a character chosen by a generator seeded with the language and the
cursor's number. Two documents per cursor:

- inside: the whole file, the cursor anywhere (a user editing existing code);
- typing: the rest of the cursor's line taken out (a user who has typed up to there: an
  unclosed quote, half an expression).

The truth is the place of the same character in the whole file's tree (`syntax.place_in`; a
cursor with an ERROR node around it there is left out, and so is one inside a comment's or a
string's opening delimiter, such as between the two slashes of `//`). Answers: the lexer on
the prefix (what the gate used before), the window's tree with each `syntax.Doubt` rule (where
the tree is not taken), each of those with the lexer where the tree gives no answer. Times per
call (median): the lexer, `place_at` on a window parsed for the first time (the parse
included), and `place_at` after the syntax check has parsed the same window (a walk down the
cached tree).

Prints a table per document kind; writes bench/results/cursor_place.json with every count.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/cursor_place.py` puts bench/ first on sys.path, where bench/engine.py would
# shadow the `engine` package; the repository root goes in front of it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import gzip
import json
import random
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from _common import HUMAN_EVAL, RESULTS, ROOT, Column, Table, median, write_json
from tree_sitter import Node

from lsp_server.inline.prompt import CONTEXT_CHARS
from lsp_server.postprocess import syntax
from lsp_server.postprocess.syntax import Doubt, Place, lexed_place, parse, place_at, place_in

SANTACODER = ROOT.parent / "shared" / "data" / "santacoder-fim" / "santacoder-fim-task.jsonl.gz"
VSCODE_SOURCES = ROOT / "editors" / "vscode" / "src"
LANGUAGE_OF = {
    ".py": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
}
KINDS = ("inside", "typing")
MIN_CHARS = 200  # shorter files (an empty `__init__.py`) are left out

Files = dict[str, list[tuple[str, str]]]  # language -> (name, text), sorted by name


def humaneval_programs() -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    with gzip.open(HUMAN_EVAL, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            task = row["task_id"].split("/")[2]
            if task not in seen:
                seen[task] = row["prompt"] + row["canonical_solution"] + row["suffix"]
    return sorted((f"HumanEval/{task}", text) for task, text in seen.items())


def santacoder_programs() -> Files:
    programs: dict[tuple[str, str], str] = {}
    with gzip.open(SANTACODER, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            language = {"js": "javascript", "java": "java"}.get(row["language"])
            problem = row["name"].rsplit("-", 1)[0]
            if language is not None and (language, problem) not in programs:
                text = row["prompt"] + "\n" + row["canonical_solution"] + "\n" + row["suffix"]
                programs[(language, problem)] = text
    files: Files = {}
    for (language, problem), text in sorted(programs.items()):
        files.setdefault(language, []).append((problem, text))
    return files


def files_under(paths: Iterable[Path]) -> Files:
    files: Files = {}
    for path in paths:
        for item in sorted(path.rglob("*")) if path.is_dir() else [path]:
            language = LANGUAGE_OF.get(item.suffix)
            if language is not None and item.is_file() and not item.name.endswith(".d.ts"):
                text = item.read_text("utf-8", "replace").replace("\r\n", "\n")
                files.setdefault(language, []).append((str(item), text))
    return files


def six_language_files() -> Files:
    from languages import DEFAULT_CACHE, SOURCES, source_files

    return {source.language_id: source_files(source, DEFAULT_CACHE) for source in SOURCES}


def gather(args: argparse.Namespace) -> Files:
    files: Files = {"python": humaneval_programs()}
    sets = [santacoder_programs(), files_under([VSCODE_SOURCES]), files_under(args.files)]
    if args.six_languages:
        sets.append(six_language_files())
    for more in sets:
        for language, items in more.items():
            files.setdefault(language, []).extend(items)
    kept = {
        language: [item for item in items if len(item[1]) >= MIN_CHARS]
        for language, items in files.items()
    }
    return {language: sorted(items) for language, items in kept.items() if items}


def byte_line(text: str, cursor: int) -> tuple[int, tuple[int, int]]:
    """The cursor's byte offset in `text`, and the bytes where its line starts and ends."""
    start = text.rfind("\n", 0, cursor) + 1
    end = text.find("\n", cursor)
    end = len(text) if end < 0 else end
    offset = len(text[:cursor].encode("utf-8"))
    return offset, (
        offset - len(text[start:cursor].encode("utf-8")),
        offset + len(text[cursor:end].encode("utf-8")),
    )


def in_opener(node: Node, offset: int) -> bool:
    """Whether `offset` is inside the opening delimiter of a comment or string node (`/‸/`,
    `r‸"`): left out, the place of half a delimiter is nobody's to say."""
    if node.child_count:
        first = node.children[0]
        return first.start_byte < offset < first.end_byte
    text = (node.text or b"").decode("utf-8", "replace")
    opener = len(text) - len(text.lstrip("/*#-;!<"))
    return offset - node.start_byte < opener


def context_prefix(prefix: str) -> str:
    """The prefix as the server's `cursor_context` cuts it (what the gate's lexer reads)."""
    if len(prefix) <= CONTEXT_CHARS:
        return prefix
    start = prefix.find("\n", len(prefix) - CONTEXT_CHARS) + 1
    return prefix[start:] if start > 0 else prefix[-CONTEXT_CHARS:]


def window_places(prefix: str, suffix: str, language_id: str) -> dict[str, Place | None]:
    """The window tree's answer under each doubt rule (the same tree `place_at` reads)."""
    window = syntax._window(prefix, suffix)
    tree = syntax._window_tree(window, language_id)
    assert tree is not None
    offset, line = byte_line(window.before + window.after, len(window.before))
    answers: dict[str, Place | None] = {}
    for doubt in Doubt:
        found = place_in(tree.root_node, offset, line, doubt)
        answers[doubt.name] = None if found is None else found[0]
    return answers


def clear_caches() -> None:
    syntax._window.cache_clear()
    syntax._window_tree.cache_clear()


def run_language(language_id: str, files: Sequence[tuple[str, str]], count: int) -> dict[str, Any]:
    truth_trees = {name: parse(text, language_id) for name, text in files}
    results: dict[str, Any] = {}
    for kind in KINDS:
        counts: Counter[str] = Counter()
        truths: Counter[str] = Counter()
        fixed: Counter[str] = Counter()  # lexer wrong, tree right: (truth, lexer)
        broken: Counter[str] = Counter()  # lexer right, tree wrong
        times: dict[str, list[float]] = {"lexer": [], "cold": [], "cached": []}
        cursors = 0
        for number in range(count):
            name, text = files[number % len(files)]
            rng = random.Random(f"{language_id}:{number}")
            cursor = rng.randrange(1, len(text))
            tree = truth_trees[name]
            assert tree is not None
            offset, line = byte_line(text, cursor)
            found = place_in(tree.root_node, offset, line, Doubt.PATH)
            if found is None:
                counts["no truth"] += 1
                continue
            if found[1] is not None and in_opener(found[1], offset):
                counts["in opener"] += 1
                continue
            truth = found[0]
            cursors += 1
            truths[truth.value] += 1
            prefix = text[:cursor]
            line_end = text.find("\n", cursor)
            suffix = text[cursor:] if kind == "inside" or line_end < 0 else text[line_end:]

            started = time.perf_counter()
            lexer = lexed_place(context_prefix(prefix))
            times["lexer"].append(time.perf_counter() - started)
            clear_caches()
            started = time.perf_counter()
            place_at(prefix, suffix, language_id)
            times["cold"].append(time.perf_counter() - started)
            started = time.perf_counter()
            place_at(prefix, suffix, language_id)
            times["cached"].append(time.perf_counter() - started)

            counts["lexer"] += lexer is truth
            for doubt, answer in window_places(prefix, suffix, language_id).items():
                counts[f"tree {doubt}"] += answer is truth
                counts[f"none {doubt}"] += answer is None
                combined = answer or lexer
                counts[f"tree {doubt} + lexer"] += combined is truth
                if doubt == syntax.DOUBT.name:
                    if lexer is not truth and combined is truth:
                        fixed[f"{truth.value} (lexer: {lexer.value})"] += 1
                    if lexer is truth and combined is not truth:
                        broken[f"{truth.value} (answered: {combined.value})"] += 1
        results[kind] = {
            "files": len(files),
            "cursors": cursors,
            "truth": dict(truths),
            "agree": {
                key: value for key, value in counts.items() if key not in ("no truth", "in opener")
            },
            "no_truth": counts["no truth"],
            "in_opener": counts["in opener"],
            "fixed_by_tree": dict(fixed),
            "broken_by_tree": dict(broken),
            "median_ms": {key: median(values) * 1000 for key, values in times.items()},
        }
    return results


def percent(part: int, whole: int) -> float | None:
    return None if whole == 0 else 100.0 * part / whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-language", type=int, default=400)
    parser.add_argument("--files", type=Path, nargs="*", default=[])
    parser.add_argument("--six-languages", action="store_true")
    parser.add_argument("--json", type=Path, default=RESULTS / "cursor_place.json")
    args = parser.parse_args()

    files = gather(args)
    results = {
        language: run_language(language, items, args.per_language)
        for language, items in files.items()
    }

    rule = syntax.DOUBT.name
    table = Table(
        Column("language", 10, "<"),
        Column("files", 5),
        Column("cursors", 7),
        Column("str/com", 7),
        Column("lexer %", 7, spec=".1f"),
        Column("tree %", 6, spec=".1f"),
        Column("+lexer %", 8, spec=".1f"),
        Column("PATH+lex", 8, spec=".1f"),
        Column("NEVER %", 7, spec=".1f"),
        Column("no tree", 7),
        Column("fixed", 5),
        Column("broken", 6),
        Column("lexer ms", 8, spec=".3f"),
        Column("cold ms", 7, spec=".3f"),
        Column("cached ms", 9, spec=".4f"),
    )
    for kind in KINDS:
        print(f"\n{kind} (tree: the window's tree, doubt rule {rule}; +lexer: the lexer where")
        print("it has no answer; PATH+lex: rule PATH, then the lexer; NEVER: the tree alone)")
        rows = []
        for language, by_kind in results.items():
            item = by_kind[kind]
            n, agree = item["cursors"], item["agree"]
            rows.append(
                (
                    language,
                    item["files"],
                    n,
                    item["truth"].get("string", 0) + item["truth"].get("comment", 0),
                    percent(agree["lexer"], n),
                    percent(agree[f"tree {rule}"], n),
                    percent(agree[f"tree {rule} + lexer"], n),
                    percent(agree["tree PATH + lexer"], n),
                    percent(agree["tree NEVER"], n),
                    agree[f"none {rule}"],
                    sum(item["fixed_by_tree"].values()),
                    sum(item["broken_by_tree"].values()),
                    item["median_ms"]["lexer"],
                    item["median_ms"]["cold"],
                    item["median_ms"]["cached"],
                )
            )
        table.print(rows)
    write_json(args.json, {"per_language": args.per_language, "doubt": rule, "results": results})


if __name__ == "__main__":
    main()
