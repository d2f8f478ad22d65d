"""The dataset's public parameters, read from the beacon's documents, and the attacker's model of them.

``GET /api/datasets`` publishes each dataset's cohort size and protection, ``GET /api/budget`` the
parameters frozen in the key's own account, and the configuration, info or OpenAPI documents the
server's batch limit. A datasets document the client cannot read is an error; the optional ones
fall back (to the dataset's current policy, to the Beacon default batch limit).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mbeacon.attack.defences import PMW, Defence
from mbeacon.attack.live.errors import LiveAttackError
from mbeacon.privacy.svt2 import svt2_allocate

#: The Beacon v2 default batch limit, used when the server publishes none.
DEFAULT_MAX_BATCH = 1000
#: The sanitisers built on SVT² the live attack models (:meth:`DatasetParams.defence`).
SANITISERS = ("svt2-margin", "svt2-noisy", *PMW)
#: Every mechanism the live attack models.
LIVE_MECHANISMS = ("none", "svt2", *SANITISERS)


@dataclass(frozen=True)
class DatasetParams:
    """A dataset as the beacon publishes it: cohort size and protection (never the noisy thresholds)."""

    id: str
    patients: int
    mechanism: str
    epsilon: float
    c: int
    threshold: int
    variant: str = "single"
    count_epsilon: float = 0.0
    epsilon1: float | None = None
    epsilon2: float | None = None
    on_exhausted: str = "refuse"
    positives_used: int | None = None
    margin_above: float = 0.0
    margin_below: float = 0.0
    epsilon3: float = 0.0
    sensitivity: float = 1.0
    #: ``cohort-pmw``: the most of the cohort's ``c`` positives one key may spend (None: not published).
    quota: int | None = None

    def defence(self) -> Defence:
        """The attacker's model of this dataset's answers (the same model the evaluation uses).

        ``svt2-margin`` and ``svt2-noisy`` are modelled with one margin on both sides, the single
        threshold variant and a contribution bound of 1 (the evaluation's defences); other published
        parameters are refused with the reason rather than modelled wrongly.
        """
        if self.mechanism == "none":
            if self.threshold == 1:
                return Defence("none")
            return Defence("suppression", threshold=self.threshold)
        if self.mechanism == "svt2":
            name = "svt2-redraw" if self.variant == "redraw" else "svt2-single"
            return Defence(name, threshold=self.threshold, epsilon=self.svt_epsilon, c=self.c)
        if self.mechanism in SANITISERS:
            self._check_modelled()
            if self.mechanism == "svt2-margin":
                return Defence(
                    "svt2-margin", threshold=self.threshold, epsilon=self.svt_epsilon, c=self.c,
                    margin=self.margin_above,
                )  # fmt: skip
            share = self.epsilon3 / self.epsilon
            quota = self.quota if self.mechanism == "cohort-pmw" else None
            return Defence(
                self.mechanism, threshold=self.threshold, epsilon=self.epsilon, c=self.c,
                margin=self.margin_above, release_share=share, quota=quota,
            ).with_cohort(self.patients)  # fmt: skip
        modelled = ", ".join(repr(m) for m in LIVE_MECHANISMS)
        raise LiveAttackError(
            f"dataset {self.id!r}: the live attack models mechanisms {modelled}, not {self.mechanism!r}; "
            f"measure it with `mbeacon attack evaluate` (defence {self.mechanism!r})"
        )

    def _check_modelled(self) -> None:
        why = None
        if self.margin_above != self.margin_below:
            why = f"margins above ({self.margin_above:g}) and below ({self.margin_below:g}) T differ"
        elif self.variant != "single":
            why = f"variant {self.variant!r} (the model draws one threshold per account)"
        elif self.sensitivity != 1.0:
            why = f"a contribution bound of {self.sensitivity:g} (the model moves counts by one patient)"
        elif self.mechanism == "svt2-margin" and self.epsilon3 > 0:
            why = "a noisy release (epsilon3 > 0) on svt2-margin"
        elif self.mechanism != "svt2-margin" and not 0 < self.epsilon3 < self.epsilon:
            why = f"epsilon3 = {self.epsilon3:g} (the noisy release needs 0 < epsilon3 < epsilon)"
        elif self.mechanism != "svt2-margin" and self.count_epsilon > 0:
            why = "count_epsilon > 0 (its TOPs release their own noisy count)"
        elif self.mechanism == "cohort-pmw" and not (self.quota and 1 <= self.quota <= self.c):
            why = f"a quota of {self.quota} (the model needs the published quota, 1 to c = {self.c})"
        if why is not None:
            raise LiveAttackError(
                f"dataset {self.id!r}: the live attack's model of {self.mechanism!r} does not cover {why}; "
                f"measure it with `mbeacon attack evaluate` (defence {self.mechanism!r})"
            )

    @property
    def svt_epsilon(self) -> float:
        """The part of epsilon SVT² uses (noisy counts are carved out of it)."""
        return self.epsilon - self.count_epsilon

    def allocation_matches(self) -> bool:
        """Whether the published eps1/eps2 are :func:`svt2_allocate`'s, i.e. what :meth:`defence` assumes."""
        if self.mechanism != "svt2" or self.epsilon1 is None or self.epsilon2 is None:
            return True
        eps1, eps2 = svt2_allocate(self.svt_epsilon, self.c, redraw=self.variant == "redraw")
        return math.isclose(eps1, self.epsilon1, rel_tol=1e-6) and math.isclose(
            eps2, self.epsilon2, rel_tol=1e-6
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready, for the metrics file."""
        return {
            "id": self.id,
            "patients": self.patients,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "c": self.c,
            "threshold": self.threshold,
            "variant": self.variant,
            "countEpsilon": self.count_epsilon,
            "onExhausted": self.on_exhausted,
            "marginAbove": self.margin_above,
            "marginBelow": self.margin_below,
            "epsilon3": self.epsilon3,
            "quota": self.quota,
        }


def _number(value: Any, what: str, kind: type = float) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LiveAttackError(f"/api/datasets: {what} is not a number: {value!r}")
    return kind(value)


def parse_datasets(body: Any) -> list[DatasetParams]:
    """The datasets of a ``GET /api/datasets`` response (``response.collections[].info``)."""
    try:
        collections = body["response"]["collections"]
    except (KeyError, TypeError):
        raise LiveAttackError("/api/datasets: not a Beacon collections response") from None
    out = []
    for item in collections if isinstance(collections, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("info"), dict):
            continue
        info = item["info"]
        privacy = info.get("privacy") if isinstance(info.get("privacy"), dict) else {}
        name = str(item.get("id"))
        out.append(
            DatasetParams(
                id=name,
                patients=_number(info.get("patients"), f"{name}: patients", int),
                mechanism=str(privacy.get("mechanism", "svt2")),
                epsilon=_number(privacy.get("epsilon"), f"{name}: epsilon"),
                c=_number(privacy.get("c"), f"{name}: c", int),
                threshold=_number(privacy.get("threshold", 1), f"{name}: threshold", int),
                variant=str(privacy.get("variant", "single")),
                count_epsilon=_number(privacy.get("countEpsilon", 0.0), f"{name}: countEpsilon"),
                epsilon1=privacy.get("epsilon1"),
                epsilon2=privacy.get("epsilon2"),
                on_exhausted=str(privacy.get("onExhausted", "refuse")),
                quota=_quota(privacy.get("quota"), name),
                **_sanitiser_fields(privacy, name),
            )
        )
    return out


def _quota(value: Any, name: str) -> int | None:
    """``cohort-pmw``'s published quota (None or 0 where the mechanism has none)."""
    return None if value is None or value == 0 else _number(value, f"{name}: quota", int)


def _sanitiser_fields(privacy: dict, name: str) -> dict[str, float]:
    """The sanitisers' published parameters; a single ``margin`` serves both sides, and a published
    ``releaseShare`` stands for ``epsilon3 / epsilon`` where ``epsilon3`` is not published."""
    margin = privacy.get("margin")
    share, epsilon = privacy.get("releaseShare", 0.0), privacy.get("epsilon", 0.0)
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in (share, epsilon)):
        share = epsilon = 0.0
    if privacy.get("mechanism") in PMW and margin is not None:  # its one margin; the SVT² pair is 0
        above = below = margin
    else:
        above = privacy.get("marginAbove", 0.0 if margin is None else margin)
        below = privacy.get("marginBelow", 0.0 if margin is None else margin)
    return {
        "margin_above": _number(above, f"{name}: marginAbove"),
        "margin_below": _number(below, f"{name}: marginBelow"),
        "epsilon3": _number(privacy.get("epsilon3", share * epsilon), f"{name}: epsilon3"),
        "sensitivity": _number(privacy.get("sensitivity", 1.0), f"{name}: sensitivity"),
    }


def with_account(params: DatasetParams, budgets: Any) -> DatasetParams:
    """``params`` with the key's own account parameters from ``GET /api/budget``, when it publishes them.

    Why: an account keeps the parameters it was opened with, so for a key that has queried before
    they can differ from the dataset's current policy (``/api/datasets``). For ``cohort-pmw`` the
    account's ``positivesTotal`` is the key's quota; the cohort's ``c`` is its ``cohort`` budget's.
    """
    try:
        account = budgets["response"]["budgets"][params.id]
    except (KeyError, TypeError):
        return params
    if not isinstance(account, dict):
        return params

    def pick(key: str, current: Any, kind: type) -> Any:
        value = account.get(key)
        ok = isinstance(value, int | float | str) and not isinstance(value, bool)
        return kind(value) if ok else current

    mechanism = pick("mechanism", params.mechanism, str)
    pmw = mechanism in PMW  # one margin; the SVT² pair is 0
    cohort = account.get("cohort") if isinstance(account.get("cohort"), dict) else {}
    if mechanism == "cohort-pmw":  # the key's account holds its quota; the cohort holds c
        c = _whole(cohort.get("positivesTotal"), params.c)
        quota = _whole(account.get("quota"), _whole(account.get("positivesTotal"), params.quota))
    else:
        c, quota = pick("positivesTotal", params.c, int), params.quota
    return DatasetParams(
        id=params.id,
        patients=params.patients,
        mechanism=mechanism,
        epsilon=pick("epsilonTotal", params.epsilon, float),
        c=c,
        threshold=pick("threshold", params.threshold, int),
        variant=pick("variant", params.variant, str),
        count_epsilon=pick("countEpsilon", params.count_epsilon, float),
        epsilon1=pick("epsilon1", params.epsilon1, float),
        epsilon2=pick("epsilon2", params.epsilon2, float),
        on_exhausted=pick("onExhausted", params.on_exhausted, str),
        positives_used=pick("positivesUsed", params.positives_used, int),
        margin_above=pick("margin", params.margin_above, float)
        if pmw
        else pick("marginAbove", params.margin_above, float),
        margin_below=pick("margin", params.margin_below, float)
        if pmw
        else pick("marginBelow", params.margin_below, float),
        epsilon3=pick("epsilon3", params.epsilon3, float),
        sensitivity=pick("sensitivity", params.sensitivity, float),
        quota=quota,
    )


def _whole(value: Any, current: Any) -> Any:
    """``value`` as a whole number when it is one (not a bool), else ``current``."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and int(value) == value and value > 0
    return int(value) if ok else current


def choose_dataset(datasets: Sequence[DatasetParams], wanted: str | None) -> DatasetParams:
    """The dataset asked for, or the only one the key sees; a clear error otherwise."""
    names = ", ".join(d.id for d in datasets) or "none"
    if wanted is not None:
        for d in datasets:
            if d.id == wanted:
                return d
        raise LiveAttackError(f"dataset {wanted!r} is not visible to this key (it sees: {names})")
    if len(datasets) != 1:
        what = "no dataset" if not datasets else f"{len(datasets)} datasets ({names})"
        raise LiveAttackError(f"this key sees {what}; choose one with --dataset")
    return datasets[0]


def find_max_batch(*documents: Any) -> int | None:
    """The server's batch limit: a ``maxBatch`` field anywhere, else the ``maxItems`` of the batch form of
    ``requestParameters`` in the OpenAPI document; None if none is published."""

    def walk(node: Any) -> Iterator[int]:
        if isinstance(node, dict):
            value = node.get("maxBatch")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                yield value
            parameters = node.get("requestParameters")
            if isinstance(parameters, dict):
                for option in parameters.get("oneOf", []) or []:
                    if isinstance(option, dict) and option.get("type") == "array":
                        items = option.get("maxItems")
                        if isinstance(items, int) and not isinstance(items, bool) and items >= 1:
                            yield items
            for child in node.values():
                yield from walk(child)
        elif isinstance(node, list):
            for child in node:
                yield from walk(child)

    for document in documents:
        found = next(walk(document), None)
        if found is not None:
            return found
    return None
