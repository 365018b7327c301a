"""Next edit suggestions: the user's next change near the cursor, from the edits they just made.

- `editor.py`: `NextEditor`, what the server holds: the history, the suggestions, the offers;
- `history.py`: each document's edit groups, read from `didChange` (coalesced, bounded);
- `propagate.py`: the last change made again where the old tokens still stand (no model);
- `offers.py`: the edits offered by id, and their outcomes counted per source;
- `requests.py`: the protocol's shapes (GitHub Copilot language server's).
"""
