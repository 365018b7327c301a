"""Fill-in-the-middle prompts: each model family's template and repository format,
and a model's prompt format (`PromptFormat`: what building a completion prompt needs).

FIM templates are data: one entry per model family, chosen from the special tokens the
tokenizer actually has (never from the model's name); configuration may name a family.

Models without FIM tokens (both default models) get the documented fallback: the prompt is
the prefix window alone, and the LSP layer fits the continuation to the suffix afterwards.
On HumanEval single-line, a base model continuing the prefix beats a chat "fill the hole"
prompt by far (37 against 2 of the first 100 tasks with the default models).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.errors import ModelLoadError

if TYPE_CHECKING:
    from engine.backend import Tokenizer


class FimOrder(enum.StrEnum):
    """PSM: prefix, suffix, then the middle is generated. SPM: suffix first, which keeps the
    part of the prompt that does not change while typing (the suffix) in front."""

    PSM = "psm"
    SPM = "spm"


class _Slot(enum.Enum):
    PREFIX = "prefix"
    SUFFIX = "suffix"


_P, _S = _Slot.PREFIX, _Slot.SUFFIX

#: One part of a template: the text of a special token, or a slot for the code.
_Part = str | _Slot


@dataclass(frozen=True, slots=True, kw_only=True)
class FimTemplate:
    """A family's fill-in-the-middle format.

    `required` are the special tokens the tokenizer must have for this family to be chosen;
    `stop_tokens` end a fill (those the tokenizer has are used); `repo_tokens` are the
    family's repository-level markers, for multi-file context.
    """

    family: str
    required: tuple[str, ...]
    psm: tuple[_Part, ...]
    spm: tuple[_Part, ...] | None
    stop_tokens: tuple[str, ...]
    repo_tokens: tuple[str, ...] = ()
    default_order: FimOrder = FimOrder.PSM

    def parts(self, order: FimOrder | None = None) -> tuple[_Part, ...]:
        order = order or self.default_order
        if order is FimOrder.SPM and self.spm is not None:
            return self.spm
        return self.psm


def _fim(pre: str, suf: str, mid: str) -> tuple[tuple[_Part, ...], tuple[_Part, ...]]:
    """The common shape: PSM `pre P suf S mid`, SPM `pre suf S mid P` (as in the FIM paper)."""
    return (pre, _P, suf, _S, mid), (pre, suf, _S, mid, _P)


_STAR_PSM, _STAR_SPM = _fim("<fim_prefix>", "<fim_suffix>", "<fim_middle>")
_SANTA_PSM, _SANTA_SPM = _fim("<fim-prefix>", "<fim-suffix>", "<fim-middle>")
_QWEN_PSM, _QWEN_SPM = _fim("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
_CODELLAMA_PSM, _CODELLAMA_SPM = _fim("▁<PRE>", "▁<SUF>", "▁<MID>")
_DEEPSEEK_PSM, _DEEPSEEK_SPM = _fim("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>")

#: Most specific first: Qwen2.5-Coder and CodeGemma share their FIM tokens and differ in the
#: file separator; the generic `<|fim_prefix|>` entry catches the rest of that shape.
FIM_TEMPLATES: tuple[FimTemplate, ...] = (
    FimTemplate(
        family="qwen",
        required=("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>"),
        psm=_QWEN_PSM,
        spm=_QWEN_SPM,
        stop_tokens=("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|im_end|>"),
        repo_tokens=("<|repo_name|>", "<|file_sep|>"),
    ),
    FimTemplate(
        family="codegemma",
        required=("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_separator|>"),
        psm=_QWEN_PSM,
        spm=_QWEN_SPM,
        stop_tokens=("<|file_separator|>", "<eos>", "<end_of_turn>"),
        repo_tokens=("<|file_separator|>",),
    ),
    FimTemplate(
        family="fim-pipes",
        required=("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
        psm=_QWEN_PSM,
        spm=_QWEN_SPM,
        stop_tokens=("<|endoftext|>", "<|file_sep|>", "<|fim_pad|>", "<|eot_id|>"),
    ),
    FimTemplate(
        family="starcoder",
        required=("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
        psm=_STAR_PSM,
        spm=_STAR_SPM,
        stop_tokens=("<|endoftext|>", "<file_sep>", "<fim_pad>", "<fim_prefix>"),
        repo_tokens=("<repo_name>", "<file_sep>", "<reponame>", "<filename>"),
    ),
    FimTemplate(
        family="santacoder",
        required=("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),
        psm=_SANTA_PSM,
        spm=_SANTA_SPM,
        stop_tokens=("<|endoftext|>", "<fim-pad>"),
    ),
    FimTemplate(
        family="codellama",
        # CodeLlama's tokenizer spells its FIM tokens with a leading "▁" (a space).
        required=("▁<PRE>", "▁<SUF>", "▁<MID>"),
        psm=_CODELLAMA_PSM,
        spm=_CODELLAMA_SPM,
        stop_tokens=("▁<EOT>", "</s>"),
    ),
    FimTemplate(
        family="deepseek",
        required=("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
        psm=_DEEPSEEK_PSM,
        spm=None,
        stop_tokens=("<|EOT|>", "<｜end▁of▁sentence｜>"),
    ),
    FimTemplate(
        family="codestral",
        required=("[PREFIX]", "[SUFFIX]"),
        # Codestral is trained suffix-first and has no middle token.
        psm=("[SUFFIX]", _S, "[PREFIX]", _P),
        spm=None,
        stop_tokens=("</s>",),
        default_order=FimOrder.SPM,
    ),
)

FIM_FAMILIES: dict[str, FimTemplate] = {t.family: t for t in FIM_TEMPLATES}


def detect_fim_template(special_token_id: Callable[[str], int | None]) -> FimTemplate | None:
    """The first family whose required special tokens the tokenizer has, or None."""
    for template in FIM_TEMPLATES:
        if all(special_token_id(token) is not None for token in template.required):
            return template
    return None


def fim_stop_token_ids(
    template: FimTemplate, special_token_id: Callable[[str], int | None]
) -> tuple[int, ...]:
    """Ids of the family's fill-ending tokens that this tokenizer has."""
    ids = (special_token_id(token) for token in template.stop_tokens)
    return tuple(dict.fromkeys(i for i in ids if i is not None))


