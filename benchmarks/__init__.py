"""Reproducible benchmarks for memstore: a seeded data generator, scan baselines and a harness.

Run ``python -m benchmarks.run --size 100k`` (``make bench``); see benchmarks/README.md.
"""
