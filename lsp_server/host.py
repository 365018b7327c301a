"""The models behind the server: loaded in the background, awaited by requests, reported by
status. A load that fails is remembered, and every later request gets an error naming why."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from engine.completion import CompletionModel
from engine.engine import BaseEngine
from engine.errors import EngineClosedError, EngineError, ModelLoadError
from engine.hub import DownloadProgress, Phase
from engine.models import ModelSet, model_spec
from engine.next_edit_model import NextEditModel
from engine.prefix_cache import CacheStatus
from engine.shared import SharedEngineError, SharedEngineLink, client_name
from engine.specs import ModelSpec, RemoteSpec
from engine.types import LoadState, Role
from lsp_server.engine_place import EngineMode, Placement, place, placed_specs
from lsp_server.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The request `ModelHost.status` answers (what `doctor`'s client and the editors ask).
STATUS_REQUEST = "infill/status"


class ModelUnavailableError(Exception):
    """The model could not be loaded; the message says which and why."""

    def __init__(self, role: str, reason: str) -> None:
        super().__init__(f"the {role} model is unavailable: {reason}")
        self.reason = reason


#: The environment variable that bounds a model load, in seconds. A load that takes longer is
#: given up as stuck, so that no request waits for it forever. The default models load in a
#: few seconds (the first run also assembles Gemma); a large model from a slow disk may need
#: more.
LOAD_TIMEOUT_ENV = "INFILL_LOAD_TIMEOUT"
DEFAULT_LOAD_TIMEOUT = 600.0


def load_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a model load may take: $INFILL_LOAD_TIMEOUT, else DEFAULT_LOAD_TIMEOUT."""
    value = (os.environ if environ is None else environ).get(LOAD_TIMEOUT_ENV)
    if not value:
        return DEFAULT_LOAD_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        log.warning(
            "%s=%r is not a number of seconds above 0; using %g",
            LOAD_TIMEOUT_ENV,
            value,
            DEFAULT_LOAD_TIMEOUT,
        )
        return DEFAULT_LOAD_TIMEOUT
    return seconds


def in_background(
    role: str,
    load: Callable[[], T],
    loaded: Callable[[T], None],
    failed: Callable[[ModelUnavailableError], None],
    progress_at: Callable[[], float] | None = None,
) -> asyncio.Future[T]:
    """`run_load` as a task: the future it returns settles with the model or the error,
    after `loaded` or `failed` has seen it (so that whoever awaits the future finds the host's
    state already up to date)."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    async def run() -> None:
        try:
            result = await run_load(role, load, progress_at)
        except ModelUnavailableError as e:
            failed(e)
            future.set_exception(e)
        else:
            loaded(result)
            future.set_result(result)

    asyncio.get_running_loop().create_task(run())
    return future


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


#: Seconds shutdown waits for a model load in progress before it leaves that model alone.
CLOSE_LOCK_TIMEOUT = 10.0


async def run_load(
    role: str, load: Callable[[], T], progress_at: Callable[[], float] | None = None
) -> T:
    """Run `load` on a thread of its own, within the load deadline. Every way it can end
    badly (an engine error, a library's own exception, a load that never returns) becomes one
    ModelUnavailableError naming the cause, so that whoever awaits it gets an answer.

    A download of the model (engine/hub.py) moves the deadline: it counts from the last
    progress `progress_at` reports (a `time.monotonic()`), so a large model on a slow line
    is not given up while bytes still come, and a download that stalls is.

    The thread is a daemon, not one of asyncio's pool: a load stuck in a library cannot be
    interrupted, and must not keep the server from exiting either.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():  # not given up on meanwhile
            outcome()

    def run() -> None:
        try:
            result = load()
        except Exception as e:
            reported: Callable[[], None] = functools.partial(done.set_exception, e)
        else:
            reported = functools.partial(done.set_result, result)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, reported)

    threading.Thread(target=run, name=f"infill-load-{role}", daemon=True).start()
    timeout = load_timeout()
    started = time.monotonic()
    while not done.done():
        since = max(started, progress_at()) if progress_at is not None else started
        left = since + timeout - time.monotonic()
        if left <= 0:
            break
        await asyncio.wait((done,), timeout=left)
    if not done.done():
        done.cancel()
        reason = (
            f"loading it took longer than {timeout:g} s and was given up "
            f"(set {LOAD_TIMEOUT_ENV} to allow more time)"
        )
        raise ModelUnavailableError(role, reason)
    try:
        return done.result()
    except (EngineError, OSError) as e:
        raise ModelUnavailableError(role, str(e)) from e
    except Exception as e:
        log.error("loading the %s model failed", role, exc_info=e)
        raise ModelUnavailableError(role, f"{type(e).__name__}: {e}") from e


