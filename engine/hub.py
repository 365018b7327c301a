"""Models named `hf:ORG/REPO/FILE.gguf` or `hf:ORG/REPO`: downloaded once from the Hugging Face
hub into our cache folder, checked against the hub's sha256. The one part of the project that
reaches the network, and only when a user names such a model.

huggingface_hub does the talking (`HF_ENDPOINT`, `HF_HUB_OFFLINE`, `HF_TOKEN` are its own, read
when it is first imported), into a folder of ours: `<cache>/hf/ORG/REPO/`, the repository's
files at their paths (its `local_dir` mode), so that a model's path is known before it is
fetched. Once every file is checked, a stamp records the commit and each file's size and
sha256; a later load that finds the stamp, and the files at their sizes, asks the hub nothing.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from engine.default_models import os_reason, private_folder, write_atomically
from engine.errors import ModelLoadError
from engine.specs import HubModel

log = logging.getLogger(__name__)


def model_path(model: HubModel) -> Path:
    """Where `model` is (or will be) in our cache: the GGUF file, or the repository's folder."""
    return _root(model) / model.filename if model.filename else _root(model)


class Phase(enum.StrEnum):
    """Where a download is."""

    DOWNLOADING = "downloading"
    CHECKING = "checking"  # the sha256 of what came
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    """How far one model's download is (every file of it together)."""

    model: str  # as the user named it: hf:ORG/REPO/FILE.gguf
    phase: Phase
    done: int = 0  # bytes
    total: int | None = None  # bytes, when the hub said
    error: str | None = None  # FAILED: why

    @property
    def percent(self) -> int | None:
        if not self.total:
            return None
        return min(100, self.done * 100 // self.total)

    def words(self) -> str:
        """`hf:org/repo/m.gguf: 45% (1.1 of 2.4 GB)`, what the editor and the log show."""
        if self.phase is Phase.FAILED:
            return f"{self.model}: download failed: {self.error}"
        if self.phase is Phase.DONE:
            return f"{self.model}: downloaded ({_size(self.done)}, sha256 checked)"
        if self.phase is Phase.CHECKING:
            return f"{self.model}: checking the sha256 of {_size(self.done)}"
        if self.total is None:
            return f"{self.model}: {_size(self.done)} downloaded"
        return f"{self.model}: {self.percent}% ({_size(self.done)} of {_size(self.total)})"


#: Who hears of a download's progress; called on the loading thread.
ProgressSink = Callable[[DownloadProgress], None]


def _size(count: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


@dataclass(frozen=True, slots=True)
class _File:
    """A file of the model as the hub lists it."""

    path: str  # in the repository
    size: int | None
    sha256: str | None  # the hub's, for a file stored in LFS (every weights file)


#: How long a load waits for another process that is downloading the same model.
DOWNLOAD_LOCK_SECONDS = 3600.0
# A split GGUF: llama.cpp loads the first part and finds the others beside it.
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_SHA256 = re.compile(r"[0-9a-f]{64}")
# What transformers needs of a repository: its configs, tokenizer and weights, at the top
# (not an onnx/ or a gguf copy, nor pickled weights where safetensors are there).
_FOLDER_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja", ".tiktoken")
_STAMP = ".infill-stamp.json"


def fetch(model: HubModel, progress: ProgressSink | None = None) -> Path:
    """The local path of `model`, downloaded first unless our cache has it whole. Each file
    is checked against the hub's sha256, and a file that does not match is removed. Every
    failure is a ModelLoadError saying what to do."""
    target = model_path(model)
    stamp = _stamp_path(model)
    if _stamped(stamp, _root(model)):
        return target
    from huggingface_hub import constants

    if constants.is_offline_mode():
        raise ModelLoadError(
            f"{model} is not in the cache ({target}) and HF_HUB_OFFLINE forbids downloading "
            "it; run once without HF_HUB_OFFLINE (or name a local file)"
        )
    lock = stamp.with_name(stamp.name + ".lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(lock, timeout=DOWNLOAD_LOCK_SECONDS):
            if not _stamped(stamp, _root(model)):  # not fetched by another process meanwhile
                _download(model, stamp, progress)
    except Timeout as e:
        raise ModelLoadError(
            f"another process has been downloading {model} for over "
            f"{DOWNLOAD_LOCK_SECONDS:g} s (lock {e.lock_file}); remove the lock file if no "
            "infill-lsp is running"
        ) from e
    except OSError as e:
        raise ModelLoadError(
            f"cannot download {model} into {target.parent}: {os_reason(e)}; set "
            "INFILL_CACHE_DIR to a writable folder with room for the model"
        ) from e
    return target


def _root(model: HubModel) -> Path:
    """The repository's folder in our cache (its files at their paths)."""
    return private_folder("hf", "keep models from the hub") / model.repo_id


def _stamp_path(model: HubModel) -> Path:
    name = model.filename.replace("/", "%2F") if model.filename else "repository"
    return _root(model) / ".infill" / f"{name}{_STAMP}"


def _stamped(stamp: Path, root: Path) -> bool:
    """Whether the stamp says the model was fetched and checked whole, and each of its files
    (under `root`) still has the size recorded (one cut short, or removed, since: fetched
    anew)."""
    try:
        record = json.loads(stamp.read_bytes())
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as e:
        log.warning("ignoring the damaged stamp %s: %s", stamp, e)
        return False
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not files:
        return False
    for relative, entry in files.items():
        try:
            size = (root / relative).stat().st_size
        except OSError:
            return False
        if not isinstance(entry, dict) or entry.get("size") != size:
            log.warning("%s has changed since it was downloaded: fetching it again", relative)
            return False
    return True


def _download(model: HubModel, stamp: Path, progress: ProgressSink | None) -> None:
    """List the model's files on the hub, fetch them at one commit, check them, stamp."""
    import huggingface_hub

    tally = _Tally(str(model), progress)
    root = _root(model)
    try:
        commit, files = _listing(model)
        tally.total = sum(f.size or 0 for f in files) or None
        log.info("downloading %s (%d files) into %s", model, len(files), root)
        for file in files:
            _drop_if_changed(root / file.path, file)
            huggingface_hub.hf_hub_download(
                model.repo_id,
                file.path,
                revision=commit,
                local_dir=root,
                cache_dir=root / ".infill" / "hub-cache",
                tqdm_class=tally.bar_class(),
            )
            tally.file_done(file.size)
        tally.checking()
        record = {
            "model": str(model),
            "commit": commit,
            "files": {f.path: _checked(model, root / f.path, f) for f in files},
        }
        stamp.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(stamp, json.dumps(record, indent=1) + "\n")
    except ModelLoadError as e:
        tally.failed(str(e))
        raise
    except Exception as e:
        reason = _hub_reason(model, e)
        tally.failed(reason)
        if isinstance(e, OSError) and reason == str(e):
            raise  # the disk's: fetch says where
        raise ModelLoadError(reason) from e
    tally.finished()
    log.info("%s is in %s", model, model_path(model))


def _drop_if_changed(path: Path, file: _File) -> None:
    """Remove a file from an earlier download whose size is not the hub's (cut short, or
    changed since): huggingface_hub's own record of it would otherwise keep it as it is."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if file.size is not None and size != file.size:
        path.unlink()


def _listing(model: HubModel) -> tuple[str, list[_File]]:
    """The commit the files are fetched at, and the files: a GGUF (with its other parts, for
    a split one), or what transformers needs of the repository."""
    import huggingface_hub

    if model.filename is not None:
        names = [model.filename]
        split = _SPLIT.search(model.filename)
        if split:
            count = int(split.group(2))
            head = model.filename[: split.start()]
            names = [f"{head}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
        files, commit = [], None
        for name in names:
            url = huggingface_hub.hf_hub_url(model.repo_id, name, revision=commit)
            meta = huggingface_hub.get_hf_file_metadata(url)
            commit = commit or meta.commit_hash
            etag = (meta.etag or "").lower()
            files.append(_File(name, meta.size, etag if _SHA256.fullmatch(etag) else None))
        if commit is None:
            raise ModelLoadError(f"the hub named no commit for {model}")
        return commit, files
    from huggingface_hub.hf_api import RepoFile

    api = huggingface_hub.HfApi()
    commit = api.model_info(model.repo_id, revision="main").sha
    if commit is None:
        raise ModelLoadError(f"the hub named no commit for {model}")
    listed = [
        entry
        for entry in api.list_repo_tree(model.repo_id, recursive=True, revision=commit)
        if isinstance(entry, RepoFile)
    ]
    return commit, _folder_files(model, listed)


def _folder_files(model: HubModel, listed: Sequence[Any]) -> list[_File]:
    top = [entry for entry in listed if "/" not in entry.path]
    wanted = [entry for entry in top if entry.path.lower().endswith(_FOLDER_SUFFIXES)]
    if not any(entry.path.endswith(".safetensors") for entry in wanted):
        wanted += [entry for entry in top if entry.path.endswith(".bin")]
    if not any(entry.path == "config.json" for entry in wanted):
        raise ModelLoadError(
            f"{model} has no config.json: it is not a transformers model folder (for a GGUF "
            "file in it, name the file: hf:ORG/REPO/FILE.gguf)"
        )
    return [
        _File(entry.path, entry.size, entry.lfs.sha256 if entry.lfs is not None else None)
        for entry in sorted(wanted, key=lambda entry: entry.path)
    ]


def _checked(model: HubModel, path: Path, file: _File) -> dict[str, Any]:
    """The stamp's record of one fetched file, after its size and sha256 are the hub's; a
    file that differs is removed and refused."""
    size = path.stat().st_size
    digest = sha256_of(path) if file.sha256 is not None else None
    if file.size is not None and size != file.size:
        path.unlink(missing_ok=True)
        raise ModelLoadError(
            f"{model}: {file.path} has {size} bytes where the hub lists {file.size}; it was "
            "removed: try again"
        )
    if file.sha256 is not None and digest != file.sha256:
        path.unlink(missing_ok=True)
        raise ModelLoadError(
            f"{model}: the sha256 of the downloaded {file.path} is {digest}, the hub's is "
            f"{file.sha256}: the file was removed (a damaged download, or a proxy that changed "
            "it); try again"
        )
    if file.sha256 is None:
        log.info(
            "%s: the hub gives no sha256 of %s (not in LFS): its size is checked", model, file.path
        )
    return {"size": size, "sha256": digest}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _hub_reason(model: HubModel, error: Exception) -> str:
    """What went wrong, in the user's terms, from huggingface_hub's (or the network's) error."""
    from huggingface_hub import constants, errors

    name = type(error).__name__
    if isinstance(error, errors.RemoteEntryNotFoundError):
        return f"the hub has no file {model.filename} in {model.repo_id} ({model})"
    if isinstance(error, errors.GatedRepoError):
        return (
            f"{model.repo_id} is gated: accept its terms on the hub, then set HF_TOKEN (or run "
            "`hf auth login`)"
        )
    if isinstance(error, errors.RevisionNotFoundError):
        return f"the hub has no such revision of {model.repo_id}"
    if isinstance(error, errors.RepositoryNotFoundError):
        return (
            f"the hub has no repository {model.repo_id} ({model}), or it is private: check "
            "the name, or set HF_TOKEN"
        )
    if isinstance(error, errors.LocalEntryNotFoundError | errors.OfflineModeIsEnabled):
        return f"cannot download {model}: {error}"
    if isinstance(error, errors.HfHubHTTPError):
        return f"the hub refused {model}: {error}"
    if any(kind.__name__ in ("TransportError", "ProxyError") for kind in type(error).__mro__):
        endpoint = constants.ENDPOINT
        return f"cannot reach the hub at {endpoint} for {model}: {name}: {error}"
    if isinstance(error, OSError):
        return str(error)
    return f"cannot download {model}: {name}: {error}"


class _Tally:
    """The bytes of one model's download, across its files, told to the sink: at each whole
    percent (or each megabyte where the total is unknown), not at each chunk."""

    def __init__(self, model: str, sink: ProgressSink | None) -> None:
        self.model = model
        self.sink = sink
        self.total: int | None = None
        self._before = 0  # bytes of the files already fetched
        self._current = 0  # bytes of the file being fetched
        self._told: tuple[Phase, int | None] | None = None
        self._lock = threading.Lock()
        self._logged = 0.0

    @property
    def done(self) -> int:
        return self._before + self._current

    def bar_class(self) -> type[_Bar]:
        """The progress-bar class huggingface_hub builds for each file: ours tells the tally."""
        tally = self

        class Bar(_Bar):
            def update(self, n: float | None = 1) -> None:
                tally.advance(int(n or 0))

        return Bar

    def advance(self, count: int) -> None:
        with self._lock:
            self._current = max(0, self._current + count)
        self._tell(Phase.DOWNLOADING)

    def file_done(self, size: int | None) -> None:
        with self._lock:
            self._before += size if size is not None else self._current
            self._current = 0
        self._tell(Phase.DOWNLOADING)

    def checking(self) -> None:
        self._tell(Phase.CHECKING)

    def finished(self) -> None:
        self._tell(Phase.DONE)

    def failed(self, reason: str) -> None:
        self._emit(DownloadProgress(self.model, Phase.FAILED, self.done, self.total, reason))

    def _tell(self, phase: Phase) -> None:
        event = DownloadProgress(self.model, phase, self.done, self.total)
        step = event.percent if event.total else event.done >> 20
        if (phase, step) == self._told:
            return
        self._told = (phase, step)
        self._emit(event)

    def _emit(self, event: DownloadProgress) -> None:
        now = time.monotonic()
        if event.phase is not Phase.DOWNLOADING or now - self._logged >= 5.0:
            self._logged = now
            log.info("%s", event.words())
        if self.sink is not None:
            self.sink(event)


class _Bar:
    """What huggingface_hub asks of a progress bar (tqdm's calls it makes), with nothing drawn:
    our server's stderr is its log. `update_transfer` makes it count a Xet download's bytes
    once (written bytes only), as it does for its own snapshot bar."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.total = kwargs.get("total")
        self.n = 0
        self.format_dict: dict[str, Any] = {}

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def update(self, n: float | None = 1) -> None:
        return None

    def update_transfer(self, n: float | None = 1) -> None:
        return None

    def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
        return None

    def set_transfer_postfix_str(self, *args: Any, **kwargs: Any) -> None:
        return None

    def set_description(self, *args: Any, **kwargs: Any) -> None:
        return None

    def set_description_str(self, *args: Any, **kwargs: Any) -> None:
        return None

    def refresh(self) -> None:
        return None

    def close(self) -> None:
        return None
