"""`run_load`: whatever a model load does (returns, raises an engine error, raises a library's
own exception, never returns), whoever awaits it gets an answer naming the cause."""

from __future__ import annotations

import threading
import time

import pytest

from engine.errors import ModelLoadError
from lsp_server.host import (
    DEFAULT_LOAD_TIMEOUT,
    LOAD_TIMEOUT_ENV,
    ModelUnavailableError,
    load_timeout,
    run_load,
)


async def test_a_load_that_returns_gives_its_result() -> None:
    assert await run_load("completion", lambda: 42) == 42


def _raise(error: Exception) -> None:
    raise error


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ModelLoadError("model file not found: /m.gguf"), "model file not found: /m.gguf"),
        (PermissionError(13, "Permission denied"), "[Errno 13] Permission denied"),
        (KeyError("blk.0.attn_q.weight"), "KeyError: 'blk.0.attn_q.weight'"),
        (ImportError("No module named 'x'"), "ImportError: No module named 'x'"),
    ],
)
async def test_a_load_that_raises_is_unavailable_naming_the_cause(
    error: Exception, reason: str
) -> None:
    with pytest.raises(ModelUnavailableError) as caught:
        await run_load("chat", lambda: _raise(error))
    assert caught.value.reason == reason
    assert str(caught.value) == f"the chat model is unavailable: {reason}"


async def test_a_load_that_never_returns_is_given_up_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(LOAD_TIMEOUT_ENV, "0.2")
    stuck = threading.Event()
    started = time.monotonic()
    with pytest.raises(ModelUnavailableError) as caught:
        await run_load("completion", stuck.wait)
    assert time.monotonic() - started < 5
    assert caught.value.reason == (
        "loading it took longer than 0.2 s and was given up (set INFILL_LOAD_TIMEOUT to allow "
        "more time)"
    )
    stuck.set()  # the thread ends; its late result goes nowhere


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, DEFAULT_LOAD_TIMEOUT),
        ("", DEFAULT_LOAD_TIMEOUT),
        ("30", 30.0),
        ("2.5", 2.5),
        ("0", DEFAULT_LOAD_TIMEOUT),
        ("-1", DEFAULT_LOAD_TIMEOUT),
        ("inf", DEFAULT_LOAD_TIMEOUT),
        ("nan", DEFAULT_LOAD_TIMEOUT),
        ("soon", DEFAULT_LOAD_TIMEOUT),
    ],
)
def test_the_load_timeout_comes_from_the_environment_or_defaults(
    value: str | None, seconds: float
) -> None:
    environ = {} if value is None else {LOAD_TIMEOUT_ENV: value}
    assert load_timeout(environ) == seconds


async def test_a_download_that_still_makes_progress_outlasts_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hub model's download moves the deadline (engine/hub.py reports its progress): a
    large model on a slow line is not given up while bytes still come."""
    monkeypatch.setenv(LOAD_TIMEOUT_ENV, "1")
    last = [time.monotonic()]

    def download() -> int:
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # well past the 1 s deadline, in small steps
            time.sleep(0.05)
            last[0] = time.monotonic()
        return 7

    assert await run_load("completion", download, lambda: last[0]) == 7


async def test_a_download_that_stalls_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOAD_TIMEOUT_ENV, "0.5")
    last = [time.monotonic()]
    stalled = threading.Event()

    def download() -> None:
        for _ in range(5):  # some progress, then none
            time.sleep(0.05)
            last[0] = time.monotonic()
        stalled.wait()

    with pytest.raises(ModelUnavailableError) as caught:
        await run_load("completion", download, lambda: last[0])
    assert caught.value.reason.startswith("loading it took longer than 0.5 s and was given up")
    stalled.set()
