"""The usage counts kept on this machine (`lsp_server/usage_file.py`): where, in what shape,
written whole, and what `doctor` prints of them."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from lsp_server.usage import SURVIVAL_S, Offered
from lsp_server.usage_file import (
    STATE_DIR_ENV,
    KeptUsage,
    add_counts,
    print_usage,
    read_counts,
    state_dir,
    usage_report,
)


def test_the_state_folder_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "mine"))
    assert state_dir() == tmp_path / "mine"
    monkeypatch.delenv(STATE_DIR_ENV)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "infill-lsp"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "infill-lsp"


def test_counts_add_up_and_the_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "usage.json"
    add_counts(path, {"python": {"shown": 2, "accepted": 1}})
    add_counts(path, {"python": {"shown": 1}, "rust": {"rejected": 1}})
    counts = read_counts(path)
    assert counts["python"]["shown"] == 3
    assert counts["python"]["accepted"] == 1
    assert counts["rust"]["rejected"] == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []


@pytest.mark.parametrize(
    "content",
    ["", "not json", "[1, 2]", '{"languages": 3}', '{"languages": {"python": "lots"}}'],
)
def test_a_file_that_is_not_ours_counts_as_none_and_is_replaced(
    tmp_path: Path, content: str
) -> None:
    path = tmp_path / "usage.json"
    path.write_text(content, encoding="utf-8")
    assert read_counts(path) == {}
    add_counts(path, {"go": {"shown": 1}})
    assert read_counts(path)["go"]["shown"] == 1


def test_only_known_counts_and_language_names_are_read(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    path.write_text(
        json.dumps(
            {
                "languages": {
                    "python": {"shown": 4, "code": "print(1)", "accepted": -3, "rejected": True},
                    "/home/me/x.py": {"shown": 1},
                }
            }
        ),
        encoding="utf-8",
    )
    counts = read_counts(path)
    assert set(counts) == {"python", "other"}
    assert counts["python"]["shown"] == 4
    assert counts["python"]["accepted"] == counts["python"]["rejected"] == 0
    assert "code" not in counts["python"]


def test_the_server_writes_what_is_new_once_and_checks_at_close(tmp_path: Path) -> None:
    clock = [0.0]
    kept = KeptUsage(tmp_path / "usage.json", clock=lambda: clock[0])
    (suggestion,) = kept.offer("file:///a.py", "python", "x = \n", 4, [Offered(text="1")]) or []
    kept.shown(suggestion)
    kept.changed("file:///a.py", "x = 1\n")
    kept.accepted(suggestion)
    assert kept.write()
    assert kept.write()  # nothing new: the file's counts stay
    assert read_counts(kept.path)["python"]["accepted"] == 1
    clock[0] = SURVIVAL_S / 2
    kept.close()  # the check is done at once
    counts = read_counts(kept.path)["python"]
    assert counts["accepted"] == 1
    assert counts["characters_kept"] == counts["characters_checked"] == 1


def test_counting_off_counts_and_writes_nothing(tmp_path: Path) -> None:
    kept = KeptUsage(tmp_path / "usage.json")
    (suggestion,) = kept.offer("file:///a.py", "python", "", 0, [Offered(text="1")]) or []
    kept.shown(suggestion)  # counted, not yet written
    kept.set_enabled(False)
    assert kept.offer("file:///a.py", "python", "", 0, [Offered(text="1")]) is None
    kept.shown(suggestion)
    kept.close()
    assert kept.report()["languages"] == {}
    assert not kept.path.exists()


def test_doctor_prints_each_language_and_the_share_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "usage.json"
    print_usage(usage_report(path))
    assert "nothing counted yet" in capsys.readouterr().out
    add_counts(
        path,
        {
            "python": {
                "shown": 10,
                "accepted": 4,
                "characters_accepted": 80,
                "characters_checked": 80,
                "characters_kept": 60,
            }
        },
    )
    print_usage(usage_report(path))
    out = capsys.readouterr().out
    assert str(path) in out
    assert "python" in out
    assert "shown 10, accepted 4" in out
    assert "still there a minute later 60 of 80 (75%)" in out