@dataclass(frozen=True, slots=True, kw_only=True)
class RepoFile:
    """Code from another file, put in front of the FIM prompt in the family's own
    repository format (`repo_section`): a snippet of it (whole lines), labelled with its path."""

    path: str
    text: str


#: One piece of a prompt: (is a special token, text).
Piece = tuple[bool, str]


def repo_section(
    template: FimTemplate | None,
    files: Sequence[RepoFile],
    *,
    path: str,
    repo: str | None,
    has_token: Callable[[str], bool],
) -> tuple[list[Piece], str] | None:
    """The family's repository-level context for `files` and the current file at `path`: the
    pieces that go before the FIM prompt, and a head for the prefix slot (StarCoder2 names the
    current file just after `<fim_prefix>`). None when the family has no file markers, or the
    tokenizer lacks the ones its format needs: the caller then writes the files as plain
    text (a path comment and the code). The formats are the ones each family was trained on:

    - Qwen2.5-Coder: `<|repo_name|>repo\n`, then `<|file_sep|>path\ncode` per file, then
      `<|file_sep|>path\n` for the current file before `<|fim_prefix|>`;
    - StarCoder2: `<repo_name>repo`, `<file_sep>path\ncode` per file, then `<file_sep>` and
      `<fim_prefix>path\n` before the current file's prefix;
    - StarCoder (1): `<reponame>repo`, `<filename>path\ncode` per file and for the current one;
    - CodeGemma: `path\ncode<|file_separator|>` per file (the separator ends a file), then
      the current file's `path\n`.
    """
    if template is None or not template.repo_tokens:
        return None
    tokens = set(template.repo_tokens)

    def code(text: str) -> str:
        return text if text.endswith("\n") else text + "\n"

    pieces: list[Piece] = []
    head = ""
    if "<|file_sep|>" in tokens and has_token("<|file_sep|>"):
        if repo and has_token("<|repo_name|>"):
            pieces += [(True, "<|repo_name|>"), (False, repo + "\n")]
        for file in files:
            pieces += [(True, "<|file_sep|>"), (False, f"{file.path}\n{code(file.text)}")]
        pieces += [(True, "<|file_sep|>"), (False, path + "\n")]
    elif "<file_sep>" in tokens and has_token("<file_sep>"):
        if repo and has_token("<repo_name>"):
            pieces += [(True, "<repo_name>"), (False, repo)]
        for file in files:
            pieces += [(True, "<file_sep>"), (False, f"{file.path}\n{code(file.text)}")]
        pieces.append((True, "<file_sep>"))
        head = path + "\n"
    elif "<filename>" in tokens and has_token("<filename>"):
        if repo and has_token("<reponame>"):
            pieces += [(True, "<reponame>"), (False, repo)]
        for file in files:
            pieces += [(True, "<filename>"), (False, f"{file.path}\n{code(file.text)}")]
        pieces += [(True, "<filename>"), (False, path + "\n")]
    elif "<|file_separator|>" in tokens and has_token("<|file_separator|>"):
        for file in files:
            pieces += [(False, f"{file.path}\n{code(file.text)}"), (True, "<|file_separator|>")]
        pieces.append((False, path + "\n"))
    else:
        return None
    return pieces, head


