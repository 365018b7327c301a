"""How long each client of a shared engine has held its model lately: what the worker
(engine/worker.py) orders jobs of one priority by, so that the editor windows sharing one
engine server take turns.

A client is named by its requests (`GenerationRequest.client`, the engine server's
`X-Infill-Client` header). The seconds a client's jobs held the model fade exponentially,
halving every `HALF_LIFE_SECONDS`:

- A window that typed a lot a minute ago is not behind forever: its debt is 1/64 of what it
  was, and a window that asks now goes first only while its own use is lower.
- Fading multiplies every client's seconds by the same factor, so it never reorders clients
  that were both idle meanwhile; a sliding window drops a turn at once when it leaves the
  window, and two clients' order could flip with nobody having used the model.
- One number and one time per client, updated on each charge: no history of turns to keep or
  to walk on the model's thread between two tokens.

Only the worker's thread reads and writes it (as the rest of the worker's queues).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The half-life of a client's held seconds. Long against one job (an inline completion of
#: the default model holds it 0.1 to 1 s on 2 CPU cores), so that a window typing steadily
#: for a few seconds is behind one that just started; short against a pause in typing (the
#: user reading what came), so that after half a minute two windows are even again (1/8). A
#: window that never pauses levels off at half-life / ln 2 (14 s) of held seconds, so a
#: minute after it stops it is within one turn (engine/worker.py `TURN_SECONDS`) of a new one.
HALF_LIFE_SECONDS = 10.0
#: Held seconds that have faded below this are forgotten (the client counts as new): the
#: accounts stay as many as the clients that used the model in the last minutes.
FORGOTTEN_SECONDS = 0.001


@dataclass(slots=True)
class _Account:
    seconds: float  # held seconds, faded to `at`
    at: float  # when (the worker's clock)


class HeldSeconds:
    """Each named client's held seconds, fading with `half_life` (seconds)."""

    def __init__(self, half_life: float = HALF_LIFE_SECONDS) -> None:
        if half_life <= 0:
            raise ValueError(f"the half-life must be positive, got {half_life}")
        self._half_life = half_life
        self._accounts: dict[str, _Account] = {}

    def at(self, client: str, now: float) -> float:
        """`client`'s held seconds, faded to `now` (0 for a client not seen lately)."""
        account = self._accounts.get(client)
        if account is None:
            return 0.0
        faded: float = 0.5 ** (max(0.0, now - account.at) / self._half_life)
        return account.seconds * faded

    def charge(self, client: str, seconds: float, now: float) -> None:
        """`client` held the model `seconds` more, up to `now`; accounts faded away are
        forgotten."""
        self._accounts[client] = _Account(seconds=self.at(client, now) + seconds, at=now)
        for name in [n for n in self._accounts if self.at(n, now) < FORGOTTEN_SECONDS]:
            del self._accounts[name]

    def __len__(self) -> int:
        """How many clients are remembered."""
        return len(self._accounts)
