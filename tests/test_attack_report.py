"""The evaluation report's figures and tables: both budget views, labelled frontiers, the corner."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from mbeacon.attack import report, report_plots
from mbeacon.attack.defences import Defence
from mbeacon.attack.report import in_corner, main, views_table
from mbeacon.attack.report_selection import THRESHOLDS, best_by_threshold, pareto


def _frame(seed: int = 0) -> pd.DataFrame:
    """Result rows at 1,000 queries per victim for a grid over mechanisms, epsilon and T."""
    rng = np.random.default_rng(seed)
    rows = []
    grid = itertools.product(("svt2-single", "noisy-count", "online-pmw"), (3.0, 10.0, 30.0), THRESHOLDS)
    settings = [Defence("none"), Defence("suppression", threshold=20), Defence("prior-only")]
    for name, eps, t in grid:
        settings.append(Defence(name, epsilon=eps, c=None if name == "noisy-count" else 50, threshold=t))
    for d in settings:
        auc = float(rng.uniform(0.45, 1.0))
        utility = {w: float(rng.uniform(0, 1)) for w in ("random", "discovery", "exploration")}
        rows.append(
            {
                "defence": d.name,
                "label": d.label,
                "epsilon": d.epsilon,
                "threshold": d.threshold,
                "queries": 1000,
                "auc": auc,
                "attacker": "rarest",
                **{f"utility_{w}": u for w, u in utility.items()},
                "auc_shared": float(rng.uniform(0.45, 0.6)),
                **{f"utility_{w}_shared": u / 2 for w, u in utility.items()},
                "honest_refused_shared": 0.9,
            }
        )
    rows.append({**rows[-1], "label": "the corner", "epsilon": 10.0, "auc": 0.55, "utility_random": 0.98})
    rows[-1]["utility_discovery"] = 0.8
    return pd.DataFrame(rows)


@pytest.fixture
def figures(monkeypatch):
    """Every figure the report closes, kept open for inspection."""
    kept = []
    monkeypatch.setattr(report_plots.plt, "close", kept.append)
    return kept


def _labels(ax) -> list:
    return [t for t in ax.texts if t.get_text()]


def _no_overlap(fig) -> None:
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in _labels(ax)]
        for a, b in itertools.combinations(boxes, 2):
            assert not a.overlaps(b), "two labels overlap"
        frame = ax.get_window_extent(renderer)
        for box in boxes:
            assert frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1), "label off its panel"


def test_frontier_shows_both_views_every_workload_and_labels_without_overlap(figures, tmp_path) -> None:
    report_plots.frontier(_frame(), tmp_path / "frontier.png")
    (fig,) = figures
    assert (tmp_path / "frontier.png").stat().st_size > 20_000
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 6
    assert sum("exploration" in t for t in titles) == 2
    assert sum("global ledger" in t for t in titles) == 3 and sum("per-user" in t for t in titles) == 3
    for ax in fig.axes:
        assert _labels(ax), f"no label on {ax.get_title()!r}"
        texts = {t.get_text() for t in _labels(ax)}
        assert texts <= set(_frame()["label"]), "labels are setting names"
    _no_overlap(fig)


def test_frontier_by_threshold_has_a_column_per_threshold_and_labels_each_mechanism(
    figures, tmp_path
) -> None:
    assert report_plots.frontier_by_threshold(_frame(), tmp_path / "by_t.png")
    (fig,) = figures
    titles = [ax.get_title() for ax in fig.axes]
    for t in THRESHOLDS:
        assert sum(title.startswith(f"T = {t}:") for title in titles) == 3
    _no_overlap(fig)
    best = best_by_threshold(_frame())
    assert (best["epsilon"].fillna(0) <= 10).all(), "the best settings are those a privacy officer can state"
    assert set(best["threshold"]) == set(THRESHOLDS)


def test_no_threshold_figure_without_those_thresholds(figures, tmp_path) -> None:
    frame = _frame()
    assert not report_plots.frontier_by_threshold(frame.assign(threshold=2), tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_pareto_keeps_exactly_the_undominated_settings() -> None:
    frame = pd.DataFrame({"x": [0.5, 0.6, 0.55, 0.7, 0.52], "y": [0.2, 0.9, 0.3, 0.95, 0.1]})
    front = pareto(frame, "x", "y")
    assert list(front.index) == [0, 2, 1, 3]


def test_the_corner_needs_every_bound() -> None:
    corner = in_corner(_frame())
    assert "the corner" in set(corner["label"])
    assert ((corner["auc"] <= 0.6) & (corner["utility_random"] >= 0.97)).all()
    assert ((corner["utility_discovery"] >= 0.75) & (corner["epsilon"] <= 10)).all()
    table = views_table(corner)
    assert "AUC shared" in table and "| the corner |" in table


@pytest.mark.slow
def test_one_command_regenerates_the_report_and_the_doc_figures(tmp_path, capsys) -> None:
    config = tmp_path / "eval.toml"
    config.write_text(
        "seed = 2\nrepetitions = 2\nqueries = [10, 30]\n"
        "[simulation]\nprobes = 2000\npatients = 30\nnonmembers = 30\nreference = 60\n"
        "[grid]\ndefences = ['none', 'svt2-single', 'online-pmw']\nepsilon = [10.0]\nc = [20]\n"
        "threshold = [1, 5]\nmargin = [20.0]\n"
    )
    docs = tmp_path / "figures"
    assert main([str(config), "--out", str(tmp_path / "out"), "--figures", str(docs), "--workers", "1"]) == 0
    for name in report.DOC_FIGURES:
        assert (docs / f"attack-{name}.png").stat().st_size > 20_000, name
    out = capsys.readouterr().out
    assert "| setting | T | AUC |" in out and "What each budget scope buys" in out
    page = (tmp_path / "out" / "report.md").read_text()
    assert "## What each budget scope buys" in page and "frontier_by_threshold.png" in page
    assert "## By threshold" in page and "| mechanism | T = 1 | T = 5 |" in page
