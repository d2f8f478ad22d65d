"""The grid runs the same on a Dask cluster as on local processes: every setting is seeded from
``(seed, setting index)``, so where and in which order tasks run changes no result."""

from __future__ import annotations

import math

import pytest

from mbeacon.attack.evaluate import EvaluationConfig, GridConfig, build, run_grid

pytest.importorskip("distributed")


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@pytest.mark.slow  # about 20-40 s: a 2-process LocalCluster takes about 8 s to start and 3 s to stop
def test_dask_grid_equals_local_processes_row_for_row() -> None:
    from distributed import LocalCluster

    config = EvaluationConfig(
        seed=7,
        repetitions=2,
        queries=[10, 50],
        simulation={"probes": 2000},
        grid=GridConfig(
            defences=["none", "suppression", "svt2-single", "svt2-redraw", "noisy-count", "flip"],
            epsilon=[10.0],
            c=[5],
            threshold=[1],
            suppression_threshold=[2],
            flip=[0.5],
        ),
    )
    scenario = build(config)
    local = run_grid(config, scenario, workers=2)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
    ) as cluster:
        remote = run_grid(config, scenario, scheduler=cluster.scheduler_address)
    assert len(local) == len(config.grid.settings()) * len(config.queries) == 12
    assert [(r["label"], r["queries"]) for r in remote] == [(r["label"], r["queries"]) for r in local]
    for ours, theirs in zip(local, remote, strict=True):
        assert ours.keys() == theirs.keys()
        different = [key for key in ours if not _same(ours[key], theirs[key])]
        assert not different, (ours["label"], ours["queries"], different)
    # randomised settings really were random: a different seed changes them
    other = run_grid(config.model_copy(update={"seed": 8}), scenario, workers=1)
    svt2 = [i for i, r in enumerate(local) if r["defence"] == "svt2-single"]
    assert any(local[i]["auc"] != other[i]["auc"] for i in svt2)
