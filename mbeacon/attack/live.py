"""The live attack: MBeacon's likelihood-ratio membership attack as a real HTTP client of a running beacon.

The library attack (:mod:`mbeacon.attack.run`) simulates the beacon's answers. This module asks a
running beacon instead, with a researcher's key, exactly as an attacker would:

1. read the dataset's public parameters (``GET /api/datasets``: cohort size N, mechanism, epsilon,
   c, threshold T, variant; ``GET /api/budget``: the same parameters as frozen in the key's own
   account) and build the matching :class:`~mbeacon.attack.defences.Defence`, the attacker's model
   of what an answer means;
2. plan every profile's queries (:func:`~mbeacon.attack.planning.plan_queries`): by default the
   ``pooled`` strategy, leave-one-out over all the profiles given (victims and non-members), so the
   plan carries no label;
3. ask each profile's queries in batch POSTs (``query.requestParameters`` a list of at most the
   server's ``max_batch``), in a shuffled order of profiles so that a budget that runs out part-way
   leaves victims and non-members unanswered alike;
4. turn each answer into an observation (:func:`observation`): for ``none`` the answer itself, for
   SVT² the flag ``answeredFrom == "data"``; refused, exhausted or missing answers carry no
   information (-1);
5. score with :func:`~mbeacon.attack.lrt.observation_probabilities` and
   :func:`~mbeacon.attack.lrt.lrt_scores`; with non-members, AUC and TPR at 1% FPR by number of
   queries (victims count as members: the evaluation setting, where ``--victims`` holds the cohort's
   members).

**Without the public prior.** The planner needs the prior's mass ``prior_pi`` of each range (to
break ties and, for SVT², for ``beta = N * prior_pi``). Without ``--prior`` the attacker stands in
an empirical prior of its own profiles (:func:`stand_in_prior`). That is the cohort's population,
not the general population, so ``beta`` is wrong at the disease's DMPs; but every SVT² answer
reveals the prior's side of the threshold (``answeredFrom = prior`` releases the prior's answer,
``data`` its negation), and :func:`attacker_beta` moves the stand-in ``beta`` onto the side the
beacon revealed. For ``none`` ``beta`` plays no part, and the pooled ranking does not use the prior
except for ties.

HTTP: 429 with ``Retry-After`` (rate limit) is waited out and retried; 429 for an exhausted budget
(an error body whose ``info`` names the dataset's budget, no ``Retry-After``) ends the asking: the
rest is unanswered. 5xx and connection errors are retried a few times, which is safe because the
ledger caches every answer it has committed (the same query again costs nothing and gets the same
answer). The key is sent only in the ``Authorization`` header and is never printed or written.
"""

from __future__ import annotations

import json
import math
import re
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd

from mbeacon import __version__
from mbeacon.attack.defences import Defence
from mbeacon.attack.lrt import lrt_scores, miss_probability, observation_probabilities
from mbeacon.attack.metrics import auc, roc_curve, tpr_at_fpr
from mbeacon.attack.planning import QueryPlan, plan_queries
from mbeacon.privacy.svt2 import svt2_allocate
from mbeacon.store.priors import Prior, prior_from_matrix

#: The Beacon v2 default batch limit, used when the server publishes none.
DEFAULT_MAX_BATCH = 1000
#: Query counts at which the metrics are reported (plus the total asked).
CHECKPOINTS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
#: What happened to one planned query.
SOURCES = ("data", "prior", "refused", "exhausted", "unasked")
#: Longest single wait for a rate limit; a longer ``Retry-After`` is waited in steps.
MAX_WAIT_S = 120.0


class LiveAttackError(RuntimeError):
    """The attack cannot go on; the message is meant for the user (and never holds the key)."""


class BudgetExhausted(LiveAttackError):
    """HTTP 429 because the key's privacy budget on the dataset is spent and the policy refuses."""


