"""The stop-condition processor: where one choice's text ends, and what is withheld.

One `StopChecker` per choice. It is fed each token id with the text the detokenizer made of
it, and answers with the text that may be shown now and, at the end, why generation stopped.

The rules are those of OpenAI-compatible serving engines (vLLM's stop handling), so that
a request means the same here as on a team's server:

- Token stops are checked first: a visible stop id ends generation and keeps its text; a hidden
  one (the model's end-of-generation ids, and the user's stop ids) ends it and drops its text.
  Only the user's ids are reported as `stop_reason`.
- Stop strings: the earliest match in the text wins. Hidden ones are cut with what follows;
  visible ones (`include_stop_str_in_output`) are kept and what follows is cut.
- While streaming, the longest tail of the text that could still grow into a hidden stop string
  is withheld, and only that. It is released as soon as it can no longer match, or flushed when
  the stream ends without the match completing.
- No stop applies before `min_tokens` tokens; `max_tokens` ends the choice with `LENGTH`.

Per-token work is proportional to the new text: only a window as long as the longest stop
string is kept from earlier tokens; matches are found by one compiled regular expression over
that window, and the withheld tail is the state of an automaton over the hidden stop strings
(Aho-Corasick's trie and failure links), fed each new character once.

A request's stops are compiled once (`StopRules`) and shared by its choices: memory is linear in
the stop strings' total length (a set of every prefix, as before, was quadratic: 5 GB for one
100,000-character stop string).
"""

from __future__ import annotations

import enum
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from engine.types import FinishReason, StopConditions


class StopKind(enum.Enum):
    """What ended a choice. Only user-requested stops report a `stop_reason`."""

    MAX_TOKENS = enum.auto()
    EOS_TOKEN = enum.auto()  # the model's own end-of-generation token: hidden, no stop_reason
    USER_TOKEN = enum.auto()  # a stop id the user asked for: hidden
    VISIBLE_TOKEN = enum.auto()  # a stop id kept in the output
    HIDDEN_STRING = enum.auto()
    VISIBLE_STRING = enum.auto()


@dataclass(frozen=True, slots=True)
class StopTrigger:
    kind: StopKind
    value: str | int | None = None

    @property
    def finish_reason(self) -> FinishReason:
        return FinishReason.LENGTH if self.kind is StopKind.MAX_TOKENS else FinishReason.STOP

    @property
    def stop_reason(self) -> str | int | None:
        """The user's stop that matched (string or token id); None for EOS and max_tokens."""
        if self.kind in (StopKind.MAX_TOKENS, StopKind.EOS_TOKEN):
            return None
        return self.value


@dataclass(frozen=True, slots=True)
class StepResult:
    """`text` may be shown now (it can hold earlier withheld text); `trigger` ends the choice."""

    text: str
    trigger: StopTrigger | None = None


class PrefixAutomaton:
    """The longest suffix of a text that begins one of `strings`, kept up to date a character
    at a time: Aho-Corasick's trie with failure links (no output links: a whole match is the
    regular expression's to find). Built once, read-only after; its state is an int."""

    __slots__ = ("_depth", "_fail", "_goto")

    def __init__(self, strings: Iterable[str]) -> None:
        goto: list[dict[str, int]] = [{}]
        depth = [0]
        for s in strings:
            node = 0
            for ch in s:
                child = goto[node].get(ch)
                if child is None:
                    child = len(goto)
                    goto.append({})
                    depth.append(depth[node] + 1)
                    goto[node][ch] = child
                node = child
        fail = [0] * len(goto)
        queue = deque(goto[0].values())
        while queue:
            node = queue.popleft()
            for ch, child in goto[node].items():
                f = fail[node]
                while f and ch not in goto[f]:
                    f = fail[f]
                fail[child] = goto[f].get(ch, 0)
                queue.append(child)
        self._goto = goto
        self._fail = fail
        self._depth = depth

    def feed(self, state: int, text: str) -> int:
        """The state after `text` (0: the start)."""
        goto, fail = self._goto, self._fail
        for ch in text:
            while state and ch not in goto[state]:
                state = fail[state]
            state = goto[state].get(ch, 0)
        return state

    def depth(self, state: int) -> int:
        """How many of the last characters fed begin one of the strings."""
        return self._depth[state]


