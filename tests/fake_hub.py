"""A stand-in for the Hugging Face hub on loopback: the endpoints huggingface_hub 2.x calls to
download (read from its source: file_download.py, _snapshot_download.py, hf_api.py), served
from repositories held in memory, every request recorded. Tests point `HF_ENDPOINT` at it.

- `HEAD /{org}/{repo}/resolve/{revision}/{path}`: the file's metadata, as the hub answers it:
  `X-Repo-Commit`, `ETag` (the sha256 of a file in LFS, else the git blob id),
  `X-Linked-Etag` and `X-Linked-Size` for LFS files, `Content-Length`; a missing repository
  or file is a 404 with the hub's `X-Error-Code` (`RepoNotFound`, `EntryNotFound`);
- `GET` of the same: the bytes;
- `GET /api/models/{org}/{repo}/revision/{revision}`: the repository's commit (`sha`);
- `GET /api/models/{org}/{repo}/tree/{revision}`: its files, with `lfs.oid` (the sha256).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from scripted_servers import serve_in_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

#: The files the hub keeps in LFS (their ETag is their sha256), as .gitattributes says on the
#: hub by default.
LFS_SUFFIXES = (".gguf", ".safetensors", ".bin")


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    #: A sha256 the hub states for a file instead of the true one (a damaged download).
    stated_sha256: dict[str, str] = field(default_factory=dict)
    #: Given: each file's download sends its first half, then waits until the test sets it.
    release: threading.Event | None = None


@dataclass
class FakeHub:
    url: str
    repos: dict[str, FakeRepo]
    requests: list[str] = field(default_factory=list)  # "METHOD path"

    def downloads(self) -> list[str]:
        """The paths of the files it served (GETs of /resolve/)."""
        return [
            r.split(" ", 1)[1] for r in self.requests if r.startswith("GET ") and "/resolve/" in r
        ]


def _is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


def _etag(repo: FakeRepo, path: str) -> str:
    data = repo.files[path]
    if _is_lfs(path):
        return repo.stated_sha256.get(path, hashlib.sha256(data).hexdigest())
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's blob id


def build_app(hub: FakeHub) -> Starlette:
    def not_found(code: str, commit: str | None = None) -> Response:
        headers = {"X-Error-Code": code}
        if commit:
            headers["X-Repo-Commit"] = commit
        return Response(f"{code}\n", status_code=404, headers=headers)

    async def record(request: Request) -> None:
        hub.requests.append(f"{request.method} {request.url.path}")

    async def resolve(request: Request) -> Response:
        await record(request)
        p = request.path_params
        repo = hub.repos.get(f"{p['org']}/{p['repo']}")
        if repo is None:
            return not_found("RepoNotFound")
        if p["revision"] not in ("main", repo.commit):
            return not_found("RevisionNotFound")
        path = p["path"]
        if path not in repo.files:
            return not_found("EntryNotFound", repo.commit)
        data, etag = repo.files[path], _etag(repo, path)
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if _is_lfs(path):
            headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))}
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(data))
            return Response(b"", headers=headers)
        if repo.release is None:
            return Response(data, headers=headers, media_type="application/octet-stream")
        release, half = repo.release, len(data) // 2

        async def halves() -> AsyncIterator[bytes]:
            yield data[:half]
            await asyncio.to_thread(release.wait, 120)
            yield data[half:]

        headers["Content-Length"] = str(len(data))
        return StreamingResponse(halves(), headers=headers, media_type="application/octet-stream")

    async def revision(request: Request) -> Response:
        await record(request)
        p = request.path_params
        repo_id = f"{p['org']}/{p['repo']}"
        repo = hub.repos.get(repo_id)
        if repo is None:
            return not_found("RepoNotFound")
        siblings = [{"rfilename": path} for path in repo.files]
        return JSONResponse({"id": repo_id, "sha": repo.commit, "siblings": siblings})

    async def tree(request: Request) -> Response:
        await record(request)
        p = request.path_params
        repo = hub.repos.get(f"{p['org']}/{p['repo']}")
        if repo is None:
            return not_found("RepoNotFound")
        entries = []
        for path, data in repo.files.items():
            entry: dict[str, object] = {
                "type": "file",
                "oid": hashlib.sha1(data).hexdigest(),
                "size": len(data),
                "path": path,
            }
            if _is_lfs(path):
                entry["lfs"] = {"oid": _etag(repo, path), "size": len(data), "pointerSize": 134}
            entries.append(entry)
        return JSONResponse(entries)

    return Starlette(
        routes=[
            Route("/api/models/{org}/{repo}/revision/{revision}", revision),
            Route("/api/models/{org}/{repo}/tree/{revision}", tree),
            Route("/{org}/{repo}/resolve/{revision}/{path:path}", resolve, methods=["GET", "HEAD"]),
        ]
    )


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    """A fake hub on a free loopback port, with no repository until the test adds some."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    hub = FakeHub(url=f"http://127.0.0.1:{sock.getsockname()[1]}", repos={})
    stop: Callable[[], None] = serve_in_thread(build_app(hub), sock)
    try:
        yield hub
    finally:
        stop()
        sock.close()
