"""Post-processing: fit a model's raw continuation to the code around the cursor.

Ghost text must read as the user's next keystrokes: it never repeats what already follows the
cursor, closes exactly the brackets that still need closing, keeps the block's indentation and
ends where the block ends. The rules are numbered (`decide_mode` 1-6, `fit_completion` 1-8),
each with why it is there. Everything here is pure (the stdlib, and tree-sitter for the
syntax trees), so the language server calls it on a document snapshot and the tests call it
on plain strings.

- `context`: the document around the cursor (`CursorContext`);
- `mode`: single line, multi line or nothing (`decide_mode`);
- `fit`: the fitting steps (`fit_completion`) and where a block ends (`block_ended`);
- `brackets`: what the brackets around the cursor allow, read by the two consumers of
- `lexer`: brackets, strings and comments;
- `syntax`: the tree-sitter tree where the language (`CursorContext.language_id`) has a
  grammar: where a multi-line suggestion ends, whether it adds syntax errors.

Conventions, chosen once for the whole package:

- Text is Python `str`: positions and `Fitted.replace_chars` count code points, never UTF-8 or
  UTF-16 units (the server converts at the protocol boundary). Emoji, CJK and combining marks
  need nothing special, except that a combining mark right after the cursor counts as part of
  a word (the cursor splits a character as the user sees it).
- Lines end at `\\r\\n`, `\\r` or `\\n` only (LSP's rule; `engine.text` splits them).
- Line endings in a suggestion are left as the model wrote them (cuts recognise all three).
  The buffer's line-ending setting is the editor's business when it applies the text (VS
  Code's text model normalises inserted line ends; Neovim's LSP client splits on `\\r?\\n`).
- Indentation is compared by width (`engine.text.indent_width`: tabs advance to the next
  multiple of `TAB_WIDTH`), so a tab and four spaces count as the same depth; mixed
  indentation is compared, never rejected.
"""

from engine.text import TAB_WIDTH
from lsp_server.postprocess.context import CursorContext, line_opens_block
from lsp_server.postprocess.fit import Fitted, block_ended, fit_completion
from lsp_server.postprocess.mode import CompletionMode, decide_mode

__all__ = [
    "TAB_WIDTH",
    "CompletionMode",
    "CursorContext",
    "Fitted",
    "block_ended",
    "decide_mode",
    "fit_completion",
    "line_opens_block",
]