class BatchTooLarge(LiveAttackError):
    """The server refused a batch for its size (413, or 400 naming its ``max_batch``)."""

    def __init__(self, message: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit


# --- the profiles --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profiles:
    """The people the attacker holds a methylation profile of, people x probes.

    ``labels``: True for victims (the suspected members), False for the non-members; the probe order
    is the victims file's.
    """

    probe_ids: np.ndarray
    values: np.ndarray
    samples: list[str]
    labels: np.ndarray

    @property
    def people(self) -> int:
        return int(self.values.shape[0])

    @property
    def has_nonmembers(self) -> bool:
        return bool(np.any(~self.labels)) and bool(np.any(self.labels))

    def group(self, i: int) -> str:
        return "victim" if self.labels[i] else "nonmember"


def read_profiles(path: str | Path) -> pd.DataFrame:
    """A probes x samples table of beta values (CSV, or TSV for ``.tsv``/``.txt``; gz ok), probe ids first.

    Why strict: a table with M-values, duplicated probes or no numeric column would plan nonsense
    queries silently.
    """
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    sep = "\t" if suffixes and suffixes[-1] in (".tsv", ".txt") else ","
    try:
        table = pd.read_csv(path, sep=sep, index_col=0)
    except (OSError, ValueError, EOFError, zlib.error) as error:  # EOFError, zlib.error: a damaged gzip
        raise LiveAttackError(f"{path}: cannot read the profiles: {error}") from None
    if table.shape[1] == 0 or table.shape[0] == 0:
        raise LiveAttackError(f"{path}: expected probes x samples (probe ids in the first column)")
    table.index = table.index.astype(str)
    if table.index.has_duplicates:
        raise LiveAttackError(f"{path}: probe {table.index[table.index.duplicated()][0]} appears twice")
    try:
        values = table.to_numpy(dtype=np.float64)
    except ValueError:
        raise LiveAttackError(f"{path}: every column after the probe ids must hold numbers") from None
    bad = np.isfinite(values) & ((values < 0) | (values > 1))
    if bad.any():
        raise LiveAttackError(f"{path}: values outside [0, 1] (M-values? convert with 2^M / (1 + 2^M))")
    return table.astype(np.float64)


def stack_profiles(victims: pd.DataFrame, nonmembers: pd.DataFrame | None = None) -> Profiles:
    """Victims then non-members, on the victims' probes (a probe a non-member lacks is NaN)."""
    frames = [victims] if nonmembers is None else [victims, nonmembers.reindex(victims.index)]
    values = np.vstack([f.T.to_numpy(dtype=np.float64) for f in frames])
    samples = [str(s) for f in frames for s in f.columns]
    labels = np.r_[
        np.ones(victims.shape[1], bool), np.zeros(0 if nonmembers is None else nonmembers.shape[1], bool)
    ]
    return Profiles(victims.index.to_numpy().astype(str), values, samples, labels)


# --- the beacon's public parameters --------------------------------------------------------------


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

    def defence(self) -> Defence:
        """The attacker's model of this dataset's answers (the same model the evaluation uses)."""
        if self.mechanism == "none":
            if self.threshold == 1:
                return Defence("none")
            return Defence("suppression", threshold=self.threshold)
        if self.mechanism == "svt2":
            name = "svt2-redraw" if self.variant == "redraw" else "svt2-single"
            return Defence(name, threshold=self.threshold, epsilon=self.svt_epsilon, c=self.c)
        raise LiveAttackError(f"dataset {self.id!r}: unknown mechanism {self.mechanism!r}")

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

    def public(self) -> dict[str, Any]:
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
            )
        )
    return out


def with_account(params: DatasetParams, budgets: Any) -> DatasetParams:
    """``params`` with the key's own account parameters from ``GET /api/budget``, when it publishes them.

    Why: an account keeps the parameters it was opened with, so for a key that has queried before
    they can differ from the dataset's current policy (``/api/datasets``).
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

    return DatasetParams(
        id=params.id,
        patients=params.patients,
        mechanism=pick("mechanism", params.mechanism, str),
        epsilon=pick("epsilonTotal", params.epsilon, float),
        c=pick("positivesTotal", params.c, int),
        threshold=pick("threshold", params.threshold, int),
        variant=pick("variant", params.variant, str),
        count_epsilon=pick("countEpsilon", params.count_epsilon, float),
        epsilon1=pick("epsilon1", params.epsilon1, float),
        epsilon2=pick("epsilon2", params.epsilon2, float),
        on_exhausted=pick("onExhausted", params.on_exhausted, str),
        positives_used=pick("positivesUsed", params.positives_used, int),
    )


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


def api_base(url: str) -> str:
    """The ``/api`` root from what the user typed: ``http://host:5050``, ``.../api`` or ``.../api/``."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/]+", url):
        raise LiveAttackError(f"--url must start with http:// or https://, got {url[:80]!r}")
    return url if url.endswith("/api") else url + "/api"


