"""The cohort advisor (mbeacon.attack.advisor.cohort, ``mbeacon budget advise-cohort``): the cohort's
epsilon keeps any coalition's best attack within the promise, c keeps released counts within the
chosen error, and the quota shares c among the researchers."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from mbeacon.attack.advisor.cohort import advise_cohort, epsilon_for_auc
from mbeacon.beacon.config import dataset_policy
from mbeacon.beacon.sanitisers import account_params
from mbeacon.cli import main
from mbeacon.privacy.tradeoff import max_auc


@given(
    patients=st.integers(1, 100_000),
    researchers=st.integers(1, 1000),
    auc=st.floats(0.51, 0.99),
    error=st.floats(0.01, 1.0),
)
def test_the_advice_keeps_its_promise(patients: int, researchers: int, auc: float, error: float) -> None:
    advice = advise_cohort(patients, researchers, max_auc=auc, count_error=error)
    assert advice.bound.auc <= auc  # the promise holds, whoever asks
    assert max_auc(advice.epsilon + 1e-3) > advice.bound.auc  # and is not given away
    assert advice.c >= 1 and advice.quota >= 1 and advice.quota <= advice.c
    if advice.c > 1:  # the released counts' noise stays within the chosen share of the cohort
        assert advice.count_noise_scale <= error * patients + 1e-9
    assert advice.quota * researchers >= advice.c  # every researcher can make a share
    # the advised table is a dataset policy the service serves, with the advised parameters
    params = account_params(dataset_policy(**advice.policy()))
    assert (params.mechanism, params.c, params.quota) == ("cohort-pmw", advice.c, advice.quota)
    assert params.epsilon1 + params.epsilon2 + params.epsilon3 == pytest.approx(advice.epsilon)


def test_the_largest_cohort_is_advised_a_c_the_service_takes() -> None:
    """A cohort large enough to afford more positives than a policy may have gets the most it may."""
    advice = advise_cohort(100_000, 3, max_auc=0.99, count_error=1.0)
    assert advice.c == 100_000
    assert account_params(dataset_policy(**advice.policy())).c == 100_000


def test_epsilon_for_auc_inverts_the_bound() -> None:
    assert epsilon_for_auc(0.6) == pytest.approx(math.log(1.5))
    assert max_auc(epsilon_for_auc(0.75)) == pytest.approx(0.75)
    with pytest.raises(ValueError, match=r"in \(0\.5, 1\)"):
        epsilon_for_auc(0.5)


def test_cli_prints_the_setting_and_the_promise() -> None:
    result = CliRunner().invoke(
        main, ["budget", "advise-cohort", "--patients", "1000", "--researchers", "10"]
    )
    assert result.exit_code == 0, result.output
    assert "quota 2 per budget holder" in result.output and 'mechanism = "cohort-pmw"' in result.output
    payload = json.loads(
        CliRunner()
        .invoke(main, ["budget", "advise-cohort", "--patients", "1000", "--researchers", "10", "--json"])
        .output
    )
    assert payload["bound"]["maxAuc"] <= 0.6 and payload["c"] == 13
    refused = CliRunner().invoke(main, ["budget", "advise-cohort", "--patients", "0", "--researchers", "10"])
    assert refused.exit_code == 2 and "--patients" in refused.output
