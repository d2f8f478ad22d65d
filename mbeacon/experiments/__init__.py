"""Reproducible experiments that check the privacy mechanisms against published results.

Each experiment is a module with a ``run_experiment`` function returning plain data (dicts and
lists, ready for JSON) and a ``plot_results`` function; :mod:`mbeacon.cli.experiment` exposes them
as ``mbeacon experiment <name>``. Experiments use seeded generators (reproducible mode), never the
service's secure noise source, so their numbers can be re-derived exactly.
"""
