"""What the code after the cursor can do for a model without FIM tokens (issue 12, part 2):
HumanEval single-line infilling, the prefix-only baseline against the candidates, side by side
in one run, on the raw model in this process.

Run from the repository root:

    .venv/bin/python bench/suffix.py [--limit 100] [--candidates 5] [--suffix-tokens 32]

Tasks: the same selection as bench/humaneval.py (task `i * 1033 // limit`), greedy decoding of
the default completion model (llama.cpp, loaded with our backend's options and every position's
logits kept). Variants, each one line inserted at the hole and the program scored by its tests:

- prefix: the baseline, the greedy line after the prefix (what the server does today);
- rerank-joint: `--candidates` lines, one per most likely first token (each continued
  greedily to the end of its line); the one whose line and the next `--suffix-tokens` tokens
  of the real suffix are most likely as a whole (summed log-probabilities) wins;
- rerank-suffix: the same candidates; the one after which the suffix is most likely wins (the
  line's own probability left out);
- context: the greedy line after a prompt that shows the suffix first, as a comment block
  before the prefix (the suffix given as context);
- pool-joint, pool-suffix: the candidates of both prompts (scored after the plain prefix),
  without lines that hold no code, ranked as above;
- oracle: any candidate of both prompts passes (the bound of a reranker over them).

Also the cost of each variant in model work: tokens generated and tokens scored per task.
Prints a table; writes bench/results/suffix.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/suffix.py` puts bench/ first on sys.path, where bench/engine.py would shadow the
# `engine` package; the repository root goes in front of it (bench/ stays, for its helpers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from _common import humaneval_rows, write_json
from humaneval import full_program, score_all

from engine.backends.llama_cpp import llama_params
from engine.models import ModelOptions, ModelSpec, model_spec
from engine.types import Role

log = logging.getLogger("bench.suffix")
RESULTS = Path(__file__).resolve().parent / "results"
MAX_LINE_TOKENS = 48  # the server's single-line limit (maxTokensSingleLine)


@dataclass(frozen=True, slots=True)
class Candidate:
    line: str  # without its "\n"
    tokens: int  # generated for it
    logprob_line: float  # of its tokens and the "\n"
    logprob_suffix: float  # of the suffix window after it
    suffix_logprobs: tuple[float, ...] = ()  # each token's, for analysis


class Scorer:
    """The model with every position's logits kept: greedy lines and log-probabilities, each
    request reusing the KV cache of the longest token prefix it shares with the last one."""

    def __init__(self, spec: ModelSpec) -> None:
        import llama_cpp

        self.llm: Any = llama_cpp.Llama(**{**llama_params(spec), "logits_all": True})
        self.eog = {
            t
            for t in range(self.llm.n_vocab())
            if llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, t)
        }
        self.evaluated = 0

    def tokenize(self, text: str, *, bos: bool) -> list[int]:
        return list(self.llm.tokenize(text.encode(), add_bos=bos, special=False))

    def text(self, ids: list[int]) -> str:
        return bytes(self.llm.detokenize(ids)).decode("utf-8", "replace")

    def eval_to(self, ids: list[int]) -> None:
        """The cache holds `ids` afterwards; `logits(i)` is valid for i < len(ids)."""
        llm = self.llm
        live = llm.input_ids[: llm.n_tokens].tolist()
        shared = 0
        for a, b in zip(live, ids, strict=False):
            if a != b:
                break
            shared += 1
        shared = min(shared, len(ids) - 1)  # at least one evaluated: its logits are fresh
        if llm.n_tokens > shared:
            llm._ctx.kv_cache_seq_rm(0, shared, -1)
            llm.n_tokens = shared
        llm.eval(ids[shared:])
        self.evaluated += len(ids) - shared

    def log_probs(self, position: int) -> npt.NDArray[np.float64]:
        """Log-probabilities of the token after position `position`."""
        logits = np.asarray(self.llm.scores[position], dtype=np.float64)
        top = logits.max()
        return logits - top - np.log(np.exp(logits - top).sum())

    def line_after(self, prompt: list[int], first: int) -> tuple[list[int], str]:
        """The greedy line after `prompt` that starts with token `first`: its tokens up to the
        one that ends the line (or an end-of-generation token, or the limit)."""
        ids = [*prompt, first]
        while True:
            text = self.text(ids[len(prompt) :])
            if "\n" in text or len(ids) - len(prompt) >= MAX_LINE_TOKENS:
                return ids[len(prompt) :], text.split("\n", 1)[0]
            self.eval_to(ids)
            following = int(np.argmax(self.llm.scores[len(ids) - 1]))
            if following in self.eog:
                return ids[len(prompt) :], text
            ids.append(following)

    def sum_log_prob(self, context: list[int], continuation: list[int]) -> float:
        return float(sum(self.token_log_probs(context, continuation)))

    def token_log_probs(self, context: list[int], continuation: list[int]) -> list[float]:
        self.eval_to([*context, *continuation])
        return [float(self.log_probs(len(context) + i - 1)[t]) for i, t in enumerate(continuation)]


def candidates(
    scorer: Scorer, prefix: str, suffix: str, count: int, suffix_tokens: int, *, shown: str
) -> list[Candidate]:
    """Lines that differ in their first token of code, written after the prompt `shown`,
    each scored with the suffix window after it, after `prefix`. The branch point is the first
    token after the line's indentation: branching on the first token itself gives mostly other
    indentations, which are no real alternatives."""
    written = scorer.tokenize(shown, bos=True)
    scorer.eval_to(written)
    stem = list(written)
    first = int(np.argmax(scorer.log_probs(len(written) - 1)))
    if not scorer.text([first]).strip(" \t"):  # the greedy line starts with its indentation
        stem.append(first)
        scorer.eval_to(stem)
    branches = np.argsort(scorer.log_probs(len(stem) - 1))[::-1][:count]
    window = scorer.tokenize(suffix, bos=False)[:suffix_tokens]
    prompt = scorer.tokenize(prefix, bos=True)
    out = []
    for branch in branches:
        generated, _ = scorer.line_after(stem, int(branch))
        line = scorer.text([*stem[len(written) :], *generated]).split("\n", 1)[0]
        # Scored as the tokens of the line as text: the prefix ends at a line start, so the
        # prompt's tokens do not change where the line begins.
        line_ids = scorer.tokenize(line + "\n", bos=False)
        whole = scorer.sum_log_prob(prompt, [*line_ids, *window])
        each = scorer.token_log_probs([*prompt, *line_ids], window) if window else []
        after = sum(each)
        out.append(
            Candidate(
                line=line,
                tokens=len(generated) + len(stem) - len(written),
                logprob_line=whole - after,
                logprob_suffix=after,
                suffix_logprobs=tuple(each),
            )
        )
    return out


def context_prompt(prefix: str, suffix: str, lines: int = 12) -> str:
    """The suffix's first lines as a comment block, then the prefix."""
    shown = [line for line in suffix.splitlines()[:lines]]
    block = "".join(f"# {line}\n" for line in shown)
    return f"# The code after the missing line:\n{block}\n{prefix}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = humaneval_rows()
    picked = sorted(
        {(i * len(rows) // args.limit + args.offset) % len(rows) for i in range(args.limit)}
    )
    spec = model_spec(Role.COMPLETION, ModelOptions(), environ={})
    assert isinstance(spec, ModelSpec)
    scorer = Scorer(replace(spec, context_size=4096, threads=args.threads))
    lines: dict[str, dict[str, str]] = {}
    dump: dict[str, list[dict[str, Any]]] = {}
    cost: dict[str, list[int]] = {"generated": [], "evaluated": []}
    started = time.perf_counter()
    for number, index in enumerate(picked):
        row = rows[index]
        before = scorer.evaluated
        plain = candidates(
            scorer,
            row["prompt"],
            row["suffix"],
            args.candidates,
            args.suffix_tokens,
            shown=row["prompt"],
        )
        hinted = candidates(
            scorer,
            row["prompt"],
            row["suffix"],
            args.candidates,
            args.suffix_tokens,
            shown=context_prompt(row["prompt"], row["suffix"]),
        )
        cost["generated"].append(sum(c.tokens for c in plain))
        cost["evaluated"].append(scorer.evaluated - before)
        # A pool of both, without lines that hold no code (blank, or a comment alone).
        pool = [c for c in plain + hinted if c.line.strip() and not c.line.strip().startswith("#")]
        pool = pool or plain
        lines[row["task_id"]] = {
            "prefix": plain[0].line,
            "rerank-joint": max(plain, key=lambda c: c.logprob_line + c.logprob_suffix).line,
            "rerank-suffix": max(plain, key=lambda c: c.logprob_suffix).line,
            "context": hinted[0].line,
            "pool-joint": max(pool, key=lambda c: c.logprob_line + c.logprob_suffix).line,
            "pool-suffix": max(pool, key=lambda c: c.logprob_suffix).line,
            **{f"candidate-{i}": c.line for i, c in enumerate(plain + hinted)},
        }
        dump[row["task_id"]] = [
            {
                "line": c.line,
                "line_lp": c.logprob_line,
                "suffix": c.suffix_logprobs,
                "hint": i >= len(plain),
            }
            for i, c in enumerate(plain + hinted)
        ]
        if (number + 1) % 10 == 0:
            log.info("%d/%d tasks, %.0f s", number + 1, len(picked), time.perf_counter() - started)
    programs = {
        f"{task}\0{line}": full_program(
            next(r for r in rows if r["task_id"] == task)["prompt"]
            + line
            + "\n"
            + next(r for r in rows if r["task_id"] == task)["suffix"],
            next(r for r in rows if r["task_id"] == task),
        )
        for task, variants in lines.items()
        for line in set(variants.values())
    }
    verdicts = score_all(programs, args.timeout, workers=2)

    def passed(task: str, variant: str) -> bool:
        return verdicts[f"{task}\0{lines[task][variant]}"][0]

    variants = ["prefix", "rerank-joint", "rerank-suffix", "context", "pool-joint", "pool-suffix"]
    scores = {v: sum(passed(t, v) for t in lines) for v in variants}
    scores["oracle"] = sum(
        any(passed(t, v) for v in lines[t] if v.startswith("candidate-")) for t in lines
    )
    return {
        "config": {
            "tasks": len(picked),
            "candidates": args.candidates,
            "suffix_tokens": args.suffix_tokens,
            "threads": args.threads,
            "model": spec.path.name,
            "seconds": round(time.perf_counter() - started, 1),
        },
        "passed": scores,
        "per_task_mean": {k: round(float(np.mean(v)), 1) for k, v in cost.items()},
        "lines": lines,
        "dump": dump,
        "verdicts": {k: v[0] for k, v in verdicts.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--candidates", type=int, default=5)
    parser.add_argument("--suffix-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--json", type=Path, default=RESULTS / "suffix.json")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    result = run(args)
    config = result["config"]
    print(
        f"HumanEval single-line, {config['tasks']} tasks, {config['model']}, "
        f"{config['candidates']} candidates, suffix window {config['suffix_tokens']} tokens"
    )
    print(f"{'variant':16} {'passed':>7}")
    for variant, count in result["passed"].items():
        print(f"{variant:16} {count:>4}/{config['tasks']}")
    cost = result["per_task_mean"]
    print(
        f"model work per task (all candidates): {cost['generated']} tokens generated, "
        f"{cost['evaluated']} evaluated; {config['seconds']} s in all"
    )
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
