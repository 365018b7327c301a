"""schemathesis over the engine server's own /openapi.json, in-process over scripted engines, so
that the document clients are generated from is the API served: requests made from the document,
valid and not, each answer checked against it: no 5xx, the documented status codes, content types
and shapes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is not installed (the dev extra installs it)"
)

from fake_backend import FakeBackend  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402
from scripted_servers import CHAT_TEMPLATE, KEY  # noqa: E402

from engine.api.app import build_app  # noqa: E402
from engine.api.loader import ModelLoader  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.types import Role  # noqa: E402

AUTH = {"Authorization": f"Bearer {KEY}"}
MODES = [
    schemathesis.GenerationMode.POSITIVE,
    schemathesis.GenerationMode.NEGATIVE,
]


@pytest.fixture(scope="module")
def api_schema() -> Iterator[Any]:
    engines = {
        Role.COMPLETION: Engine(FakeBackend(name="coder", script=["hello world"])),
        Role.CHAT: Engine(FakeBackend(name="talker", script=["hi"], template=CHAT_TEMPLATE)),
    }
    models = ModelLoader.from_engines(engines)
    models.load_all()
    # schemathesis's client names its own host, so the app is not the loopback-only one; the
    # key makes every route reachable.
    app = build_app(models, api_key=KEY, loopback=False, token_budget=512)
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    models.close()


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_every_route_answers_as_documented(api_schema: Any, data: st.DataObject, mode: Any) -> None:
    # schemathesis's strategy over all operations, valid and invalid data (its own pytest
    # plugin does not run under pytest 9: it reads a private attribute pytest removed).
    case = data.draw(api_schema.as_strategy(mode))
    # Every check but one: a body the schema allows may still be refused by a rule across
    # fields that JSON Schema cannot say (best_of equal to n, n x max_tokens within the
    # budget, token ids inside the model's vocabulary); it must be refused with a 4xx, which
    # the other checks see to.
    case.call_and_validate(headers=AUTH, excluded_checks=[positive_data_acceptance])
