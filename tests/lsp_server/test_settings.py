"""The `infill` settings: one fully defaulted tree, parsed from the client's camelCase options;
unknown keys ignored; a bad value falls back to its default with one message naming the key."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.specs import ModelOptions
from lsp_server.settings import Settings, parse_settings

DEFAULTS = Settings()

#: One good value per key, none of them the default, and the field it sets.
#: A client's camelCase key, a value it may send (JSON, so Any), the Settings field it sets.
GOOD: list[tuple[str, Any, str]] = [
    ("model", "/models/coder.gguf", "model"),
    ("chatModel", "/models/chat", "chat_model"),
    ("backend", "transformers", "backend"),
    ("device", "cuda:1", "device"),
    ("decode", "static", "decode"),
    ("gpuLayers", -1, "gpu_layers"),
    ("contextSize", 2048, "context_size"),
    ("threads", 3, "threads"),
    ("kvCacheMb", 0, "kv_cache_mb"),
    ("fimFamily", "qwen", "fim_family"),
    ("endpoint", "http://gpu-box:8000/v1", "endpoint"),
    ("apiKey", "sk-local-1234", "api_key"),
    ("remoteModel", "qwen2.5-coder-7b", "remote_model"),
    ("remoteChatModel", "llama-3.1-8b-instruct", "remote_chat_model"),
    ("maxTokensSingleLine", 7, "max_tokens_single_line"),
    ("maxTokensMultiLine", 99, "max_tokens_multi_line"),
    ("debounceMs", 0, "debounce_ms"),
    ("invokedSuggestions", 5, "invoked_suggestions"),
    ("temperature", 0.4, "temperature"),
    ("speculativeSuggestions", 0, "speculative_suggestions"),
    ("minConfidence", 0.95, "min_confidence"),
    ("suffixRanking", "on", "suffix_ranking"),
    ("completionMenu", "off", "completion_menu"),
    ("completionMenuWaitMs", 250, "completion_menu_wait_ms"),
    ("completionMenuPlace", "last", "completion_menu_place"),
    ("prefixTokens", 512, "prefix_tokens"),
    ("suffixTokens", 0, "suffix_tokens"),
    ("contextTokens", 0, "context_tokens"),
    ("maxDocumentBytes", 1 << 20, "max_document_bytes"),
    ("maxSelectionChars", 4000, "max_selection_chars"),
    ("typeAheadDocuments", 1, "type_ahead_documents"),
    ("nextEditModel", "/models/zeta.gguf", "next_edit_model"),
    ("nextEditFormat", "sweep", "next_edit_format"),
    ("remoteNextEditModel", "zeta", "remote_next_edit_model"),
    ("usageCounts", False, "usage_counts"),
    ("engine", "here", "engine"),
    ("engineIdleExit", 60, "engine_idle_exit"),
]

#: Values each key must refuse: wrong type, out of range, or not one of the choices.
BAD = [
    ("model", 5),
    ("chatModel", ["a.gguf"]),
    ("backend", "tensorflow"),
    ("device", "gpu"),
    ("device", "cuda:x"),
    ("decode", "graphs"),
    ("gpuLayers", -2),
    ("gpuLayers", "all"),
    ("contextSize", 100),
    ("threads", 0),
    ("kvCacheMb", -1),
    ("kvCacheMb", "1G"),
    ("fimFamily", "gpt"),
    ("endpoint", 8000),
    ("apiKey", 12345),
    ("remoteModel", ["a"]),
    ("remoteChatModel", 3),
    ("maxTokensSingleLine", "lots"),
    ("maxTokensSingleLine", True),
    ("maxTokensSingleLine", 3.0),
    ("maxTokensMultiLine", 0),
    ("debounceMs", -1),
    ("invokedSuggestions", 11),
    ("temperature", "hot"),
    ("temperature", 2.5),
    ("temperature", False),
    ("speculativeSuggestions", 3),
    ("minConfidence", 1.5),
    ("minConfidence", "high"),
    ("minConfidence", True),
    ("suffixRanking", True),
    ("completionMenu", "always"),
    ("completionMenuWaitMs", 60_000),
    ("completionMenuPlace", 1),
    ("prefixTokens", 1),
    ("suffixTokens", None),
    ("contextTokens", -1),
    ("contextTokens", 1.5),
    ("maxDocumentBytes", 0),
    ("maxSelectionChars", "4k"),
    ("typeAheadDocuments", 0),
    ("nextEditModel", 1),
    ("nextEditFormat", "instinct"),
    ("engine", "ftp://gpu-box:8012"),
    ("engine", "shared"),
    ("engine", 8012),
    ("engineIdleExit", 0),
    ("remoteNextEditModel", {"name": "zeta"}),
    ("usageCounts", "off"),
    ("usageCounts", 0),
]


def test_the_tables_cover_every_setting() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)}
    assert {field for _, _, field in GOOD} == fields
    assert {key for key, _ in BAD} == {key for key, _, _ in GOOD}


@pytest.mark.parametrize(("key", "value", "field"), GOOD)
def test_a_camel_case_key_sets_its_setting(key: str, value: object, field: str) -> None:
    settings, problems = parse_settings({key: value})
    assert problems == []
    assert getattr(settings, field) == value
    assert getattr(DEFAULTS, field) != value


def test_the_section_may_come_wrapped_in_an_infill_object() -> None:
    section = {key: value for key, value, _ in GOOD}
    unwrapped, problems_unwrapped = parse_settings(section)
    wrapped, problems_wrapped = parse_settings({"infill": section})
    assert problems_unwrapped == problems_wrapped == []
    assert wrapped == unwrapped
    assert wrapped != DEFAULTS


def test_unknown_keys_are_ignored_without_a_message() -> None:
    raw = {
        "infill": {
            "max_tokens_single_line": 3,  # snake_case is not the client's spelling
            "fancyNewOption": True,
            "debounceMs": 5,
        }
    }
    settings, problems = parse_settings(raw)
    assert problems == []
    assert settings == dataclasses.replace(DEFAULTS, debounce_ms=5)


@pytest.mark.parametrize(("key", "value"), BAD)
def test_a_bad_value_falls_back_to_its_default_with_one_message_naming_the_key(
    key: str, value: object
) -> None:
    field = next(field for k, _, field in GOOD if k == key)
    good = {k: v for k, v, _ in GOOD if k != key}
    # The base holds a non-default value for the key: the fallback is the default, not it.
    base = dataclasses.replace(DEFAULTS, **{field: dict((k, v) for k, v, _ in GOOD)[key]})
    settings, problems = parse_settings({"infill": {**good, key: value}}, base)
    assert len(problems) == 1
    assert f"infill.{key}" in problems[0]
    # A secret is never repeated, not even a bad one (it may be a real key put in the
    # wrong place); every other value is, so the user sees what was refused.
    assert (repr(value) in problems[0]) == (key != "apiKey")
    assert getattr(settings, field) == getattr(DEFAULTS, field)
    # The other keys of the same section are still taken.
    for k, v, f in GOOD:
        if k != key:
            assert getattr(settings, f) == v, k


def test_each_bad_value_gets_its_own_message() -> None:
    settings, problems = parse_settings(
        {"maxTokensSingleLine": "lots", "debounceMs": -1, "temperature": 0.2}
    )
    assert len(problems) == 2
    assert any("infill.maxTokensSingleLine" in p for p in problems)
    assert any("infill.debounceMs" in p for p in problems)
    assert settings == dataclasses.replace(DEFAULTS, temperature=0.2)


@pytest.mark.parametrize("raw", [[1, 2], "lots", 42, True])
def test_options_that_are_not_an_object_keep_the_base_with_a_message(raw: object) -> None:
    base = Settings(debounce_ms=5)
    settings, problems = parse_settings(raw, base)
    assert settings == base
    assert len(problems) == 1
    assert "infill" in problems[0]
    assert type(raw).__name__ in problems[0]


def test_no_options_keep_the_base_quietly() -> None:
    base = Settings(debounce_ms=5)
    assert parse_settings(None, base) == (base, [])
    assert parse_settings({}, base) == (base, [])
    assert parse_settings(None) == (DEFAULTS, [])


def test_keys_not_given_keep_their_value_in_the_base() -> None:
    base = Settings(model="/models/mine.gguf", debounce_ms=5, max_tokens_multi_line=64)
    settings, problems = parse_settings({"infill": {"maxTokensSingleLine": 9}}, base)
    assert problems == []
    assert settings == dataclasses.replace(base, max_tokens_single_line=9)


def test_an_empty_model_path_means_the_default_model() -> None:
    settings, problems = parse_settings({"model": ""}, Settings(model="/models/mine.gguf"))
    assert problems == []
    assert settings.model is None


def test_threads_may_be_left_to_the_backend() -> None:
    settings, problems = parse_settings({"threads": None}, Settings(threads=4))
    assert problems == []
    assert settings.threads is None


def test_an_integer_temperature_is_taken_as_a_number() -> None:
    settings, problems = parse_settings({"temperature": 1})
    assert problems == []
    assert settings.temperature == 1.0
    assert isinstance(settings.temperature, float)


def test_each_key_is_its_field_name_in_camel_case() -> None:
    for key, _, field in GOOD:
        first, *rest = field.split("_")
        assert key == first + "".join(word.title() for word in rest)


def test_the_model_settings_default_to_the_engine_model_options() -> None:
    assert DEFAULTS.model_options() == ModelOptions()
    for option in dataclasses.fields(ModelOptions):
        assert getattr(DEFAULTS, option.name) == option.default, option.name


@pytest.mark.parametrize(("key", "value", "field"), GOOD)
def test_only_model_settings_change_the_model_options(key: str, value: object, field: str) -> None:
    settings, _ = parse_settings({key: value})
    options = settings.model_options()
    if field in {f.name for f in dataclasses.fields(ModelOptions)}:
        assert getattr(options, field) == value
        assert options != DEFAULTS.model_options()
    else:
        assert options == DEFAULTS.model_options()


def test_the_api_key_is_never_shown() -> None:
    settings, _ = parse_settings({"apiKey": "sk-secret-4321", "endpoint": "http://h:1/v1"})
    assert settings.api_key == "sk-secret-4321"
    assert "sk-secret-4321" not in repr(settings)
    assert "sk-secret-4321" not in repr(settings.model_options())
