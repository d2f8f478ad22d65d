"""The sanitiser a budget account answers with, run from the account's saved state.

Every protected mechanism of the dataset policy keeps the plain :class:`SVT2State` (two noisy
thresholds and the positives spent) in the ledger, so accounts are opened, locked, resumed, cached
and audited identically whatever the mechanism:

- ``svt2``: :func:`mbeacon.privacy.svt2.svt2_step` (a TOP flips the prior's answer);
- ``svt2-margin``: :func:`mbeacon.privacy.svt2_margin.svt2_margin_step`, SVT² whose two thresholds
  sit ``margin_above`` above and ``margin_below`` below ``T`` (a TOP still flips the prior's answer);
- ``svt2-noisy``: SVT²'s test with the same margins, and on a TOP the answer is a fresh noisy count
  ``v = alpha + Lap(c b / epsilon3)`` compared with ``T``; ``v`` (rounded, at least 0) is the count a
  CONTROLLED caller gets with count granularity;
- ``online-pmw``: Online Private Multiplicative Weights started at the public prior
  (:mod:`mbeacon.privacy.online_pmw`, served by :mod:`mbeacon.beacon.pmw_state`): the test compares
  the data with the account's *synthetic* answer (the prior as updated by the account's earlier
  released counts at the probe) with one ``margin``; a BOT releases the synthetic answer and count
  (free), a TOP a fresh noisy count ``v = alpha + Lap(c / epsilon3)`` and records the update it
  makes. Its state is SVT²'s row (its one noisy threshold in ``z1``) plus the updates; it is run by
  :func:`mbeacon.beacon.release.release`, with the updates the engine reads under the account's
  lock, not by :func:`run`.

Privacy cost (per account, at most ``c`` positives): ``svt2`` and ``svt2-margin`` cost SVT²'s
``2 (eps1 + eps2)`` (``2 (c eps1 + eps2)`` with ``redraw``) plus ``count_epsilon`` for noisy counts;
``svt2-noisy`` adds ``epsilon3`` instead (:func:`mbeacon.privacy.accounting.svt2_spent`, proofs in the
modules named above and docs/privacy.md); ``online-pmw`` costs ``eps1 + eps2 + eps3 = epsilon``
however many queries (:func:`mbeacon.privacy.accounting.online_pmw_spent`), at contribution bound 1
only (the engine refuses it at start-up on a dataset served at a larger bound). The release noise
of ``svt2-noisy`` is drawn on the integer lattice, as the service's other noisy counts are: the
served counts are integers whatever the contribution bound ``b``, and an integer shift of at most
``b`` under noise of scale ``c b / epsilon3`` costs at most ``epsilon3 / c``, the bound the
module's proof uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbeacon.privacy.noise import lattice_laplace
from mbeacon.privacy.sparse_vector import TOP
from mbeacon.privacy.svt2 import SVT2Params, SVT2State, svt2_resume, svt2_step
from mbeacon.privacy.svt2_margin import SVT2MarginParams, svt2_margin_step
from mbeacon.privacy.svt2_noisy import SVT2NoisyParams

#: The mechanisms that answer through SVT²'s state and spend a budget (everything but ``none``).
SANITISED: frozenset[str] = frozenset({"svt2", "svt2-margin", "svt2-noisy", "online-pmw"})
#: The mechanisms whose answers carry their own count (no ``count_epsilon`` needed).
RELEASES_COUNTS: frozenset[str] = frozenset({"svt2-noisy", "online-pmw"})


@dataclass(frozen=True)
class Run:
    """What a sanitiser decided for a stream of fresh queries.

    ``flags``: TOP/BOT/UNANSWERED per query; ``answers``: the yes/no a TOP released when the
    mechanism decides it by a noisy comparison (None: the flipped prior, SVT²'s rule);
    ``counts``: the noisy count released with such a TOP (None elsewhere); ``state``: to save.
    """

    flags: list[int]
    answers: list[bool | None]
    counts: list[int | None]
    state: SVT2State


def run(mechanism: str, params: SVT2Params, state: SVT2State, alpha: list[float], beta: list[float]) -> Run:
    """Answer ``alpha``/``beta`` (fresh queries in order) from ``state`` with ``mechanism``.

    ``params`` is :meth:`mbeacon.beacon.budget.AccountParams.svt2` (:class:`SVT2MarginParams` for
    ``svt2-margin``, :class:`SVT2NoisyParams` for ``svt2-noisy``).
    An unprotected account (``none``) gets BOT flags and keeps its state.
    """
    n = len(alpha)
    none: list = [None] * n
    if mechanism == "online-pmw":
        raise ValueError("online-pmw needs its histogram updates: it is run by mbeacon.beacon.pmw_state")
    if mechanism not in SANITISED:
        return Run([0] * n, none, list(none), state)
    if mechanism == "svt2":
        if n == 1:  # one query skips the vectorised noise's array set-up (same distribution)
            flag, state = svt2_step(state, alpha[0], beta[0], params)
            return Run([flag], none, list(none), state)
        flags, state = svt2_resume(state, np.array(alpha), np.array(beta), params)
        return Run(flags.tolist(), none, list(none), state)
    assert isinstance(params, SVT2MarginParams)
    flags_out: list[int] = []
    for a, b in zip(alpha, beta, strict=True):
        flag, state = svt2_margin_step(state, a, b, params)
        flags_out.append(flag)
    if mechanism not in RELEASES_COUNTS:
        return Run(flags_out, none, list(none), state)
    answers: list[bool | None] = list(none)
    counts: list[int | None] = list(none)
    tops = [i for i, flag in enumerate(flags_out) if flag == TOP]
    if tops:
        assert isinstance(params, SVT2NoisyParams)
        noise = np.atleast_1d(lattice_laplace(params.release_scale, 1.0, len(tops), None))
        for i, z in zip(tops, noise.tolist(), strict=True):
            v = alpha[i] + z
            answers[i] = bool(v >= params.threshold)
            counts[i] = max(round(v), 0)  # post-processing of v
    return Run(flags_out, answers, counts, state)
