"""Next edit suggestions (issue 24): the user's next change, from the edits they just made.

- `history.py`: `EditHistory`, each document's recent edits read from `didChange`, coalesced
  into `EditGroup`s (what a user would call one edit), bounded, with unified diffs.
- `propagate.py`: next edits without a model: the last group's token substitution proposed
  at the other places that still hold the old tokens (`ProposedEdit`s).

Plain modules, standard library only: the server's handlers feed them and wrap their answers.
"""