# --- answers -------------------------------------------------------------------------------------


def observation(mechanism: str, exists: bool, answered_from: str, exhausted: bool = False) -> int:
    """What one answer tells the attacker: 1, 0, or -1 (no information about the data).

    For ``none`` the answer itself; for SVT² the flag (1: ``answeredFrom = data``), from which the
    attacker's model (:meth:`Defence.p_observe_one`) reasons. Refused answers, and answers from the
    prior because the budget is spent (``budgetExhausted``), say nothing about the cohort.
    """
    if exhausted or answered_from not in ("data", "prior"):
        return -1
    if mechanism == "svt2":
        return 1 if answered_from == "data" else 0
    return int(bool(exists))


def revealed_prior_answer(mechanism: str, exists: bool, answered_from: str) -> int:
    """The prior's answer (``beta >= T``) an SVT² response reveals: 1, 0, or -1 (not revealed).

    ``answeredFrom = prior`` releases the prior's answer; ``data`` releases its negation.
    """
    if mechanism != "svt2":
        return -1
    if answered_from == "prior":
        return int(bool(exists))
    if answered_from == "data":
        return int(not exists)
    return -1


@dataclass(frozen=True)
class BatchAnswers:
    """One batch's answers, in the order asked.

    ``sources``: ``data``, ``prior``, ``refused``, ``exhausted`` (from the prior because the budget is
    spent) or ``unasked`` (no result set came back for the query). ``exhausted``: the account ran out.
    """

    observations: np.ndarray
    prior_answers: np.ndarray
    sources: np.ndarray
    exhausted: bool


def parse_answers(body: Any, size: int, dataset: str, mechanism: str) -> BatchAnswers:
    """A ``beaconResultsetsResponse`` to a batch of ``size`` queries into observations.

    Result sets of other datasets, malformed entries and indices out of range are skipped (those
    queries stay unanswered, -1): a response the client cannot read is never guessed at.
    """
    observations = np.full(size, -1, dtype=np.int8)
    prior_answers = np.full(size, -1, dtype=np.int8)
    sources = np.full(size, "unasked", dtype="<U9")
    exhausted = False
    try:
        result_sets = body["response"]["resultSets"]
    except (KeyError, TypeError):
        result_sets = []
    for item in result_sets if isinstance(result_sets, list) else []:
        if not isinstance(item, dict) or item.get("id") != dataset or not isinstance(item.get("info"), dict):
            continue
        info = item["info"]
        index = info.get("queryIndex", 0 if size == 1 else None)
        exists, source = item.get("exists"), info.get("answeredFrom")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
            continue
        if not isinstance(exists, bool) or source not in ("data", "prior", "refused"):
            continue
        spent = info.get("budgetExhausted") is True
        exhausted = exhausted or spent or source == "refused"
        observations[index] = observation(mechanism, exists, source, spent)
        prior_answers[index] = revealed_prior_answer(mechanism, exists, source)
        sources[index] = "exhausted" if spent and source == "prior" else source
    return BatchAnswers(observations, prior_answers, sources, exhausted)


