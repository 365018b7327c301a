"""The registry of suites: one module each under bench/, its one-line summary, and the metric
the docs' summary table shows for it (its headline). Listing them imports none of the
modules, which load models and libraries."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Suite:
    name: str
    summary: str
    #: The metric of this suite a user cares about first, or None.
    headline: str | None = None
    #: Whether a run takes minutes to hours (`make bench` leaves these out).
    long: bool = False

    @property
    def module(self) -> str:
        return f"bench.{self.name}"


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            name="stops",
            summary="the stop processor's cost per token against one decode step",
            headline="stops per token, 50 strings, share of a decode step",
        ),
        Suite(
            name="engine",
            summary="our engine against raw llama-cpp-python: first token and time per token",
            headline="time per token, ours / raw",
        ),
        Suite(
            name="latency",
            summary="the language server against the raw engine: warm, cold, typing, documents",
            headline="warm request, server / raw engine, median position",
        ),
        Suite(
            name="menu",
            summary="the completion menu against inline completion on the same typing",
            headline="first suggestion, menu / inline, median of lines with both",
        ),
        Suite(
            name="humaneval",
            summary="HumanEval single-line infilling: the raw engine against the real server",
            headline="passed, ours through the server",
            long=True,
        ),
        Suite(
            name="confidence",
            summary="the confidence gate: suggestions shown against suggestions right",
            long=True,
        ),
        Suite(
            name="languages",
            summary="real code in six languages: the server against the raw model",
            long=True,
        ),
        Suite(
            name="soak",
            summary="thousands of random editor operations, then the server's memory and health",
            headline="resident memory, after / once warm",
            long=True,
        ),
        Suite(
            name="load",
            summary="the engine server's /health and a small completion, idle and under load",
        ),
        Suite(
            name="shared",
            summary="windows on one shared engine against each holding its models",
            headline="warm single line, shared / here, median",
        ),
        Suite(
            name="editors",
            summary="1, 2 and 4 language servers typing at once on one model server",
        ),
        Suite(
            name="rows",
            summary="requests under way at once in the worker: written together or in turns",
        ),
        Suite(
            name="drafts",
            summary="greedy answers with and without drafts from the document",
        ),
        Suite(
            name="next_edit",
            summary="next edits replayed on real releases' changes, scored against what followed",
            headline="same-substitution hunks reproduced, propagation",
        ),
        Suite(
            name="next_edit_commits",
            summary="next edits on real commits in six languages, through the real server",
            headline="same-change cases hit",
        ),
        Suite(
            name="template_limits",
            summary="hostile chat templates against the sandbox's limits",
        ),
        Suite(
            name="gpu",
            summary="the transformers backend on one GPU against the memory-bandwidth limit",
            long=True,
        ),
    )
}