@dataclass(frozen=True, slots=True, kw_only=True)
class FimPrompt:
    """A prompt as token ids (user text is never parsed for special tokens), with the extra
    stop ids of its family, and its text for logs and debugging. A prompt for a server that
    tokenizes it itself (`render_fim_text`) has no ids: its text is the prompt."""

    token_ids: tuple[int, ...] | None
    text: str
    family: str | None
    stop_token_ids: tuple[int, ...]


def fim_pieces(
    template: FimTemplate,
    prefix: str,
    suffix: str,
    *,
    order: FimOrder | None = None,
    files: Sequence[RepoFile] = (),
    path: str = "",
    repo: str | None = None,
    has_token: Callable[[str], bool],
) -> list[Piece]:
    """The family's prompt for filling between `prefix` and `suffix`, as pieces: special
    tokens and code, in the template's order (empty code slots left out). `files`: other
    files' code first, in the family's repository format (`repo_section`), the current file
    labelled `path`; only for a family that has one."""
    pieces: list[Piece] = []
    if files:
        section = repo_section(template, files, path=path, repo=repo, has_token=has_token)
        if section is None:
            raise ValueError(f"FIM family {template.family} has no repository format")
        pieces, head = section
        if template.parts(order)[1] is _Slot.PREFIX:  # PSM: the head starts the prefix slot
            prefix = head + prefix
    for part in template.parts(order):
        if part is _Slot.PREFIX or part is _Slot.SUFFIX:
            code = prefix if part is _Slot.PREFIX else suffix
            if code:
                pieces.append((False, code))
        else:
            assert isinstance(part, str)
            pieces.append((True, part))
    return pieces


def build_fim_prompt(
    backend: Tokenizer,
    prefix: str,
    suffix: str,
    *,
    template: FimTemplate | None,
    order: FimOrder | None = None,
    files: Sequence[RepoFile] = (),
    path: str = "",
    repo: str | None = None,
) -> FimPrompt:
    """The prompt for filling the text between `prefix` and `suffix`, as `backend`'s ids.

    With a template: the family's special tokens by id and the code tokenized as plain text.
    Without one (no FIM tokens): the prefix alone, continued by the model (the documented
    fallback; the suffix is used afterwards, in post-processing).

    `files`: as in `fim_pieces`. The caller writes plain-text context into the prefix itself
    for a family without a repository format.
    """
    if template is None:
        ids, text = encode_pieces(backend, [(False, prefix)], special=_no_special)
        return FimPrompt(token_ids=tuple(ids), text=text, family=None, stop_token_ids=())

    def special(token: str) -> int:
        token_id = backend.special_token_id(token)
        if token_id is None:
            raise ValueError(
                f"the tokenizer has no {token!r} token for FIM family {template.family}"
            )
        return token_id

    pieces = fim_pieces(
        template,
        prefix,
        suffix,
        order=order,
        files=files,
        path=path,
        repo=repo,
        has_token=lambda t: backend.special_token_id(t) is not None,
    )
    ids, text = encode_pieces(backend, pieces, special=special)
    return FimPrompt(
        token_ids=tuple(ids),
        text=text,
        family=template.family,
        stop_token_ids=fim_stop_token_ids(template, backend.special_token_id),
    )


def encode_pieces(
    backend: Tokenizer, pieces: Sequence[Piece], *, special: Callable[[str], int]
) -> tuple[list[int], str]:
    """A prompt's pieces as `backend`'s ids, and as text (for logs): the model's BOS where it
    wants one, then each special token by its id (`special`) and each text piece as plain text,
    never parsed for special tokens (code that spells a marker stays code)."""
    ids: list[int] = []
    text: list[str] = []
    if backend.vocab.adds_bos and backend.vocab.bos_token is not None:
        bos = backend.special_token_id(backend.vocab.bos_token)
        if bos is not None:
            ids.append(bos)
            text.append(backend.vocab.bos_token)
    for is_special, piece in pieces:
        if is_special:
            ids.append(special(piece))
        else:
            ids.extend(backend.tokenize(piece, add_bos=False, special=False))
        text.append(piece)
    return ids, "".join(text)


