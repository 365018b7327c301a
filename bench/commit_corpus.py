"""Build the commit benchmark's stored cases from git histories (third_party/data/
next-edit-commits/; bench/next_edit_commits.py replays them).

    python -m bench.commit_corpus LANGUAGE=OWNER/NAME=GIT_DIR ... [--per-language 54]
        [--out FOLDER] [--all-held-out]

Each GIT_DIR is a clone (bare or not) of the repository; its history is read from HEAD back,
merges left out. A case is a file of the language changed in place by a commit whose change is
small (`_commit_cases.small_change`). The file pair is cut to a window around the change and
classified; each case's part (tuning or held out) comes from its commit's id. Of the cases of
a language, a seeded sample per kind: every kind as much as it has, up to its quota, the rest
filled with "other" cases. Logs go to stderr; the counts by kind and part to stdout.
"""

from __future__ import annotations

import argparse
import logging
import random
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench._commit_cases import (
    DATA,
    MAX_HUNK_LINES,
    MAX_HUNKS,
    SUFFIXES,
    CaseKind,
    CommitCase,
    Language,
    Split,
    classify,
    data_file,
    small_change,
    split_of,
    window,
    write_cases,
)
from bench._edits import hunks

log = logging.getLogger("bench.commit_corpus")

#: Files that no one types: generated, minified or vendored.
SKIPPED_PARTS = ("vendor/", "node_modules/", "dist/", "third_party/", ".min.", "generated")
#: Generated tables and bundles are not edits anyone typed.
MAX_FILE_CHARS = 200_000
#: The most cases of each kind a language gets; "other" fills what the rest leave of
#: `--per-language`.
QUOTA = {
    CaseKind.REPLACE_IN_LINE: 10,
    CaseKind.REPLACE_ACROSS_LINES: 8,
    CaseKind.INSERTION: 10,
    CaseKind.DELETION: 10,
    CaseKind.ANALOGOUS: 8,
}
SEED = 38


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    language: Language
    repository: str
    git_dir: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A file a non-merge commit changed in place: the commit, the path, and the blob ids of
    the file before and after."""

    commit: str
    path: str
    old_blob: str
    new_blob: str


def candidates(git_dir: Path, language: Language) -> Iterator[Candidate]:
    """Every file of `language` a non-merge commit changed in place, newest commit first.
    Read from the trees alone (`--raw`): a mirror may lack its largest blobs, and a blob that
    is missing only leaves its case out."""
    listing = subprocess.run(
        [
            *("git", "--git-dir", str(git_dir), "log", "--no-merges", "--no-renames"),
            *("--format=@%H", "--raw", "--no-abbrev", "HEAD"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    commit = ""
    for line in listing.splitlines():
        if line.startswith("@"):
            commit = line[1:].strip()
            continue
        if not line.startswith(":"):
            continue
        meta, _, path = line.partition("\t")
        fields = meta.split()
        if len(fields) != 5 or fields[4] != "M":
            continue
        if SUFFIXES.get(Path(path).suffix) is not language or any(p in path for p in SKIPPED_PARTS):
            continue
        yield Candidate(commit=commit, path=path, old_blob=fields[2], new_blob=fields[3])


class Blobs:
    """Files at commits, through one `git cat-file --batch`."""

    def __init__(self, git_dir: Path) -> None:
        self._process = subprocess.Popen(
            ["git", "--git-dir", str(git_dir), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def text(self, blob: str) -> str | None:
        """A file's text, None where it is missing, not UTF-8, too large or has CR line ends."""
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(f"{blob}\n".encode())
        self._process.stdin.flush()
        header = self._process.stdout.readline().split()
        if len(header) < 3:  # "<name> missing"
            return None
        data = self._process.stdout.read(int(header[2]) + 1)[:-1]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if len(text) > MAX_FILE_CHARS or "\r" in text:
            return None
        return text

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait()


def few_lines_changed(before: str, after: str) -> bool:
    """A quick bound before the diff: lines that appear a different number of times in the
    two texts are changed ones, and a case changes few."""
    most = 2 * MAX_HUNKS * MAX_HUNK_LINES
    counts = Counter(before.splitlines())
    counts.subtract(after.splitlines())
    return sum(abs(n) for n in counts.values()) <= most


def cases_of(source: Source) -> list[CommitCase]:
    """Every case of one repository's history, newest commit first."""
    blobs = Blobs(source.git_dir)
    found: list[CommitCase] = []
    try:
        for found_file in candidates(source.git_dir, source.language):
            before = blobs.text(found_file.old_blob)
            after = blobs.text(found_file.new_blob)
            if before is None or after is None or before == after:
                continue
            if not few_lines_changed(before, after):
                continue
            if not small_change(before, hunks(before, after)):
                continue
            cut = window(before, after)
            found.append(
                CommitCase(
                    language=source.language,
                    repository=source.repository,
                    commit=found_file.commit,
                    path=found_file.path,
                    line=cut.line,
                    before=cut.before,
                    after=cut.after,
                    kind=classify(cut.before, hunks(cut.before, cut.after)),
                    split=split_of(found_file.commit),
                )
            )
    finally:
        blobs.close()
    return found


def sample(cases: Sequence[CommitCase], total: int, seed: int = SEED) -> list[CommitCase]:
    """Up to each kind's quota of each kind, "other" filling up to `total`; a seeded sample
    within each kind, the result in (kind, commit, path) order."""
    by_kind: dict[CaseKind, list[CommitCase]] = defaultdict(list)
    for case in sorted(cases, key=lambda c: (c.commit, c.path)):
        by_kind[case.kind].append(case)
    rng = random.Random(seed)
    chosen: list[CommitCase] = []
    for kind, quota in QUOTA.items():
        pool = by_kind[kind]
        chosen += rng.sample(pool, min(quota, len(pool)))
    others = by_kind[CaseKind.OTHER]
    chosen += rng.sample(others, min(max(0, total - len(chosen)), len(others)))
    order = list(CaseKind)
    return sorted(chosen, key=lambda c: (order.index(c.kind), c.commit, c.path))


def parse_source(text: str) -> Source:
    language, repository, git_dir = text.split("=", 2)
    return Source(language=Language(language), repository=repository, git_dir=Path(git_dir))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.commit_corpus", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("sources", nargs="+", type=parse_source, help="LANGUAGE=OWNER/NAME=DIR")
    parser.add_argument("--per-language", type=int, default=54, help="cases a language (54)")
    parser.add_argument("--out", type=Path, default=DATA, help="the data folder")
    parser.add_argument(
        "--all-held-out",
        action="store_true",
        help="every case held out: a set drawn to be replayed once, after tuning",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    for source in args.sources:
        found = cases_of(source)
        log.info("%s: %d cases, %s", source.repository, len(found), Counter(c.kind for c in found))
        chosen = sample(found, args.per_language)
        if args.all_held_out:
            chosen = [replace(c, split=Split.HELDOUT) for c in chosen]
        write_cases(data_file(source.language, args.out), chosen)
        counts = Counter((str(c.kind), str(c.split)) for c in chosen)
        head = subprocess.run(
            ["git", "--git-dir", str(source.git_dir), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(source.language, source.repository, "history to", head, len(chosen), "cases")
        print("  commits:", len({c.commit for c in chosen}), dict(sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
