"""What an OpenAI-compatible server says about its models (`GET /models`): which model we ask
for, its context size, and, from our own engine server, its FIM family, roles, what it offers
beyond OpenAI's routes and (to a trusted caller) the model file it serves.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from engine.backends.openai_stream import (
    ERROR_BODY_BYTES,
    IDENTITY,
    AnswerRefused,
    describe,
    error_message,
    headers,
    loads,
    read_capped,
    read_head,
    status,
    verifies_tls,
)
from engine.errors import ModelLoadError
from engine.fim import FIM_FAMILIES
from engine.specs import RemoteSpec

log = logging.getLogger(__name__)

#: Seconds the model list may take when the backend connects.
DISCOVERY_TIMEOUT = 10.0
#: Bytes of the model list: a gateway listing 300 models with their descriptions sends about
#: 1 MB; parsed, 4 MiB of JSON can take 100 MB at worst (a list of empty objects).
MODEL_LIST_BYTES = 4 << 20
#: Who owns the models in our own engine server's list (engine/api/).
OURS = "infill-lsp"
#: `owned_by` values of OpenAI's own API, which refuses parameters it does not know.
OPENAI_OWNERS = frozenset({"openai", "system", "openai-internal"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Discovery:
    """What the server's model list says about the model we ask for."""

    model: str | None  # the name sent in requests (None: let the server choose)
    context_size: int
    fim_family: str | None
    ours: bool  # our own engine server: it takes our extensions (cache_key, ...)
    extensions: bool  # the server takes fields beyond OpenAI's (top_k, repeat_penalty, ...)
    #: What our own engine server says the model offers beyond OpenAI's routes ("score",
    #: "branch": /v1/infill/score and /v1/infill/branch; "token_ids": prompts as the
    #: model's ids); empty for every other server.
    capabilities: frozenset[str] = frozenset()
    #: The model file our own engine server serves (it tells a caller it trusts): where its
    #: tokenizer can be loaded from on the same machine. None elsewhere.
    model_path: str | None = None
    #: Where our own engine server's model computes ("cpu", "cuda:0"): what pays on it. None
    #: for every other server.
    device: str | None = None


def discover(spec: RemoteSpec, *, client: httpx.Client | None = None) -> Discovery:
    """Ask the server for its models (`GET /models`) and pick the one for `spec.role`: the
    named one, else the one our engine server lists for the role, else the first. Raises
    ModelLoadError naming the endpoint and the cause when the server cannot be asked."""
    owned = client is None
    if client is None:
        client = httpx.Client(
            transport=None if spec.socket is None else httpx.HTTPTransport(uds=spec.socket),
            timeout=DISCOVERY_TIMEOUT,
            verify=verifies_tls(spec.endpoint),
            headers=IDENTITY,
        )
    deadline = time.monotonic() + DISCOVERY_TIMEOUT
    try:
        with client.stream("GET", f"{spec.endpoint}/models", headers=headers(spec)) as response:
            if response.status_code >= 400:
                content = read_head(response, ERROR_BODY_BYTES, deadline=deadline)
                raise ModelLoadError(
                    f"{spec.endpoint} answered the model list with {status(response)}: "
                    f"{error_message(content)}"
                )
            content = read_capped(
                response, MODEL_LIST_BYTES, what="a model list", deadline=deadline
            )
        listed = _model_entries(content, spec.endpoint)
    except AnswerRefused as e:
        raise ModelLoadError(f"{spec.endpoint} {e}") from e
    except httpx.HTTPError as e:
        raise ModelLoadError(f"cannot reach {spec.endpoint}: {describe(e)}") from e
    finally:
        if owned:
            client.close()
    entry = _pick(listed, spec)
    ours = entry.get("owned_by") == OURS
    context = entry.get("context_size") or entry.get("max_model_len")
    fim = spec.fim_family
    if fim is None and ours and entry.get("fim_family") in FIM_FAMILIES:
        fim = str(entry["fim_family"])
    return Discovery(
        model=spec.model or (str(entry["id"]) if "id" in entry else None),
        context_size=context if isinstance(context, int) and context > 0 else spec.context_size,
        fim_family=None if fim == "none" else fim,
        ours=ours,
        extensions=entry.get("owned_by") not in OPENAI_OWNERS,
        capabilities=_capabilities(entry) if ours else frozenset(),
        model_path=_model_path(entry) if ours else None,
        device=_device(entry) if ours else None,
    )


def _capabilities(entry: dict[str, Any]) -> frozenset[str]:
    listed = entry.get("capabilities")
    if not isinstance(listed, list):
        return frozenset()
    return frozenset(c for c in listed if isinstance(c, str))


def _model_path(entry: dict[str, Any]) -> str | None:
    path = entry.get("model_path")
    return path if isinstance(path, str) and path else None


def _device(entry: dict[str, Any]) -> str | None:
    device = entry.get("device")
    return device if isinstance(device, str) and device else None


def _model_entries(content: bytes, endpoint: str) -> list[dict[str, Any]]:
    try:
        body = loads(content)
    except ValueError as e:
        raise ModelLoadError(f"the model list of {endpoint} is not JSON: {e}") from e
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ModelLoadError(
            f"the model list of {endpoint} has no `data` list: not an OpenAI-compatible server"
        )
    return [entry for entry in data if isinstance(entry, dict)]


def _pick(listed: list[dict[str, Any]], spec: RemoteSpec) -> dict[str, Any]:
    if spec.model is not None:
        named = next((e for e in listed if e.get("id") == spec.model), None)
        if named is None:
            # Some gateways list nothing, or not everything: ask for it all the same.
            log.warning(
                "%s does not list %r; asking for it all the same", spec.endpoint, spec.model
            )
            return {}
        return named
    for entry in listed:
        roles = entry.get("roles")
        if entry.get("owned_by") == OURS and isinstance(roles, list) and spec.role in roles:
            return entry
    if not listed:
        raise ModelLoadError(
            f"{spec.endpoint} lists no model; name one with --remote-model or the remoteModel "
            "setting"
        )
    return listed[0]