@dataclass(frozen=True, slots=True, eq=False)
class StopRules:
    """One request's stop conditions compiled once, shared read-only by its choices."""

    visible_ids: frozenset[int]
    user_ids: frozenset[int]
    hidden_ids: frozenset[int]
    strings: tuple[str, ...]
    #: Stop strings are all hidden or all visible, as the request says.
    visible_strings: bool
    #: The longest stop string's length: how much earlier text a match can reach back into.
    window: int
    pattern: re.Pattern[str] | None
    #: Over the hidden stop strings (None when they are visible or there are none).
    prefixes: PrefixAutomaton | None

    @classmethod
    def of(cls, stops: StopConditions) -> StopRules:
        user_ids = frozenset(stops.stop_token_ids)
        system_ids = frozenset() if stops.ignore_eos else frozenset(stops.stop_token_ids_hidden)
        strings = tuple(dict.fromkeys(stops.stop))
        # Leftmost match first; at the same start the regex takes the first alternative that
        # matches, so shorter strings go first: the one a stream completes first.
        pattern = (
            re.compile("|".join(re.escape(s) for s in sorted(strings, key=len)))
            if strings
            else None
        )
        hidden = strings and not stops.include_stop_str_in_output
        return cls(
            visible_ids=frozenset(stops.stop_token_ids_visible),
            user_ids=user_ids,
            hidden_ids=user_ids | system_ids,
            strings=strings,
            visible_strings=stops.include_stop_str_in_output,
            window=max((len(s) for s in strings), default=0),
            pattern=pattern,
            prefixes=PrefixAutomaton(strings) if hidden else None,
        )


class StopChecker:
    """Stop state of one choice. Not thread-safe: one choice, one thread."""

    def __init__(
        self, stops: StopConditions | StopRules, *, max_tokens: int, min_tokens: int = 0
    ) -> None:
        self._max_tokens = max_tokens
        self._min_tokens = min_tokens
        self._generated = 0
        rules = stops if isinstance(stops, StopRules) else StopRules.of(stops)
        self._rules = rules
        self._window = rules.window
        self._visible_strings = rules.visible_strings

        # `_tail` holds the last `_window` characters seen (at least), and its last `_withheld`
        # characters have not been released yet; `_state` is the prefix automaton's.
        self._tail = ""
        self._withheld = 0
        self._state = 0

    @property
    def withheld(self) -> str:
        """The text currently held back as a possible start of a hidden stop string."""
        return self._tail[len(self._tail) - self._withheld :] if self._withheld else ""

    @property
    def generated_tokens(self) -> int:
        return self._generated

    def flush(self) -> str:
        """Release whatever is withheld: no more tokens are coming, so it can never match."""
        text = self.withheld
        self._withheld = 0
        return text

    def step(self, token_id: int, text: str) -> StepResult:
        """Take one generated token and its text; say what to show and whether to stop."""
        result = self._check(token_id, text)
        if result.trigger is None and self._generated >= self._max_tokens:
            return StepResult(result.text + self.flush(), StopTrigger(StopKind.MAX_TOKENS))
        return result

    def _check(self, token_id: int, text: str) -> StepResult:
        below_min = self._generated < self._min_tokens
        self._generated += 1
        if below_min:
            return StepResult(text)

        rules = self._rules
        if token_id in rules.visible_ids:
            # Withheld text can never complete now; it is older than this token's text.
            return StepResult(self.flush() + text, StopTrigger(StopKind.VISIBLE_TOKEN, token_id))
        if token_id in rules.hidden_ids:
            kind = StopKind.USER_TOKEN if token_id in rules.user_ids else StopKind.EOS_TOKEN
            return StepResult(self.flush(), StopTrigger(kind, token_id))

        if not self._window or not text:
            return StepResult(text)
        return self._check_strings(text)

    def _check_strings(self, text: str) -> StepResult:
        old_len = len(self._tail)
        release_start = old_len - self._withheld
        self._tail += text
        tail = self._tail

        # A match that ended inside the old tail would have been found already.
        match = self._earliest_match(max(0, old_len - self._window + 1))
        if match is not None:
            start, stop = match
            self._withheld = 0
            if self._visible_strings:
                end = start + len(stop)
                shown = tail[release_start:end] if end > release_start else ""
                return StepResult(shown, StopTrigger(StopKind.VISIBLE_STRING, stop))
            # Text before `release_start` was shown already; a hidden stop that began there
            # (possible only across `min_tokens`) cannot be taken back.
            shown = tail[release_start:start] if start > release_start else ""
            return StepResult(shown, StopTrigger(StopKind.HIDDEN_STRING, stop))

        prefixes = self._rules.prefixes
        if prefixes is not None:
            self._state = prefixes.feed(self._state, text)
            # No whole stop string ends here (the match above would have found it), so this is
            # the longest suffix that is a proper prefix of a hidden stop string.
            self._withheld = prefixes.depth(self._state)
        release_end = len(tail) - self._withheld
        shown = tail[release_start:release_end] if release_end > release_start else ""
        # Keep only what a later match or withheld prefix could still need.
        keep = max(self._window, self._withheld)
        if len(tail) > keep:
            self._tail = tail[len(tail) - keep :]
        return StepResult(shown)

    def _earliest_match(self, search_from: int) -> tuple[int, str] | None:
        """The match that starts first; at the same start the shorter one, which a stream
        completes first."""
        assert self._rules.pattern is not None
        match = self._rules.pattern.search(self._tail, search_from)
        return None if match is None else (match.start(), match.group())
