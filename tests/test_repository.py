"""The repository stands alone: a clone with nothing beside it builds, tests and benchmarks.

Whatever a test or benchmark reads is in the repository (`third_party/` for data and editor
clients written by others, each with its licence) or is made by the test itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: A path that leaves the checkout for a folder beside it: `../shared`, `parent / "shared"`.
OUTSIDE = re.compile(
    r"\.\./shared\b|parents?\[\d\]\s*/\s*\"shared\"|\.parent\s*/\s*\"shared\"|\bshared/(data|clients)\b"
)


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    files = []
    for name in filter(None, listed.split("\0")):
        # Vendored files are kept as their authors wrote them; the notes there name their sources.
        if name.startswith("third_party/"):
            continue
        path = ROOT / name
        if path.suffix in {".png", ".gz", ".gguf", ".vsix", ".ico"} or not path.is_file():
            continue
        files.append(path)
    return files


def test_no_file_reads_a_folder_beside_the_checkout() -> None:
    offenders = []
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_every_vendored_folder_carries_its_licence() -> None:
    vendored = [
        *sorted((ROOT / "third_party" / "data").iterdir()),
        *sorted((ROOT / "third_party" / "editor-clients").iterdir()),
    ]
    assert vendored
    notes = (ROOT / "third_party" / "README.md").read_text(encoding="utf-8")
    for folder in vendored:
        licences = [
            p
            for p in folder.iterdir()
            if any(w in p.name.lower() for w in ("licen", "copying", "copyright"))
        ]
        assert licences, f"{folder.relative_to(ROOT)} has no licence file"
        assert f"`{folder.name}" in notes, (
            f"third_party/README.md does not say where {folder.name} came from"
        )