def _no_special(token: str) -> int:
    raise AssertionError(f"no special token is asked for here, yet {token!r} was")


def render_fim_text(
    prefix: str,
    suffix: str,
    *,
    template: FimTemplate | None,
    order: FimOrder | None = None,
    files: Sequence[RepoFile] = (),
    path: str = "",
    repo: str | None = None,
) -> FimPrompt:
    """The prompt as text, for a remote server that tokenizes it with its model's tokenizer:
    the family's special tokens written out, and no BOS (the server adds its model's own).
    Unlike `build_fim_prompt`, the server parses the whole text for special tokens, code
    included: code that spells a FIM token out confuses the model there. `files`: as in
    `fim_pieces` (the server's tokenizer is assumed to have the family's markers)."""
    if template is None:
        return FimPrompt(token_ids=None, text=prefix, family=None, stop_token_ids=())
    pieces = fim_pieces(
        template,
        prefix,
        suffix,
        order=order,
        files=files,
        path=path,
        repo=repo,
        has_token=_any_token,
    )
    text = "".join(piece for _, piece in pieces)
    return FimPrompt(token_ids=None, text=text, family=template.family, stop_token_ids=())


def _any_token(token: str) -> bool:
    """A remote server's tokenizer is taken to have its family's markers."""
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptFormat:
    """What building a completion prompt needs to know of a model: its FIM family, how to
    count tokens for the context budget, and how to render a prompt. A local model's prompt
    is its tokenizer's ids (`backend`), as is that of our own engine server on this machine
    whose model file's tokenizer is loaded here; any other remote server gets text and
    tokenizes it itself (`backend` None), and its tokens are estimated. Each engine makes its
    own (`BaseEngine.prompt_format`)."""

    fim: FimTemplate | None
    count_tokens: Callable[[str], int]
    #: The model's tokenizer where it is here; None for a server that tokenizes text itself.
    backend: Tokenizer | None = None

    @classmethod
    def local(cls, backend: Tokenizer, family: str | None) -> PromptFormat:
        """`backend`'s format: the configured FIM `family` ("none" for none), else the one
        its tokenizer's special tokens name. ModelLoadError for a family it lacks tokens of."""
        return cls(
            fim=_local_fim(backend, family),
            count_tokens=_token_counter(backend),
            backend=backend,
        )

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The family's fill-ending ids that the tokenizer has (a remote server knows its own)."""
        if self.fim is None or self.backend is None:
            return ()
        return fim_stop_token_ids(self.fim, self.backend.special_token_id)

    @property
    def repo_files(self) -> bool:
        """Whether the model takes other files' code in its family's repository format
        (`repo_section`); without it, other-file context is written as plain text."""
        backend = self.backend
        if backend is None:
            has_token = _any_token
        else:

            def has_token(token: str) -> bool:
                return backend.special_token_id(token) is not None

        return repo_section(self.fim, (), path="", repo=None, has_token=has_token) is not None

    def render(
        self,
        prefix: str,
        suffix: str,
        *,
        files: Sequence[RepoFile] = (),
        path: str = "",
        repo: str | None = None,
    ) -> FimPrompt:
        """The prompt for filling between `prefix` and `suffix` (`files` only where
        `repo_files`): ids for a local model, text for a remote server."""
        if self.backend is None:
            return render_fim_text(
                prefix, suffix, template=self.fim, files=files, path=path, repo=repo
            )
        return build_fim_prompt(
            self.backend, prefix, suffix, template=self.fim, files=files, path=path, repo=repo
        )


def _local_fim(backend: Tokenizer, family: str | None) -> FimTemplate | None:
    if family is None:
        return detect_fim_template(backend.special_token_id)
    if family == "none":
        return None
    template = FIM_FAMILIES[family]
    missing = [t for t in template.required if backend.special_token_id(t) is None]
    if missing:
        raise ModelLoadError(
            f"the model {backend.model_path} has no {', '.join(missing)} token: it cannot use "
            f"the FIM family {family} (leave fimFamily unset to detect the model's own)"
        )
    return template


def _token_counter(backend: Tokenizer) -> Callable[[str], int]:
    # Lines repeat from one keystroke to the next: count each once.
    @functools.lru_cache(maxsize=16384)
    def count(text: str) -> int:
        return len(backend.tokenize(text, add_bos=False, special=False))

    return count
