"""The budget advisor: which mechanism and parameters to give a dataset, chosen from public inputs only.

An operator about to publish a cohort asks: which mechanism (plain SVT², SVT² with decision margins,
SVT² with a noisy release on TOP, Online PMW from the prior) and which epsilon, c, threshold T,
variant, margins and release share keep the membership-inference attacks of :mod:`mbeacon.attack`
below a target AUC after ``Q`` queries per victim, while answering as many *discovery* queries (where
the cohort differs from the prior) and ordinary *random* queries as possible? :func:`advise` answers
by simulation, on a synthetic cohort built from what the beacon publishes anyway:

* the cohort size ``N`` (``/api/datasets`` publishes it) and the dataset's probe ids (the platform);
* the population prior (public by design: every mechanism compares the counts with it).

It never opens the cohort's beta values (:class:`~mbeacon.store.cohorts.Cohort` is used for its
metadata only), so the advice releases nothing about the patients and can be shared. What it cannot
know, the cohort's real DMPs and correlation structure, it replaces by the assumptions of
:mod:`mbeacon.store.simulate` (``docs/advisor.md`` discusses what that costs).

The synthetic world (:func:`synthetic_scenario`):

1. ``P`` random probes of the prior (those the dataset has), at most :attr:`AdvisorConfig.probes`;
2. ``N`` members and ``V`` non-members (``V = min(N, victims)``), every one a draw from the prior's
   marginal at each probe, independently (inverse CDF through the quantile sketch; Beta(a, b) where
   there is no sketch), except at a fraction ``dmp_fraction`` of the probes, the disease's DMPs, where
   the mean shifts by ``delta`` (``|delta|`` uniform in ``effect_range``, random sign, as in the
   simulation) and the spread follows the prior's own sd-by-mean relation;
3. the members' values, with ``missing`` of them NaN, are the cohort; the victims are ``V`` members and
   the ``V`` non-members, re-measured (``+ N(0, noise^2)``, clipped to [0, 1]);
4. the beacon's prior, estimated as the real one was: ``n_reference`` reference people (the prior's
   own count, at most :data:`~.synthetic_prior.MAX_REFERENCE`) drawn from the public prior like the
   members, and a prior built from them as the store builds one from a reference table (mean, sd,
   Beta, a quantile sketch of the public prior's levels; :mod:`.synthetic_prior`). The public prior
   is the synthetic population's truth, the re-estimate what the synthetic beacon knows of it. A
   prior with no reference count (``n_reference`` 0: built from published means) stays the beacon's
   prior as it is, and the advice warns that its utilities are then optimistic;
5. :func:`~mbeacon.attack.scenario.build_scenario` plans the pooled attack and the three researcher
   workloads (random, discovery, exploration), with the prior of step 4 as the beacon's and the
   attacker's prior.

Then :func:`~mbeacon.attack.evaluate.run_grid` evaluates every setting of the grid
(:meth:`AdvisorConfig.grids`: every served mechanism with its own parameters), each against both
attackers (the rarest-range likelihood ratio and the threshold-aware tracker), plus suppression, the
prior's answers alone and noisy counts for comparison, and :func:`rank` orders the served settings
(:mod:`.ranking` states the order): those whose *risk* (the strongest attacker's highest
``AUC + margin_sd * sd`` over the query counts up to ``Q``: an attacker may stop early) is at most
the target and whose random-query and discovery utilities reach the floors first, then those meeting
the target only, each group by discovery utility, random-query utility, exploration utility, then
the smaller epsilon. The recommendation is the first, as the dataset policy's TOML keys
(:meth:`Candidate.policy`), to paste verbatim.

The package, one module per job (in dependency order):

* :mod:`.config`: :class:`AdvisorConfig`, what is simulated and the grid of settings tried;
* :mod:`.prior_choice`: :func:`choose_prior`, which prior stands for the dataset's and why;
* :mod:`.inputs`: :func:`public_inputs`, the dataset's size and probe ids and its prior;
* :mod:`.synthetic_prior`: the synthetic beacon's prior, re-estimated from synthetic reference people;
* :mod:`.synthetic`: the synthetic cohort, disease and victims (:func:`synthetic_cohort`) and the
  scenario on them (:func:`synthetic_scenario`);
* :mod:`.ranking`: each setting's outcome (:class:`Candidate`) and the order of preference (:func:`rank`);
* :mod:`.advice`: :class:`Advice`, the ranked settings, the recommendation and its configuration table;
* :mod:`.search`: the grid evaluated on the scenario and :func:`advise`, the whole advice;
* :mod:`.frontier`: :func:`plot_frontier`, attack AUC against discovery utility.
"""

from __future__ import annotations

from mbeacon.attack.advisor.advice import Advice
from mbeacon.attack.advisor.config import MECHANISMS, QUERY_MARKS, AdvisorConfig
from mbeacon.attack.advisor.frontier import pareto, plot_frontier
from mbeacon.attack.advisor.inputs import PublicInputs, public_inputs
from mbeacon.attack.advisor.prior_choice import choose_prior
from mbeacon.attack.advisor.ranking import Candidate, best, candidates, preferred_order, rank
from mbeacon.attack.advisor.search import Progress, advise, advise_inputs, evaluate
from mbeacon.attack.advisor.synthetic import (
    Disease,
    SyntheticCohort,
    draw_disease,
    draw_from_prior,
    scenario_for,
    sd_by_mean,
    synthetic_cohort,
    synthetic_scenario,
    usable_rows,
)

__all__ = [
    "MECHANISMS",
    "QUERY_MARKS",
    "Advice",
    "AdvisorConfig",
    "Candidate",
    "Disease",
    "Progress",
    "PublicInputs",
    "SyntheticCohort",
    "advise",
    "advise_inputs",
    "best",
    "candidates",
    "choose_prior",
    "draw_disease",
    "draw_from_prior",
    "evaluate",
    "pareto",
    "plot_frontier",
    "preferred_order",
    "public_inputs",
    "rank",
    "scenario_for",
    "sd_by_mean",
    "synthetic_cohort",
    "synthetic_scenario",
    "usable_rows",
]
