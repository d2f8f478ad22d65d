"""Which settings the evaluation report shows: its targets and the rules that pick rows from the results.

The report's tables (:mod:`mbeacon.attack.report`) and its figures (:mod:`mbeacon.attack.report_plots`)
show the same picks -- the headline setting of each defence, the privacy-utility frontier, each
mechanism's best setting per threshold -- against the same targets. These rules live here, apart from
both, so that the two agree by construction and the imports run one way: the tables import the
figures to write them, and both import this module, which imports neither (nor matplotlib).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mbeacon.attack.defences import DEFENCES

#: The AUC a defence must stay under to count as protecting (the issue's bar for SVT²).
TARGET_AUC = 0.6
#: The corner a deployable setting must reach (issue 16): AUC at most TARGET_AUC against the strongest
#: attacker, random-query and discovery utility at least these, at a per-account epsilon at most this.
TARGET_RANDOM, TARGET_DISCOVERY, TARGET_EPSILON = 0.97, 0.75, 10.0
#: The thresholds the frontier is shown at (``frontier_by_threshold.png``).
THRESHOLDS = (1, 5, 10, 20)


def at_most_queries(frame: pd.DataFrame) -> pd.DataFrame:
    """Each setting's row at the largest query count evaluated."""
    return frame[frame["queries"] == frame["queries"].max()]


def headline(frame: pd.DataFrame, target: float = TARGET_AUC) -> pd.DataFrame:
    """One row per defence at the largest query count: the setting with the best discovery utility
    among those that keep the attack AUC at or under ``target``, or else the one with the lowest AUC."""
    last = at_most_queries(frame)
    picks = []
    for name in DEFENCES:
        rows = last[last["defence"] == name]
        if rows.empty:
            continue
        safe = rows[rows["auc"] <= target]
        if not safe.empty:
            pick = safe.sort_values(["utility_discovery", "utility_random"], ascending=False).iloc[0]
        else:
            pick = rows.sort_values("auc").iloc[0]
        picks.append(pick)
    return pd.DataFrame(picks).reset_index(drop=True)


def pareto(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The rows no other row beats on both counts (lower ``x``, higher ``y``), sorted by ``x``."""
    rows = frame.dropna(subset=[x, y]).sort_values([x, y], ascending=[True, False])
    best, keep = -np.inf, []
    for index, value in zip(rows.index, rows[y], strict=True):
        if value > best + 1e-9:
            keep.append(index)
            best = value
    return rows.loc[keep]


def best_by_threshold(frame: pd.DataFrame, target: float = TARGET_AUC) -> pd.DataFrame:
    """For each mechanism and threshold T (at the largest query count), among its settings with a
    per-account epsilon at most :data:`TARGET_EPSILON` (or none): :func:`headline`'s pick."""
    last = at_most_queries(frame)
    last = last[~(last["epsilon"] > TARGET_EPSILON)]
    picks = [headline(sub, target) for _, sub in last.groupby("threshold")]
    if not picks:
        return last.iloc[:0]
    return pd.concat(picks).sort_values(["threshold", "defence"]).reset_index(drop=True)


def short_label(label: str) -> str:
    """A setting's label as a point label: the release share, the same everywhere, left out."""
    return " ".join(part for part in label.split() if not part.startswith("r="))
