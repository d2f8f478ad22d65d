"""Which prior a dataset is answered against: one rule (mbeacon.store.priors.choose_prior) for the
service and the budget advisor, so the advisor models the prior the beacon uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mbeacon.beacon.config import ServiceConfig, dataset_policy
from mbeacon.store.priors import NoPriorChosen, PriorChoice, choose_prior, prior_from_means, save_prior


def _save(store: Path, name: str) -> None:
    prior = prior_from_means(np.array([f"cg{i:08d}" for i in range(5)]), np.linspace(0.1, 0.9, 5), name=name)
    save_prior(store, prior)


def test_a_named_prior_wins_and_says_who_named_it(tmp_path: Path) -> None:
    assert choose_prior(tmp_path, "blood") == PriorChoice("blood", "config")
    assert choose_prior(tmp_path, "blood", named_by="--prior") == PriorChoice("blood", "--prior")


def test_unnamed_the_store_must_hold_exactly_one(tmp_path: Path) -> None:
    with pytest.raises(NoPriorChosen, match="has no priors"):
        choose_prior(tmp_path)
    _save(tmp_path, "blood")
    assert choose_prior(tmp_path) == PriorChoice("blood", "only prior in the store")
    _save(tmp_path, "pop450k")
    with pytest.raises(NoPriorChosen, match=r"has 2 priors \(blood, pop450k\) and none is named"):
        choose_prior(tmp_path)


def test_the_configuration_names_a_datasets_prior() -> None:
    config = ServiceConfig(default_prior="pop", datasets={"d": dataset_policy(prior="blood")})
    assert (config.prior_for("d"), config.prior_for("other")) == ("blood", "pop")
    assert ServiceConfig().prior_for("d") is None
