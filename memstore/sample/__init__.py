"""Deterministic sample data: the catalogs the demo searches and the benchmarks measure.

Imported only by those two (``import memstore`` never loads it).
"""
