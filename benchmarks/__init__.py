"""Benchmarks of mbeacon, each figure measured side by side with its baseline (``python -m benchmarks``)."""
