"""Code actions' logic: what code an action is about, the chat messages that ask about it,
and turning the model's markdown answer back into code that fits the selection.

No model and no protocol here; `action_handlers` adapts these to LSP.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Sequence

from engine.markdown import fenced_code
from engine.text import TAB_WIDTH, indent_width, split_lines, strip_ending
from engine.types import ChatMessage

#: Editors' language ids to the names people write on markdown fences.
FENCE_NAMES: dict[str, tuple[str, ...]] = {
    "python": ("python", "py", "python3"),
    "javascript": ("javascript", "js", "jsx"),
    "typescript": ("typescript", "ts", "tsx"),
    "typescriptreact": ("tsx", "typescript"),
    "javascriptreact": ("jsx", "javascript"),
    "rust": ("rust", "rs"),
    "go": ("go", "golang"),
    "c": ("c", "h"),
    "cpp": ("cpp", "c++", "cc", "cxx", "hpp"),
    "csharp": ("csharp", "cs", "c#"),
    "java": ("java",),
    "lua": ("lua",),
    "ruby": ("ruby", "rb"),
    "shellscript": ("bash", "sh", "shell", "zsh"),
}

DEFAULT_INSTRUCTION = "Make it clearer and more idiomatic without changing what it does."
#: Offered by `infill.rewrite` when no instruction came with it (the first is the default).
PRESET_INSTRUCTIONS = (
    DEFAULT_INSTRUCTION,
    "Add type hints.",
    "Add a docstring and comments.",
    "Make it iterative instead of recursive.",
    "Make it faster.",
)

# --- chat messages --------------------------------------------------------------------------

SYSTEM = (
    "You are an expert programmer inside a code editor. Be correct and brief. When you give "
    "code, give it in one fenced markdown block."
)


def _fence_name(language_id: str) -> str:
    return FENCE_NAMES.get(language_id, (language_id,))[0] if language_id else ""


def explain_messages(code: str, *, language_id: str, file_name: str) -> tuple[ChatMessage, ...]:
    lang = _fence_name(language_id)
    return (
        ChatMessage("system", SYSTEM),
        ChatMessage(
            "user",
            f"Explain what this {language_id or 'code'} code from {file_name} does, step by "
            f"step, in a few sentences.\n\n```{lang}\n{code}\n```",
        ),
    )


def rewrite_messages(
    code: str, *, language_id: str, file_name: str, instruction: str
) -> tuple[ChatMessage, ...]:
    lang = _fence_name(language_id)
    return (
        ChatMessage("system", SYSTEM),
        ChatMessage(
            "user",
            f"Rewrite this {language_id or 'code'} code from {file_name}. Instruction: "
            f"{instruction.strip()}\n\n```{lang}\n{code}\n```\n\nReply with the complete "
            f"rewritten code in one ```{lang} block, and nothing else.",
        ),
    )


def fix_instruction(diagnostics: Sequence[str]) -> str:
    """The instruction of a "Fix" rewrite: the problems the editor reported."""
    listed = "\n".join(f"- {d}" for d in diagnostics)
    return f"Fix these problems and change nothing else:\n{listed}"


# --- the answer back into code --------------------------------------------------------------


def extract_code(answer: str, language_id: str = "") -> str:
    """The code in a markdown answer (chat models wrap code in fences and prose): the first
    fenced block tagged with the document's language, else the first fenced block
    (`engine.markdown.fenced_code` reads the fences), else the whole answer without its
    blank lines around."""
    names = FENCE_NAMES.get(language_id, (language_id,)) if language_id else ()
    code = fenced_code(answer, names)
    return answer.strip("\n") if code is None else code


class UnusableAnswer(ValueError):
    """The model's answer holds no code that can replace the selection (the message says why)."""


def code_from_answer(
    answer: str,
    *,
    selected: str,
    language_id: str,
    indent: str,
    first_line_indented: bool,
    newline: str,
    use_tabs: bool,
) -> str:
    """The text that replaces the `selected` code after a Rewrite: the model's `answer` made
    into code that fits the selection. Raises UnusableAnswer when there is none.

    1. Extract the code from the markdown answer (`extract_code`).
    2. Validate it: not blank, and for Python, it parses (dedented: a method body is fine).
    3. Re-indent it to the selection (`reindent`); a selection that held its last line's end
       keeps one.
    """
    code = extract_code(answer, language_id)
    if not code.strip():
        raise UnusableAnswer("the model's answer held no code")
    if language_id == "python":
        try:
            ast.parse(textwrap.dedent(code))
        except SyntaxError as e:
            raise UnusableAnswer(
                f"the model's rewrite is not valid Python ({e.msg}, line {e.lineno})"
            ) from None
    text = reindent(
        code, indent, first_line_indented=first_line_indented, newline=newline, use_tabs=use_tabs
    )
    if selected.endswith(("\n", "\r")):
        text += newline
    return text


def reindent(
    code: str,
    indent: str,
    *,
    first_line_indented: bool,
    newline: str = "\n",
    use_tabs: bool | None = None,
) -> str:
    """`code` moved to `indent`: its common indentation removed and `indent` put before
    every non-blank line, keeping the lines' indentation relative to each other (measured
    with tabs at 4 columns, written with tabs if `use_tabs`, by default if `indent` has one).

    `first_line_indented` is False when the selection starts after indentation that stays in
    the document (the first line then gets none). Blank lines come out empty, blank lines
    around the code are dropped, and lines end with the document's `newline`.
    """
    tabs = "\t" in indent if use_tabs is None else use_tabs
    lines = [strip_ending(line) for line in split_lines(code)]
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""
    common = min(indent_width(line) for line in lines if line.strip())
    out = []
    for number, line in enumerate(lines):
        if not line.strip():
            out.append("")
            continue
        relative = indent_width(line) - common
        lead = (
            "\t" * (relative // TAB_WIDTH) + " " * (relative % TAB_WIDTH)
            if tabs
            else " " * relative
        )
        prefix = indent if number > 0 or first_line_indented else ""
        out.append(prefix + lead + line.lstrip(" \t"))
    return newline.join(out)


def document_uses_tabs(text: str) -> bool:
    """Whether the document indents with tabs (more lines start with a tab than a space)."""
    tabs = spaces = 0
    for line in split_lines(text):
        if line.startswith("\t"):
            tabs += 1
        elif line.startswith(" "):
            spaces += 1
    return tabs > spaces
