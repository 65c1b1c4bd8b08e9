"""Millrace benchmarks (run as modules: ``python -m bench.compare``, see the Makefile)."""
