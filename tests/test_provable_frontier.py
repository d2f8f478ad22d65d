"""What a cohort-level epsilon buys: per epsilon, the best discovery utility whose random-query
utility keeps up with the public prior's, beside the bound that holds against any coalition."""

from __future__ import annotations

import pytest

from mbeacon.attack.provable import frontier_plot, frontier_table, provable_frontier
from mbeacon.privacy.tradeoff import best_attack


def _row(defence: str, epsilon: float | None, discovery: float, random: float, label: str = "") -> dict:
    return {"defence": defence, "epsilon": epsilon, "threshold": 1, "utility_discovery": discovery,
            "utility_random": random, "label": label or f"{defence} {epsilon}"}  # fmt: skip


ROWS = [
    _row("prior-only", None, 0.0, 0.98),
    _row("cohort-pmw", 0.4054, 0.30, 0.93, "loses random answers"),
    _row("cohort-pmw", 0.4054, 0.10, 0.975, "keeps up"),
    _row("cohort-pmw", 1.0, 0.20, 0.971, "just keeps up"),
    _row("cohort-pmw", 1.0, 0.25, 0.95, "better discovery, too costly"),
    _row("cohort-pmw", 3.0, 0.60, 0.90),
    _row("online-pmw", 1.0, 0.90, 0.99, "not a cohort guarantee"),
]


def test_each_epsilon_keeps_its_best_admissible_setting() -> None:
    points = provable_frontier(ROWS)
    assert [p["epsilon"] for p in points] == [0.4054, 1.0, 3.0]  # online-pmw's rows promise no cohort bound
    by = {p["epsilon"]: p for p in points}
    assert by[0.4054]["label"] == "keeps up" and by[0.4054]["utility_discovery"] == 0.10
    assert by[1.0]["label"] == "just keeps up"  # 0.971 >= 0.98 - 0.01; 0.95 is not
    assert by[3.0]["utility_discovery"] is None and by[3.0]["label"] is None  # none admissible
    # what the closest point costs: the best discovery whatever the random queries lose
    assert (by[1.0]["utility_discovery_any"], by[1.0]["utility_random_any"]) == (0.25, 0.95)
    assert by[3.0]["label_any"] == "cohort-pmw 3.0"
    assert by[0.4054]["bound_auc"] == pytest.approx(0.6, abs=1e-4)
    assert by[1.0]["bound_auc"] == best_attack(1.0).auc
    assert all(p["prior_random"] == 0.98 for p in points)


def test_without_the_prior_alone_every_setting_is_admissible() -> None:
    points = provable_frontier([r for r in ROWS if r["defence"] != "prior-only"])
    assert {p["epsilon"]: p["utility_discovery"] for p in points} == {0.4054: 0.30, 1.0: 0.25, 3.0: 0.60}


def test_the_table_and_the_figure(tmp_path) -> None:
    points = provable_frontier(ROWS)
    table = frontier_table(points)
    assert "| 0.4054 | 0.600 | 0.0015 | 0.100 | 0.975 (0.980) | keeps up | 0.300 (0.930) |" in table
    assert "| 3 | 0.953 |" in table and "none admissible" in table
    assert frontier_table([]) == ""
    frontier_plot({"100 patients": points}, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_command_draws_several_cohorts_and_prints_their_tables(tmp_path, capsys) -> None:
    import json

    from mbeacon.attack.provable import main

    paths = []
    for n in (100, 1000):
        rows = [{**r, "n": n if r["defence"] == "cohort-pmw" else None, "queries": 10} for r in ROWS]
        paths.append(tmp_path / f"{n}.json")
        paths[-1].write_text(json.dumps({"results": rows}))
    assert main([*map(str, paths), "--out", str(tmp_path / "both.png")]) == 0
    out = capsys.readouterr().out
    assert "100 patients" in out and "1,000 patients" in out and "keeps up" in out
    assert (tmp_path / "both.png").stat().st_size > 10_000
    mixed = [{**ROWS[1], "n": 100, "queries": 10}, {**ROWS[2], "n": 1000, "queries": 10}]
    paths[0].write_text(json.dumps({"results": mixed}))
    with pytest.raises(SystemExit):
        main([str(paths[0]), "--out", str(tmp_path / "x.png")])
    assert "one cohort size" in capsys.readouterr().err
