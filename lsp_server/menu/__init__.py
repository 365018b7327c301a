"""The completion menu: inline suggestions as `textDocument/completion` items, for the clients
that show AI text only there. `items.py`: which clients, and each item as they take it;
`completer.py`: a request answered within a bounded wait, the generation going on for the
next."""
