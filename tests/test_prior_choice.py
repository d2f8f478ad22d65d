"""Which prior a dataset is answered against: one rule (mbeacon.store.priors.choose_prior) for the
service and the budget advisor, so the advisor models the prior the beacon uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mbeacon.beacon.config import ServiceConfig, dataset_policy
from mbeacon.store.priors import (
    NoPriorChosen,
    PriorChoice,
    choose_prior,
    prior_from_means,
    recorded_default,
    remove_prior,
    save_prior,
)


def _save(store: Path, name: str) -> None:
    prior = prior_from_means(np.array([f"cg{i:08d}" for i in range(5)]), np.linspace(0.1, 0.9, 5), name=name)
    save_prior(store, prior)


def test_a_named_prior_wins_and_says_who_named_it(tmp_path: Path) -> None:
    assert choose_prior(tmp_path, "blood") == PriorChoice("blood", "config")
    assert choose_prior(tmp_path, "blood", named_by="--prior") == PriorChoice("blood", "--prior")


def test_unnamed_the_only_prior_and_it_stays_the_choice_when_another_is_added(tmp_path: Path) -> None:
    """Adding a prior never makes the unnamed choice ambiguous: the only prior is recorded as the
    store's default when a second joins it, and stays the choice (a reload keeps serving with it)."""
    with pytest.raises(NoPriorChosen, match="has no priors"):
        choose_prior(tmp_path)
    _save(tmp_path, "pop450k")
    assert choose_prior(tmp_path) == PriorChoice("pop450k", "only prior in the store")
    _save(tmp_path, "pop450k")  # a new version of the same prior records nothing
    assert recorded_default(tmp_path) is None
    _save(tmp_path, "blood")  # sorts first: the old rule's "only prior" could not have guessed it
    _save(tmp_path, "cord")
    assert recorded_default(tmp_path) == "pop450k"
    assert choose_prior(tmp_path).name == "pop450k"
    assert choose_prior(tmp_path, "blood") == PriorChoice("blood", "config")


def test_unnamed_without_a_recorded_default_several_priors_are_refused(tmp_path: Path) -> None:
    _save(tmp_path, "blood")
    _save(tmp_path, "pop450k")
    (tmp_path / "priors" / "DEFAULT").unlink()  # priors copied in by hand record nothing
    with pytest.raises(NoPriorChosen, match=r"has 2 priors \(blood, pop450k\) and none is named"):
        choose_prior(tmp_path)
    remove_prior(tmp_path, "pop450k")
    _save(tmp_path, "pop450k")  # records blood, the only prior then
    assert recorded_default(tmp_path) == "blood"
    remove_prior(tmp_path, "blood")  # the default removed: its record goes with it
    assert recorded_default(tmp_path) is None and choose_prior(tmp_path).name == "pop450k"
    _save(tmp_path, "blood")
    (tmp_path / "priors" / "DEFAULT").write_text("gone\n")  # a default that was removed is no choice
    with pytest.raises(NoPriorChosen, match="none is named"):
        choose_prior(tmp_path)


def test_the_configuration_names_a_datasets_prior() -> None:
    config = ServiceConfig(default_prior="pop", datasets={"d": dataset_policy(prior="blood")})
    assert (config.prior_for("d"), config.prior_for("other")) == ("blood", "pop")
    assert ServiceConfig().prior_for("d") is None
