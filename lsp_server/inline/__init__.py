"""Inline completion: from a document snapshot to fitted suggestions.

One module per concern, in the order a request meets them:
- `completer.py`: `InlineCompleter`, what the server holds: the latest request per document
  wins, the type-ahead cache, answers written ahead, other documents' snippets;
- `prompt.py`: the context window in the model's FIM format;
- `plan.py`: the mode, the prompt and the requests, before the model is asked;
- `answer.py`: the model's raw answer to one request (ranked lines, or generated choices);
- `suggest.py`: one snapshot's suggestions, fitted to the code around the cursor;
- `confidence.py`: the confidence gate, which holds back automatic suggestions the model was
  unsure of;
- `speculator.py`, `type_ahead.py`, `latest.py`: answers written ahead, typing along a
  suggestion, and one live request per document;
- `result.py`: what a request answers.
"""