def model_specs(settings: Settings) -> dict[Role, ModelSpec | RemoteSpec]:
    """The model of each role, from the settings (then environment, then defaults), as this
    process would load it (`engine_place` says where it runs instead)."""
    options = settings.model_options()
    return {role: model_spec(role, options) for role in Role}


def _models_key(settings: Settings) -> tuple[object, ...]:
    """What decides the loaded models and where they run: a change reloads them."""
    return (settings.model_options(), settings.engine, settings.engine_idle_exit)


#: Seconds `exit` waits for the shared engine to hear that this window left: the engine answers
#: on its socket in a few milliseconds; one that does not sees the lease end after 30 s.
LEAVE_SECONDS = 0.3

#: Seconds between two attempts to reach a remote server that could not be reached: the next
#: request after that tries again, so a server that comes back is used without a reload.
REMOTE_RETRY_SECONDS = 2.0


class ModelHost:
    """Owns the ModelSet. `start` begins loading; requests await `completion()`."""

    def __init__(self) -> None:
        self.state = LoadState.LOADING
        self.last_error: str | None = None
        self._settings = Settings()
        self._models: ModelSet | None = None
        self._models_for: tuple[object, ...] | None = None
        #: Where the models run, and this server's hold on the shared engine when they run there.
        self.placement: Placement | None = None
        self._link: SharedEngineLink | None = None
        self._leaving: threading.Thread | None = None
        #: This window's name in an engine server's turns, figures and leases.
        self.client = client_name()
        # Loads run on threads; the ModelSet is shared by both roles' loads.
        self._lock = threading.Lock()
        self._completion: asyncio.Future[CompletionModel] | None = None
        self._chat: asyncio.Future[BaseEngine] | None = None
        self._next_edit: asyncio.Future[NextEditModel | None] | None = None
        self._closed = False
        self._failed_at = 0.0  # when the completion model's load last failed
        #: A hub model's download in progress, as last reported (for `infill/status`).
        self.download: DownloadProgress | None = None
        #: Who shows downloads to the user (the server's `$/progress`), on the event loop.
        self.on_download: Callable[[DownloadProgress], None] | None = None
        self._progress_at = 0.0  # when a download last reported, on the loading thread
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, settings: Settings) -> asyncio.Future[CompletionModel]:
        """Load the completion model on a thread (the chat model loads when first used).

        On a reload, the engines in use stop at once: their running jobs end with an error
        saying the models are being reloaded, and new requests wait for the new models. The
        old models are freed on the loading thread, after their workers have ended."""
        self._stop_engines("the models are being reloaded with new settings")
        self._loop = asyncio.get_running_loop()
        self.state = LoadState.LOADING
        self._settings = settings
        self._chat = None
        self._next_edit = None

        def loaded(model: CompletionModel) -> None:
            self.state = LoadState.READY
            self.last_error = None  # a retry that reached the server: the old error is over

        def failed(error: ModelUnavailableError) -> None:
            self.state = LoadState.ERROR
            self.last_error = error.reason
            self._failed_at = time.monotonic()

        future = in_background("completion", self._load, loaded, failed, self._last_progress)
        future.add_done_callback(_retrieved)  # requests re-raise it; nobody else must log it
        self._completion = future
        return future

    def _model_set(self, settings: Settings) -> ModelSet:
        """The ModelSet for `settings` (call with the lock held): models load on first use."""
        if self._closed:
            raise EngineClosedError("the server is shutting down")
        if self._models is None or self._models_for != _models_key(settings):
            old, old_link = self._models, self._link
            placement = place(settings)
            if placement.why_here and settings.engine == "auto":
                log.info("the models run in this process: %s", placement.why_here)
            link = None
            if placement.shared is not None:
                link = SharedEngineLink(
                    placement.shared,
                    idle_exit=float(settings.engine_idle_exit),
                    timeout=load_timeout(),
                    client=self.client,
                )
            specs = placed_specs(settings, placement, link, self.client)
            self._models = ModelSet(specs, on_download=self._downloading)
            self._models_for = _models_key(settings)
            self.placement, self._link = placement, link
            if old is not None:
                old.close()
            if old_link is not None:
                old_link.close()
        return self._models

    def _linked(self, models: ModelSet) -> ModelSet:
        """The shared engine found or started, and ready (on a loading thread, with the lock
        held). Where it cannot be started, the models load in this process instead, and
        `infill/status` says why: a user is never left without suggestions for want of it."""
        link = self._link
        if link is None:
            return models
        try:
            link.ensure()
        except SharedEngineError as e:
            log.warning("the shared engine cannot serve (%s): the models load in this process", e)
            link.close()
            self._link = None
            self.placement = Placement(mode=EngineMode.HERE, why_here=str(e))
            specs = placed_specs(self._settings, self.placement, None)
            self._models = ModelSet(specs, on_download=self._downloading)
            models.close()
            return self._models
        return models

    def _last_progress(self) -> float:
        return self._progress_at

    def _downloading(self, progress: DownloadProgress) -> None:
        """A download's progress, on the loading thread: it moves the load's deadline, and
        goes to the event loop for the status and the editor."""
        self._progress_at = time.monotonic()
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server ends
                loop.call_soon_threadsafe(self._downloaded, progress)

    def _downloaded(self, progress: DownloadProgress) -> None:
        ongoing = progress.phase in (Phase.DOWNLOADING, Phase.CHECKING)
        if ongoing or (self.download is not None and self.download.model == progress.model):
            self.download = progress if ongoing else None
        if self.on_download is not None:
            self.on_download(progress)

    def _load(self) -> CompletionModel:
        with self._lock:  # the latest settings: an older load must not bring old models back
            models = self._linked(self._model_set(self._settings))
            engine = models.engine(Role.COMPLETION)
        model = CompletionModel.of(engine, self._settings.fim_family)
        info = engine.info
        log.info(
            "completion model %s (%s, %s) loaded in %.1f s",
            info.path,
            info.backend,
            info.device,
            info.load_seconds,
        )
        return model

    def _load_chat(self) -> BaseEngine:
        with self._lock:  # the latest settings, as in `_load`
            models = self._linked(self._model_set(self._settings))
            engine = models.engine(Role.CHAT)
        if not engine.info.has_chat_template:
            raise ModelLoadError(
                f"the chat model {engine.info.path} has no chat template; name a chat model "
                "with the chatModel setting"
            )
        log.info(
            "chat model %s loaded (shared with completion: %s)",
            engine.info.path,
            models.shares(Role.CHAT),
        )
        return engine

    def _load_next_edit(self) -> NextEditModel | None:
        with self._lock:  # the latest settings, as in `_load`
            models = self._linked(self._model_set(self._settings))
            engine = models.engine(Role.NEXT_EDIT)
        try:
            model = NextEditModel.of(engine, self._settings.next_edit_format)
        except ValueError as e:  # the setting is checked when parsed; a second word here
            raise ModelLoadError(str(e)) from e
        if model is None:
            log.info(
                "next edits: %s has no next-edit format (nextEditFormat names one): "
                "propagation only",
                engine.info.path,
            )
        else:
            log.info("next-edit model %s (%s format)", engine.info.path, model.format.family)
        return model

    async def next_edit(self) -> NextEditModel | None:
        """The next-edit model, loaded on first use; None when there is none (the model has
        no next-edit format), or when it cannot be loaded: next edits then come from
        propagation alone, and the reason is logged once per load (a settings change tries
        again)."""
        if self._next_edit is None:

            def failed(error: ModelUnavailableError) -> None:
                log.warning("next edits from propagation only: %s", error)

            self._next_edit = in_background(
                "next-edit",
                self._load_next_edit,
                lambda model: None,
                failed,
                self._last_progress,
            )
            self._next_edit.add_done_callback(_retrieved)
        try:
            return await asyncio.shield(self._next_edit)
        except ModelUnavailableError:
            return None

    async def chat(self) -> BaseEngine:
        """The chat engine, loaded on first use. Raises ModelUnavailableError if it cannot be."""
        if self._chat is None:

            def failed(error: ModelUnavailableError) -> None:
                if self._chat is future:  # not a newer load started by a reload meanwhile
                    self._chat = None  # a later request tries again (the user may fix it)

            future = in_background(
                "chat", self._load_chat, lambda engine: None, failed, self._last_progress
            )
            self._chat = future
        return await asyncio.shield(self._chat)

    async def completion(self) -> CompletionModel:
        """The completion model, once loaded. Raises ModelUnavailableError after a failed load."""
        if self._completion is None:
            raise ModelUnavailableError("completion", "the server is not initialized yet")
        remote = self.placement is not None and self.placement.mode is not EngineMode.HERE
        if (
            self.state is LoadState.ERROR
            and remote
            and time.monotonic() - self._failed_at >= REMOTE_RETRY_SECONDS
        ):
            log.info("trying the remote server again")
            self.start(self._settings)
        return await asyncio.shield(self._completion)

    def completion_name(self) -> str | None:
        """The loaded completion model's name; None while none is loaded."""
        model = _loaded(self._completion)
        return None if model is None else model.engine.info.name

    def status(self) -> dict[str, Any]:
        """Health and model information (the `infill/status` request, `doctor` in the shell)."""
        result: dict[str, Any] = {
            "status": self.state.value,
            "last_error": self.last_error,
            "download": _download_json(self.download),
            "engine": self._engine_json(),
        }
        future = self._completion
        if (
            future is not None
            and future.done()
            and not future.cancelled()
            and future.exception() is None
        ):
            model = future.result()
            info = model.engine.info
            result.update(
                model=info.name,
                model_path=info.path,
                backend=info.backend,
                device=info.device,
                gpu=info.gpu,
                warnings=list(info.warnings),
                context_size=info.context_size,
                fim_family=model.format.fim.family if model.format.fim else None,
                fim_note=model.fim_note,
                features_off=list(model.features_off),
                kv_cache=_cache_json(model.engine.cache_status()),
            )
        else:
            result.update(
                model=None,
                model_path=None,
                backend=None,
                device=None,
                gpu=None,
                warnings=[],
                context_size=None,
                fim_family=None,
                fim_note=None,
                features_off=[],
                kv_cache=None,
            )
        return result

    def _engine_json(self) -> dict[str, Any] | None:
        """Where the models run: `mode` (shared, here, server, remote), why here where `auto`
        could not share, and the shared engine's socket, process, clients and memory."""
        placement = self.placement
        if placement is None:
            return None
        result: dict[str, Any] = {"mode": placement.mode.value, "why_here": placement.why_here}
        if placement.url is not None:
            result["url"] = placement.url
        if self._link is not None:
            result.update(self._link.view().as_json())
        return result

    def loaded_engines(self) -> dict[Role, BaseEngine]:
        """The engine of each role whose model is loaded (one engine may serve both)."""
        engines: dict[Role, BaseEngine] = {}
        completion = _loaded(self._completion)
        if completion is not None:
            engines[Role.COMPLETION] = completion.engine
        chat = _loaded(self._chat)
        if chat is not None:
            engines[Role.CHAT] = chat
        next_edit = _loaded(self._next_edit)
        if next_edit is not None:
            engines[Role.NEXT_EDIT] = next_edit.engine
        return engines

    def _stop_engines(self, reason: str) -> None:
        """Abort the loaded engines' jobs (they end with `reason`) and refuse new ones."""
        for engine in self.loaded_engines().values():
            engine.stop(reason)

    def begin_close(self) -> None:
        """The part of shutting down that cannot wait: the engines stop (running jobs end with
        an error, new ones are refused) and no model loads after this. Instant."""
        self._closed = True
        self._stop_engines("the server is shutting down")
        link = self._link
        if link is not None:
            # The engine hears at once that this window left (its idle time starts now), on a
            # thread: `exit` waits for it briefly (`left`), not for the models to be freed.
            self._leaving = threading.Thread(
                target=link.close, name="infill-engine-leave", daemon=True
            )
            self._leaving.start()

    def left(self, timeout: float = LEAVE_SECONDS) -> None:
        """Wait (at most `timeout`) until the shared engine was told this window left."""
        if self._leaving is not None:
            self._leaving.join(timeout)

    async def aclose(self) -> None:
        """Shut down: 1. `begin_close`; 2. on a thread, wait for the workers and only then
        free the models. The event loop keeps serving meanwhile, so that every request gets
        its answer."""
        self.begin_close()
        await asyncio.to_thread(self._close_models)

    def _close_models(self) -> None:
        # After a load in progress, so that it leaves no model behind; but a load that hangs
        # (given up after its deadline, its thread still stuck in the library) holds the lock
        # for good, and shutdown must not wait for it: the process is ending anyway.
        if not self._lock.acquire(timeout=CLOSE_LOCK_TIMEOUT):
            log.warning("a model load is still stuck: its model is left to the process's end")
            return
        try:
            if self._models is not None:
                self._models.close()
                self._models = None
            if self._link is not None:
                self._link.close()
                self._link = None
        finally:
            self._lock.release()


def _loaded(future: asyncio.Future[T] | None) -> T | None:
    """What a load ended with, if it ended well."""
    if future is None or not future.done() or future.cancelled() or future.exception():
        return None
    return future.result()


def _download_json(progress: DownloadProgress | None) -> dict[str, Any] | None:
    """A download in progress, for `infill/status`."""
    if progress is None:
        return None
    return {
        "model": progress.model,
        "phase": progress.phase.value,
        "bytes": progress.done,
        "total_bytes": progress.total,
        "percent": progress.percent,
        "message": progress.words(),
    }


def _cache_json(status: CacheStatus | None) -> dict[str, int] | None:
    """What the completion model keeps of recently used documents, for `infill/status`."""
    if status is None:
        return None
    return {
        "documents": status.states,
        "tokens": status.tokens,
        "bytes": status.bytes,
        "budget_bytes": status.budget_bytes,
        "live_tokens": status.live_tokens,
        "restored": status.restored,
        "evicted": status.evicted,
    }