def _error_body(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def error_message(body: dict, fallback: str = "") -> str:
    """The Beacon error body's ``error.errorMessage`` (safe to show: the server never echoes keys)."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("errorMessage") if isinstance(error, dict) else None
    return str(message)[:300] if message else fallback


def is_budget_exhausted(retry_after: str | None, body: dict) -> bool:
    """Tell a 429 for an exhausted budget from a rate limit.

    The beacon's budget refusal carries the budget in ``info`` (``dataset``, ``positivesUsed``...)
    and no ``Retry-After``; the rate limit carries ``Retry-After`` and no ``info``. A 429 with neither
    is read by its message.
    """
    info = body.get("info")
    if isinstance(info, dict) and ("positivesUsed" in info or "dataset" in info):
        return True
    if retry_after is not None:
        return False
    return "budget" in error_message(body).lower()


def retry_after_seconds(value: str | None, default: float = 5.0, now: float | None = None) -> float:
    """``Retry-After`` (seconds or an HTTP date) in seconds, at least 0.1; ``default`` if unreadable."""
    if value is None:
        return default
    text = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return max(0.1, float(text))
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return default
    return max(0.1, when - (time.time() if now is None else now))


# --- the HTTP client -----------------------------------------------------------------------------


@dataclass
class BeaconClient:
    """A researcher's client of one beacon: JSON GETs and batch POSTs, with retries.

    ``transport`` and ``sleep`` are for tests (``httpx.MockTransport``, a fake clock); ``on_wait`` is
    told why and how long the client waits (a progress bar shows it).
    """

    url: str
    key: str = field(repr=False)
    timeout: float = 60.0
    retries: int = 3
    rate_limit_waits: int = 100
    transport: httpx.BaseTransport | None = None
    sleep: Callable[[float], None] = time.sleep
    on_wait: Callable[[float, str], None] | None = None
    requests: int = 0
    base: str = field(init=False)
    _http: httpx.Client | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.base = api_base(self.url)
        if not self.key or not self.key.strip():
            raise LiveAttackError("no API key: give --key (or set MBEACON_KEY)")
        self._http = httpx.Client(
            base_url=self.base,
            headers={
                "Authorization": f"Bearer {self.key.strip()}",
                "User-Agent": f"mbeacon-attack-live/{__version__}",
                "Accept": "application/json",
            },
            timeout=self.timeout,
            transport=self.transport,
        )

    def __repr__(self) -> str:  # never the key
        return f"BeaconClient({self.base!r})"

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def __enter__(self) -> BeaconClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _clean(self, text: str) -> str:
        """Belt and braces: no message leaves this client with the key in it."""
        key = self.key.strip()
        return text.replace(key, "<key>") if key else text

    def _pause(self, seconds: float, reason: str) -> None:
        if self.on_wait is not None:
            self.on_wait(seconds, reason)
        while seconds > 0:
            step = min(seconds, MAX_WAIT_S)
            self.sleep(step)
            seconds -= step

    def _send(self, method: str, path: str, body: Any = None) -> httpx.Response:
        """One request; rate limits waited out, 5xx and connection errors retried ``retries`` times."""
        failures = waits = 0
        where = f"{method} {self.base}{path}"
        while True:
            try:
                self.requests += 1
                response = self._http.request(method, path, json=body)  # type: ignore[union-attr]
            except httpx.TransportError as error:
                failures += 1
                if failures > self.retries:
                    detail = self._clean(f"{type(error).__name__}: {error}")
                    raise LiveAttackError(f"{where}: no answer after {failures} tries ({detail})") from None
                self._pause(min(30.0, 2.0 ** (failures - 1)), f"connection error, retry {failures}")
                continue
            status = response.status_code
            if status == 429:
                retry_after = response.headers.get("Retry-After")
                payload = _error_body(response)
                if is_budget_exhausted(retry_after, payload):
                    raise BudgetExhausted(self._clean(error_message(payload, "privacy budget exhausted")))
                waits += 1
                if waits > self.rate_limit_waits:
                    raise LiveAttackError(f"{where}: still rate limited after {waits - 1} waits")
                self._pause(retry_after_seconds(retry_after), "rate limited")
                continue
            if status >= 500:
                failures += 1
                if failures > self.retries:
                    message = self._clean(error_message(_error_body(response), response.reason_phrase))
                    raise LiveAttackError(f"{where}: HTTP {status} ({message}) after {failures} tries")
                default = min(30.0, 2.0 ** (failures - 1))
                wait = retry_after_seconds(response.headers.get("Retry-After"), default)
                self._pause(min(wait, MAX_WAIT_S), f"HTTP {status}, retry {failures}")
                continue
            return response

    def _json(self, response: httpx.Response, where: str) -> Any:
        if response.status_code >= 400:
            message = self._clean(error_message(_error_body(response), response.reason_phrase))
            hint = {401: " (check --key)", 403: " (a researcher key and a dataset it may see?)"}
            raise LiveAttackError(
                f"{where}: HTTP {response.status_code}: {message}{hint.get(response.status_code, '')}"
            )
        try:
            return response.json()
        except ValueError:
            raise LiveAttackError(f"{where}: the answer is not JSON (is --url a beacon?)") from None

    def get(self, path: str) -> Any:
        """A JSON GET under ``/api``; 4xx raise :class:`LiveAttackError` with the server's message."""
        return self._json(self._send("GET", path), f"GET {self.base}{path}")

    def get_optional(self, path: str) -> Any:
        """A JSON GET of a document the server may lack: None on any 4xx or a body that is not JSON."""
        response = self._send("GET", path)
        if response.status_code >= 400:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def ask(self, queries: list[dict]) -> Any:
        """POST one batch to ``/api/methylation``; :class:`BatchTooLarge` or :class:`BudgetExhausted`."""
        body = {
            "meta": {"apiVersion": "v2.0.0"},
            "query": {
                "requestParameters": queries,
                "requestedGranularity": "boolean",
                "includeResultsetResponses": "ALL",
            },
        }
        response = self._send("POST", "/methylation", body)
        if response.status_code == 413:
            raise BatchTooLarge(f"a batch of {len(queries)} queries is too large for the server")
        if response.status_code == 400:
            message = error_message(_error_body(response))
            limit = re.search(r"at most (\d+) per request", message)
            if limit:
                raise BatchTooLarge(message, int(limit.group(1)))
        return self._json(response, f"POST {self.base}/methylation")


# --- the attack ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveSettings:
    """The attacker's choices (the CLI's options)."""

    queries: int = 100
    noise_sd: float = 0.02
    z: float = 2.0
    missing: float = 0.005
    strategy: str = "pooled"
    seed: int = 0
    dataset: str | None = None


@dataclass
class LiveAnswers:
    """Every profile's answers, people x planned queries (see :class:`BatchAnswers`)."""

    observations: np.ndarray
    prior_answers: np.ndarray
    sources: np.ndarray
    exhausted: bool = False
    max_batch: int = DEFAULT_MAX_BATCH

    @classmethod
    def empty(cls, shape: tuple[int, int]) -> LiveAnswers:
        return cls(
            np.full(shape, -1, dtype=np.int8),
            np.full(shape, -1, dtype=np.int8),
            np.full(shape, "unasked", dtype="<U9"),
        )

    def counts(self) -> dict[str, int]:
        """How many planned queries ended in each source (``unasked`` includes the unplannable)."""
        return {s: int(np.sum(self.sources == s)) for s in SOURCES}


def stand_in_prior(profiles: np.ndarray, probe_ids: np.ndarray) -> Prior:
    """The attacker's own empirical prior, from people x probes profiles, when it has no public prior.

    An approximation: these people are the cohort's population, not the general population the
    beacon's prior describes (see the module doc for how SVT²'s answers correct ``beta``).
    """
    return prior_from_matrix(probe_ids, np.asarray(profiles, dtype=np.float64).T, name="attacker-pool")


def plan_live(
    profiles: Profiles, prior: Prior, settings: LiveSettings, pool: np.ndarray | None = None
) -> tuple[QueryPlan, np.ndarray]:
    """The plan of every profile and which of its queries can be asked (a known probe and range).

    ``pool`` (people x the profiles' probes): other people of the cohort's population, used only for
    the rarity estimate; None pools the profiles themselves, each left out of its own estimate.
    """
    rows = prior.index(profiles.probe_ids)
    plan = plan_queries(
        profiles.values,
        prior,
        rows,
        queries=settings.queries,
        noise_sd=settings.noise_sd,
        z=settings.z,
        strategy=settings.strategy,
        pool=pool,
    )
    askable = (plan.probes >= 0) & np.isfinite(plan.lo) & np.isfinite(plan.hi) & np.isfinite(plan.prior_pi)
    return plan, askable


def request_parameters(
    plan: QueryPlan, prior: Prior, dataset: str, person: int, columns: np.ndarray
) -> list[dict]:
    """The ``requestParameters`` of one profile's planned queries ``columns``."""
    probes = prior.probe_ids[plan.probes[person, columns]]
    return [
        {"probeId": str(p), "minValue": float(lo), "maxValue": float(hi), "datasetIds": [dataset]}
        for p, lo, hi in zip(probes, plan.lo[person, columns], plan.hi[person, columns], strict=True)
    ]


def _chunks(columns: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, columns.size, size):
        yield columns[start : start + size]


def ask_all(
    client: BeaconClient,
    params: DatasetParams,
    plan: QueryPlan,
    askable: np.ndarray,
    prior: Prior,
    *,
    max_batch: int,
    order: np.ndarray,
    on_progress: Callable[[int], None] | None = None,
) -> LiveAnswers:
    """Ask every profile's queries, one profile after another in ``order``, in batches of ``max_batch``.

    Stops asking when the account is exhausted (a refused answer, an answer from the prior flagged
    ``budgetExhausted``, or a 429 for the budget): later answers could say nothing about the data.
    A batch the server finds too large is split and the smaller size kept.
    """
    answers = LiveAnswers.empty(plan.shape)
    batch = max(1, int(max_batch))
    for person in order:
        columns = np.flatnonzero(askable[person])
        pending = list(_chunks(columns, batch))
        while pending and not answers.exhausted:
            chunk = pending.pop(0)
            try:
                body = client.ask(request_parameters(plan, prior, params.id, int(person), chunk))
            except BatchTooLarge as error:
                if chunk.size == 1:
                    raise LiveAttackError(f"the server refuses even one query per request: {error}") from None
                batch = min(error.limit or chunk.size // 2, chunk.size - 1)
                pending = [*_chunks(chunk, batch), *pending]
                continue
            except BudgetExhausted:
                answers.exhausted = True
                break
            got = parse_answers(body, chunk.size, params.id, params.mechanism)
            answers.observations[person, chunk] = got.observations
            answers.prior_answers[person, chunk] = got.prior_answers
            answers.sources[person, chunk] = got.sources
            answers.exhausted = answers.exhausted or got.exhausted
        if on_progress is not None:
            on_progress(int(columns.size))
    answers.max_batch = batch
    return answers


def attacker_beta(
    plan: QueryPlan, patients: int, threshold: int, prior_answers: np.ndarray, *, prior_is_public: bool
) -> np.ndarray:
    """``beta = N * prior_pi`` as the attacker models it, people x queries.

    With the public prior that is the beacon's own ``beta``. With the stand-in prior, each answer
    that revealed the prior's side of the threshold (:func:`revealed_prior_answer`) moves ``beta``
    onto that side: up to ``T``, or down to ``T - 1/2``. SVT²'s noise is integer, so every ``beta`` in
    ``(T - 1, T)`` acts alike; ``T - 1/2`` stays clear of the model's rounding tolerance at ``T``.
    """
    beta = patients * np.nan_to_num(plan.prior_pi, nan=0.0)
    if prior_is_public:
        return beta
    beta = np.where(prior_answers == 1, np.maximum(beta, threshold), beta)
    return np.where(prior_answers == 0, np.minimum(beta, threshold - 0.5), beta)


def prior_agreement(beta: np.ndarray, threshold: int, prior_answers: np.ndarray) -> float | None:
    """Share of revealed prior answers that ``beta >= T`` predicts (None: none revealed).

    A diagnostic of ``--prior``: well below 1, the prior given is not the one the beacon uses.
    """
    revealed = prior_answers >= 0
    if not revealed.any():
        return None
    return float(np.mean((beta[revealed] >= threshold) == (prior_answers[revealed] == 1)))


def score(
    defence: Defence, plan: QueryPlan, beta: np.ndarray, patients: int, miss: float, observations: np.ndarray
) -> np.ndarray:
    """Cumulative log-likelihood ratios, people x queries (column k: after the first k+1 planned queries)."""
    known = np.isfinite(plan.pi) & np.isfinite(beta)
    pi = np.where(known, plan.pi, 0.5)  # queries never asked: any finite value, they add nothing
    p_member, p_non = observation_probabilities(defence, pi, np.where(known, beta, 0.0), patients, miss)
    return lrt_scores(np.where(known, observations, -1), p_member, p_non)


def checkpoints(queries: int) -> list[int]:
    """The query counts the metrics are reported at."""
    return sorted({k for k in CHECKPOINTS if k < queries} | {queries})


def metrics_by_queries(scores: np.ndarray, labels: np.ndarray, counts: Sequence[int]) -> list[dict]:
    """AUC and TPR at 1% FPR after each of ``counts`` queries (victims are the positives)."""
    rows = []
    for k in counts:
        at_k = scores[:, k - 1]
        rows.append(
            {"queries": int(k), "auc": auc(at_k, labels), "tpr_at_1pct_fpr": tpr_at_fpr(at_k, labels, 0.01)}
        )
    return rows


def empirical_p_values(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """For each profile, ``(1 + non-members scoring at least as high) / (1 + non-members)``.

    What a real attacker reports: how often a person known to be outside the cohort looks this much
    like a member. NaN without non-members.
    """
    non = np.sort(scores[~labels])
    if non.size == 0:
        return np.full(scores.shape, np.nan)
    at_least = non.size - np.searchsorted(non, scores, side="left")
    return (1.0 + at_least) / (1.0 + non.size)


@dataclass
class LiveResult:
    """Everything one live attack produced."""

    url: str
    params: DatasetParams
    defence: Defence
    settings: LiveSettings
    profiles: Profiles
    plan: QueryPlan
    askable: np.ndarray
    answers: LiveAnswers
    scores: np.ndarray
    prior_name: str
    prior_agreement: float | None
    requests: int
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def queries(self) -> int:
        return int(self.scores.shape[1])

    def by_queries(self) -> list[dict]:
        if not self.profiles.has_nonmembers:
            return []
        return metrics_by_queries(self.scores, self.profiles.labels, checkpoints(self.queries))

    def score_table(self) -> pd.DataFrame:
        """One row per profile: final score, p-value against the non-members, and what was answered."""
        src = self.answers.sources
        obs = self.answers.observations
        final = self.scores[:, -1] if self.queries else np.zeros(self.profiles.people)
        return pd.DataFrame(
            {
                "sample": self.profiles.samples,
                "group": [self.profiles.group(i) for i in range(self.profiles.people)],
                "score": final,
                "p_value": empirical_p_values(final, self.profiles.labels),
                "planned": self.askable.sum(axis=1),
                "answered": (obs >= 0).sum(axis=1),
                "positive": (obs == 1).sum(axis=1),
                "refused": ((src == "refused") | (src == "exhausted")).sum(axis=1),
                "unasked": ((src == "unasked") & self.askable).sum(axis=1),
            }
        )

    def summary(self) -> dict[str, Any]:
        """The metrics file's content (JSON-ready)."""
        labels = self.profiles.labels
        out: dict[str, Any] = {
            "url": self.url,
            "dataset": self.params.public(),
            "defence": self.defence.label,
            "profiles": {"victims": int(labels.sum()), "nonmembers": int((~labels).sum())},
            "queries_per_profile": self.queries,
            "strategy": self.settings.strategy,
            "noise_sd": self.settings.noise_sd,
            "z": self.settings.z,
            "missing": self.settings.missing,
            "prior": self.prior_name,
            "prior_agreement": self.prior_agreement,
            "seed": self.settings.seed,
            "answers": {**self.answers.counts(), "planned": int(self.askable.sum())},
            "budget_exhausted": self.answers.exhausted,
            "positives_used_before": self.params.positives_used,
            "max_batch": self.answers.max_batch,
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
            "by_queries": self.by_queries(),
            "warnings": self.warnings,
        }
        if self.profiles.has_nonmembers and self.queries:
            fpr, tpr = roc_curve(self.scores[:, -1], labels)
            out["roc"] = {"queries": self.queries, "fpr": fpr.tolist(), "tpr": tpr.tolist()}
        return out


def read_parameters(client: BeaconClient, dataset: str | None) -> tuple[DatasetParams, int]:
    """The chosen dataset's public parameters (the key's account's, if open) and the server's max batch."""
    params = choose_dataset(parse_datasets(client.get("/datasets")), dataset)
    params = with_account(params, client.get_optional("/budget"))
    documents = [client.get_optional(p) for p in ("/configuration", "/info")]
    limit = find_max_batch(*documents)
    if limit is None:
        limit = find_max_batch(client.get_optional("/openapi.json"))
    return params, limit or DEFAULT_MAX_BATCH


def run_live_attack(
    client: BeaconClient,
    profiles: Profiles,
    settings: LiveSettings,
    *,
    prior: Prior | None = None,
    pool: np.ndarray | None = None,
    on_start: Callable[[DatasetParams, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> LiveResult:
    """The whole live attack: parameters, plan, questions, scores. ``on_start`` gets the dataset and the
    number of queries to ask (to size a progress bar); ``on_progress`` the queries of each profile done."""
    started = time.monotonic()
    if profiles.people < 2 and pool is None:
        raise LiveAttackError("the pooled plan needs two or more profiles (or --pool)")
    params, max_batch = read_parameters(client, settings.dataset)
    defence = params.defence()
    warnings = []
    if not params.allocation_matches():
        warnings.append(
            "the published eps1/eps2 are not svt2_allocate's: the attacker's SVT² model is approximate"
        )
    if params.positives_used:
        warnings.append(f"this key had already spent {params.positives_used} of {params.c} positives")
    public = prior is not None
    if prior is None:
        prior = stand_in_prior(profiles.values if pool is None else pool, profiles.probe_ids)
    plan, askable = plan_live(profiles, prior, settings, pool)
    if on_start is not None:
        on_start(params, int(askable.sum()))
    order = np.random.default_rng(settings.seed).permutation(profiles.people)  # noise-ok: query order only
    answers = ask_all(
        client, params, plan, askable, prior, max_batch=max_batch, order=order, on_progress=on_progress
    )
    beta = attacker_beta(
        plan, params.patients, params.threshold, answers.prior_answers, prior_is_public=public
    )
    scores = score(
        defence,
        plan,
        beta,
        params.patients,
        miss_probability(settings.z, settings.missing),
        answers.observations,
    )
    agreement = prior_agreement(beta, params.threshold, answers.prior_answers) if public else None
    if agreement is not None and agreement < 0.9:
        warnings.append(f"only {agreement:.0%} of the beacon's prior answers agree with the prior given")
    if answers.exhausted:
        warnings.append("the key's privacy budget ran out: the remaining queries were not answered")
    return LiveResult(
        url=client.base,
        params=params,
        defence=defence,
        settings=settings,
        profiles=profiles,
        plan=plan,
        askable=askable,
        answers=answers,
        scores=scores,
        prior_name=prior.name if public else "stand-in: the attacker's own profiles",
        prior_agreement=agreement,
        requests=client.requests,
        seconds=time.monotonic() - started,
        warnings=warnings,
    )


# --- output --------------------------------------------------------------------------------------


def plot_roc(result: LiveResult, path: Path) -> Path:
    """ROC curves at a few query counts, and AUC / TPR at 1% FPR against the number of queries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    labels = result.profiles.labels
    rows = result.by_queries()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8), constrained_layout=True)
    shown = sorted({k for k in (1, 10, result.queries) if k <= result.queries})
    for k in shown:
        fpr, tpr = roc_curve(result.scores[:, k - 1], labels)
        area = auc(result.scores[:, k - 1], labels)
        left.plot(fpr, tpr, lw=2, label=f"{k} {'query' if k == 1 else 'queries'} (AUC {area:.3f})")
    left.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="chance")
    left.set(
        xlabel="false-positive rate (non-members flagged)",
        ylabel="true-positive rate (victims caught)",
        xlim=(0, 1),
        ylim=(0, 1.01),
        title=f"ROC ({int(labels.sum())} victims, {int((~labels).sum())} non-members)",
    )
    left.legend(loc="lower right")
    left.grid(alpha=0.3)
    ks = [r["queries"] for r in rows]
    right.plot(ks, [r["auc"] for r in rows], marker="o", lw=2, label="AUC")
    right.plot(ks, [r["tpr_at_1pct_fpr"] for r in rows], marker="s", lw=2, label="TPR at 1% FPR")
    right.axhline(0.5, ls="--", color="grey", lw=1, label="AUC of a coin toss")
    if max(ks) > 1:
        right.set_xscale("log")
        right.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    right.set(
        ylim=(0, 1.02), xlabel="queries per profile", ylabel="attack success", title="By number of queries"
    )
    right.legend(loc="lower right")
    right.grid(alpha=0.3, which="both")
    counts = result.answers.counts()
    unasked = int(((result.answers.sources == "unasked") & result.askable).sum())
    fig.suptitle(
        f"Live attack on {result.params.id} ({result.defence.label}, N = {result.params.patients})\n"
        f"answers: {counts['data']} from the data, {counts['prior']} from the prior, "
        f"{counts['refused'] + counts['exhausted']} refused, {unasked} not asked",
        fontsize=11,
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_outputs(result: LiveResult, out_dir: Path) -> dict[str, Path]:
    """``scores.csv``, ``metrics.json`` and, with non-members, ``roc.png`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"scores": out_dir / "scores.csv", "metrics": out_dir / "metrics.json"}
    result.score_table().to_csv(paths["scores"], index=False, float_format="%.6g")
    paths["metrics"].write_text(json.dumps(result.summary(), indent=2) + "\n")
    if result.profiles.has_nonmembers and result.queries:
        paths["roc"] = plot_roc(result, out_dir / "roc.png")
    return paths
