"""`python -m bench`: list the suites, run one, or render the docs from the records.

    python -m bench --list
    python -m bench SUITE [the suite's own options; SUITE --help lists them]
    python -m bench render

A run prints its tables (stdout; logs on stderr), then writes its record to bench/records/.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence

from bench import record, render
from bench.suites import SUITES


def list_suites() -> str:
    width = max(len(name) for name in SUITES)
    return "\n".join(
        f"{s.name:<{width}}  {s.summary}{' (long)' if s.long else ''}" for s in SUITES.values()
    )


def run(name: str, argv: Sequence[str]) -> record.Record:
    """Run suite `name` with its own arguments and write its record."""
    module = importlib.import_module(SUITES[name].module)
    at = record.commit()  # what was measured: the tree as the run starts
    watch = record.LoadWatch()
    started = time.perf_counter()
    outcome: record.Outcome = module.main(list(argv))
    done = record.record_of(name, outcome, watch.finish(), time.perf_counter() - started, at)
    path = record.write(done)
    print()
    print(render.metrics_table(done))
    print(f"\nrecord: {path.relative_to(record.ROOT)}")
    return done


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        print(list_suites())
        return 0
    if args[0] == "--list":
        print(list_suites())
        return 0
    if args[0] == "render":
        for path in render.render_all():
            print(path.relative_to(record.ROOT))
        return 0
    if args[0] not in SUITES:
        print(f"no suite {args[0]!r}; the suites:\n{list_suites()}", file=sys.stderr)
        return 2
    run(args[0], args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
