"""The benchmarks: one harness, `python -m bench SUITE` (bench/__main__.py), one record per run
(bench/record.py), the docs' pages rendered from the records (bench/render.py)."""
