"""The methylation query: ``(probe, [lo, hi], datasets)`` parsed from a GET query string or the
Beacon v2 POST body, validated with pydantic so that every refusal names the offending field.

POST body (the Beacon v2 request body; ``requestParameters`` may be a list: a batch answered in
order)::

    {"meta": {"apiVersion": "v2.0.0"},
     "query": {"requestParameters": {"probeId": "cg00042144", "minValue": 0.6, "maxValue": 0.8,
                                     "datasetIds": ["demo-cohort"]},
               "requestedGranularity": "boolean", "includeResultsetResponses": "HIT"}}

``minValue`` only means ``[minValue, 1]``, ``maxValue`` only ``[0, maxValue]``, neither ``[0, 1]``.
A probe is named by ``probeId``; or the probes of a region by ``referenceName`` + ``start`` (+ ``end``:
0-based, half-open, as in Beacon v2) or of a gene by ``geneId``, resolved through the dataset's probe
annotation (:mod:`mbeacon.beacon.regions`, whose positions are 1-based as Illumina's MAPINFO), each
probe then answered as one query.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from mbeacon.beacon.wire import (
    API_VERSION,
    ASSEMBLY_PATTERN,
    BETA_MAX,
    BETA_MIN,
    DATASET_PATTERN,
    DEFAULT_GRANULARITY,
    DEFAULT_INCLUDE,
    DEFAULT_LIMIT,
    DEFAULT_SKIP,
    GENE_PATTERN,
    MAX_DATASET_IDS,
    MAX_LIMIT,
    MAX_SKIP,
    MAX_START,
    NO_FILTERS,
    PROBE_PATTERN,
    REFERENCE_PATTERN,
    Granularity,
    IncludeResultsets,
)
from mbeacon.pydantic_errors import describe


class QueryError(ValueError):
    """A request that cannot be answered as sent; ``str()`` is safe to show the caller."""


_FLOAT32 = struct.Struct("<f")
_canonical: dict[float, float] = {}
_canonical_get = _canonical.get  # the fast path's lookup, without a call of canonical_bound
_CANONICAL_CACHE = 4096


def canonical_bound(value: float) -> float:
    """The one value that stands for every spelling of a range bound ``value`` (already in [0, 1]).

    The counts compare float32 beta values with the bounds rounded to float32, so two bounds with the
    same float32 are the same question; the canonical bound is the shortest decimal that rounds to
    that float32 (``0.6`` for 0.6, ``6e-1`` and 0.6 + 1e-11; the exact float32 in the rare case where
    that decimal, read as a float64, would round elsewhere), with -0 as 0 and an int as a float. It
    is what the count, the prior, the cache key, the audit log and the echo all use, so a question
    gets one answer however it is spelled. Idempotent: the canonical bound of a canonical bound is
    itself. A bounded cache keeps the formatting off the hot path for the bounds callers repeat.
    """
    hit = _canonical.get(value)  # -0.0 == 0.0 and 1 == 1.0: they share their entries
    if hit is not None:
        return hit
    pack, unpack = _FLOAT32.pack, _FLOAT32.unpack
    single = unpack(pack(value))[0] + 0.0
    result = single
    for digits in range(1, 10):  # nine significant digits always identify a float32
        shortest = float(f"{single:.{digits}g}") + 0.0
        if unpack(pack(shortest))[0] == single:
            result = shortest
            break
    if len(_canonical) < _CANONICAL_CACHE:
        _canonical[value] = result
    return result


def canonical_datasets(ids: list[str] | None) -> tuple[str, ...] | None:
    """``datasetIds`` as one value for every spelling: sorted, without repeats; None (every dataset
    the caller may query) when omitted or empty. Answers are per dataset, so the order never mattered."""
    return tuple(sorted(set(ids))) if ids else None


# The position and the dataset ids are checked by the validators below (whose messages say what a
# caller got wrong); these annotations only give the document the same bounds and pattern.
_POSITION = {"type": "integer", "minimum": 0, "maximum": MAX_START, "description": "0-based position."}
Position = Annotated[int, WithJsonSchema(_POSITION)]
OnePosition = Annotated[
    list[int], WithJsonSchema({"type": "array", "items": _POSITION, "minItems": 1, "maxItems": 1})
]
DatasetId = Annotated[str, WithJsonSchema({"type": "string", "pattern": DATASET_PATTERN})]


class RequestParameters(BaseModel):
    """One methylation query: is there a dataset with at least T patients whose beta value at the probe
    lies in [minValue, maxValue]? Name the probe by `probeId`; or name a region by `referenceName` +
    `start` (+ `end`) or a gene by `geneId`, resolved through the dataset's probe annotation: each probe
    of the region or gene is then answered, and charged, as one query (one result set per probe). Give
    one of the three. `assemblyId`, with a region or gene, must match the annotation's genome build.
    minValue must not exceed maxValue. `datasetIds` defaults to every dataset the caller may query."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": [
                {
                    "title": "by probe id",
                    "required": ["probeId"],
                    "properties": {
                        "probeId": {"type": "string"},
                        "referenceName": {"type": "null"},
                        "start": {"type": "null"},
                        "end": {"type": "null"},
                        "geneId": {"type": "null"},
                        "assemblyId": {"type": "null"},
                    },
                },
                {
                    "title": "by position or region",
                    "required": ["referenceName", "start"],
                    "properties": {
                        "probeId": {"type": "null"},
                        "referenceName": {"type": "string"},
                        "start": {"not": {"type": "null"}},
                        "geneId": {"type": "null"},
                    },
                },
                {
                    "title": "by gene",
                    "required": ["geneId"],
                    "properties": {
                        "probeId": {"type": "null"},
                        "referenceName": {"type": "null"},
                        "start": {"type": "null"},
                        "end": {"type": "null"},
                        "geneId": {"type": "string"},
                    },
                },
            ],
            "examples": [
                {"probeId": "cg00042144", "minValue": 0.6, "maxValue": 0.8, "datasetIds": ["demo-cohort"]}
            ],
        },
    )

    probeId: str | None = Field(
        None,
        pattern=PROBE_PATTERN,
        description="The CpG probe, by any Illumina array's id: cg00000029 (450K, EPIC) or "
        "cg00000029_TC21 (EPIC v2) name one CpG and are one question.",
    )
    referenceName: str | None = Field(
        None,
        pattern=REFERENCE_PATTERN,
        description="Chromosome of the CpG (referenceName + start instead of probeId).",
    )
    start: Position | OnePosition | None = Field(
        None, description="0-based position of the CpG (a one-item array is accepted too)."
    )
    end: Position | OnePosition | None = Field(
        None,
        description="With referenceName + start: the end of a 0-based half-open region [start, end) "
        "(a one-item array is accepted too); without it, start names one base.",
    )
    geneId: str | None = Field(
        None,
        pattern=GENE_PATTERN,
        description="A gene symbol (HGNC, as in Illumina's UCSC_RefGene_Name; any letter case): the "
        "probes annotated to the gene.",
    )
    assemblyId: str | None = Field(
        None,
        pattern=ASSEMBLY_PATTERN,
        description="Genome build of referenceName/start/end or geneId (GRCh37 or hg19, GRCh38 or hg38); "
        "must match the dataset's annotation.",
    )
    minValue: float | None = Field(
        None,
        ge=BETA_MIN,
        le=BETA_MAX,
        allow_inf_nan=False,
        description=f"Lower bound of the beta-value range (default {BETA_MIN:g}).",
    )
    maxValue: float | None = Field(
        None,
        ge=BETA_MIN,
        le=BETA_MAX,
        allow_inf_nan=False,
        description=f"Upper bound of the beta-value range (default {BETA_MAX:g}).",
    )
    datasetIds: list[DatasetId] | None = Field(
        None,
        max_length=MAX_DATASET_IDS,
        description="Datasets to ask (default: every dataset available to the caller).",
    )

    @field_validator("start", "end")
    @classmethod
    def _one_start(cls, value: int | list[int] | None, info: ValidationInfo) -> int | None:
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError(f"give one {info.field_name} position (bracket ranges are not supported)")
            value = value[0]
        if value is not None and not 0 <= value <= MAX_START:
            raise ValueError(f"{info.field_name} must be a 0-based position >= 0")
        return value

    @field_validator("minValue", "maxValue")
    @classmethod
    def _canonical_bound(cls, value: float | None) -> float | None:
        # after the range check: a bound is refused or kept as the caller wrote it, then made canonical
        return None if value is None else canonical_bound(value)

    @field_validator("datasetIds")
    @classmethod
    def _check_ids(cls, value: list[str] | None) -> list[str] | None:
        for item in value or []:
            if not re.fullmatch(DATASET_PATTERN, item):
                raise ValueError(f"not a dataset id: {item[:70]!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RequestParameters:
        by_position = self.referenceName is not None or self.start is not None or self.end is not None
        ways = (self.probeId is not None) + by_position + (self.geneId is not None)
        if ways == 0:
            raise ValueError("give probeId, referenceName and start, or geneId")
        if ways > 1:
            given = [name for name, on in (("probeId", self.probeId is not None),
                                           ("referenceName + start", by_position),
                                           ("geneId", self.geneId is not None)) if on]  # fmt: skip
            every = "give one of probeId, referenceName + start and geneId, not all three"
            raise ValueError(f"give {' or '.join(given)}, not both" if ways == 2 else every)
        if by_position and (self.referenceName is None or self.start is None):
            raise ValueError("referenceName and start go together (end is optional)")
        if self.end is not None and self.start is not None and _first(self.end) <= _first(self.start):
            raise ValueError(f"end {_first(self.end)} must be greater than start {_first(self.start)} "
                             "(the region [start, end) is 0-based and half-open)")  # fmt: skip
        if self.assemblyId is not None and self.probeId is not None:
            raise ValueError("assemblyId goes with referenceName + start or geneId, not with probeId")
        if self.minValue is not None and self.maxValue is not None and self.minValue > self.maxValue:
            raise ValueError(f"minValue {self.minValue} is greater than maxValue {self.maxValue}")
        return self


def _first(value: int | list[int]) -> int:
    return value[0] if isinstance(value, list) else value


PARAMETER_NAMES = frozenset(RequestParameters.model_fields)
"""The names a query's parameters may have (in a POST item and in a GET query string)."""

RequestedGranularity = Annotated[
    Granularity,
    Field(description="`count` is honoured only for CONTROLLED callers on datasets with noisy counts."),
]
IncludedResultsets = Annotated[IncludeResultsets, Field(description="Which result sets to list.")]
ApiVersion = Annotated[str, Field(description="Beacon API version the client expects (echoed).")]


class Pagination(BaseModel):
    """Beacon pagination: validated and echoed; it pages records, and MBeacon returns none (a result
    set's `results` is always empty), so it changes no answer. Page tokens are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    skip: int = Field(DEFAULT_SKIP, ge=0, le=MAX_SKIP, description="Pages to skip.")
    limit: int = Field(DEFAULT_LIMIT, ge=0, le=MAX_LIMIT, description="Page size (0: all).")


NoFilters = Annotated[
    list[Any],
    WithJsonSchema(
        {"type": "array", "maxItems": 0, "description": "Beacon filters: methylation queries take none "
         "(see /filtering_terms for what can be asked), so only an empty list is accepted."}
    ),
]  # fmt: skip


class BeaconQuery(BaseModel):
    """The `query` of a Beacon request body; other Beacon query fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow", strict=True)

    filters: NoFilters = Field(default_factory=list)
    pagination: Pagination = Pagination()

    @field_validator("filters")
    @classmethod
    def _no_filters(cls, value: list[Any]) -> list[Any]:
        # refused, not ignored: a filter silently dropped would answer a question the caller did not ask
        if value:
            raise ValueError(NO_FILTERS)
        return value

    # Validated item by item by parse_body; its document schema (one query or a batch of up to the
    # configured max_batch) is set where the configuration is known. Absent: an unfiltered request.
    requestParameters: Any = None
    requestedGranularity: RequestedGranularity = DEFAULT_GRANULARITY
    includeResultsetResponses: IncludedResultsets = DEFAULT_INCLUDE
    testMode: bool = Field(False, description="Beacon test mode: virtual answers, from the prior, free.")


class RequestMeta(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    apiVersion: ApiVersion = API_VERSION
    requestedSchemas: list[dict] = Field(default_factory=list)


class BeaconRequestBody(BaseModel):
    """The Beacon v2 request body (`meta` is optional here)."""

    model_config = ConfigDict(extra="allow")

    meta: RequestMeta = RequestMeta()
    query: BeaconQuery = BeaconQuery()


@dataclass(frozen=True)
class MethylationQuery:
    """One validated query in its canonical form; ``probe`` is None when it is given by position (or
    region: ``end``) or by gene (``gene``), which :mod:`mbeacon.beacon.regions` expands into probes.

    Every spelling of one question parses to the same value: the bounds canonical
    (:func:`canonical_bound`; omitted bounds as 0 and 1), the datasets canonical
    (:func:`canonical_datasets`), GET and POST alike; the fast path and the model agree on it.
    """

    probe: str | None
    chromosome: str | None
    start: int | None
    lo: float
    hi: float
    datasets: tuple[str, ...] | None
    end: int | None = None
    gene: str | None = None
    assembly: str | None = None

    @classmethod
    def from_parameters(cls, p: RequestParameters) -> MethylationQuery:
        """The canonical query of validated parameters (the model has made the bounds canonical)."""
        lo = BETA_MIN if p.minValue is None else p.minValue
        hi = BETA_MAX if p.maxValue is None else p.maxValue
        start = p.start if isinstance(p.start, int) or p.start is None else p.start[0]
        end = p.end if isinstance(p.end, int) or p.end is None else p.end[0]
        return cls(p.probeId, p.referenceName, start, lo, hi, canonical_datasets(p.datasetIds), end,
                   p.geneId, p.assemblyId)  # fmt: skip

    @property
    def probe_id(self) -> str:
        """The probe of a query by probe, as the counting steps read it (after
        :func:`mbeacon.beacon.regions.expand` every query is one); a region or gene query has none."""
        if self.probe is None:
            raise ValueError("a region or gene query is counted through the probes it expands to")
        return self.probe

    def describe(self) -> dict:
        """The query in its canonical form (for echoes and the audit log)."""
        if self.probe is not None:
            where: dict = {"probeId": self.probe}
        elif self.gene is not None:
            where = {"geneId": self.gene}
        else:
            where = {"referenceName": self.chromosome, "start": self.start}
            if self.end is not None:
                where["end"] = self.end
        if self.assembly is not None:
            where["assemblyId"] = self.assembly
        return {**where, "minValue": self.lo, "maxValue": self.hi}


@dataclass(frozen=True)
class ParsedRequest:
    queries: list[MethylationQuery]
    granularity: str
    include: str
    batch: bool
    api_version: str = API_VERSION
    test_mode: bool = False
    skip: int = DEFAULT_SKIP
    limit: int = DEFAULT_LIMIT
    requested_schemas: tuple[dict, ...] = ()  # ``meta.requestedSchemas``, echoed
    unfiltered: bool = False  # nothing asked (no queries): answered from public metadata
    datasets: tuple[str, ...] | None = None  # the datasets an unfiltered request names


def _parameters(raw: Any, where: str) -> MethylationQuery:
    """``raw`` validated by the pydantic model; QueryError names the offending field under ``where``."""
    try:
        return MethylationQuery.from_parameters(RequestParameters.model_validate(raw))
    except ValidationError as error:
        raise QueryError(describe(error, prefix=where)) from None


# The model's patterns, matched as pydantic matches them (to the end of the text, no newline before it).
_probe_id = re.compile(PROBE_PATTERN.removeprefix("^").removesuffix("$")).fullmatch
_reference_name = re.compile(REFERENCE_PATTERN.removeprefix("^").removesuffix("$")).fullmatch
_dataset_id = re.compile(DATASET_PATTERN.removeprefix("^").removesuffix("$")).fullmatch
_new = object.__new__


def _plain(raw: Any) -> MethylationQuery | None:
    """The query of ``raw`` when it is plainly valid, else None: the fast path of a batch's items.

    Accepts only what ``RequestParameters`` accepts (exact JSON types, the same patterns, bounds and
    rules) and returns what ``_parameters`` returns for it; anything else, every error included, is
    left to the model, whose messages name the field. ``tests/test_query_fastpath.py`` checks both.
    """
    if type(raw) is not dict or not raw.keys() <= PARAMETER_NAMES:
        return None
    get = raw.get
    if get("end") is not None or get("geneId") is not None or get("assemblyId") is not None:
        return None  # regions and genes: left to the model
    probe = get("probeId")
    chromosome = get("referenceName")
    start = get("start")
    if probe is not None:
        if type(probe) is not str or chromosome is not None or start is not None or not _probe_id(probe):
            return None
    else:
        if type(chromosome) is not str or not _reference_name(chromosome):
            return None
        if type(start) is list and len(start) == 1:
            start = start[0]
        if type(start) is not int or not 0 <= start <= MAX_START:
            return None
    lo = get("minValue")
    if lo is None:
        lo = BETA_MIN
    # NaN and infinities fail the comparisons.
    elif (type(lo) is float or type(lo) is int) and BETA_MIN <= lo <= BETA_MAX:
        lo = _canonical_get(lo) or canonical_bound(lo)  # a cached 0.0 is falsy: computed again, the same
    else:
        return None
    hi = get("maxValue")
    if hi is None:
        hi = BETA_MAX
    elif (type(hi) is float or type(hi) is int) and BETA_MIN <= hi <= BETA_MAX:
        hi = _canonical_get(hi) or canonical_bound(hi)
    else:
        return None
    if lo > hi:  # compared canonical, as the model compares them
        return None
    ids = get("datasetIds")
    if ids is not None:
        if type(ids) is not list or len(ids) > MAX_DATASET_IDS:
            return None
        for item in ids:
            if type(item) is not str or not _dataset_id(item):
                return None
        ids = canonical_datasets(ids)
    # MethylationQuery(...) without the frozen dataclass's per-field object.__setattr__ (a third of
    # the cost of an item); the test checks that this sets every field, and only the fields.
    query = _new(MethylationQuery)
    fields = query.__dict__
    fields["probe"] = probe
    fields["chromosome"] = chromosome
    fields["start"] = start
    fields["lo"] = lo
    fields["hi"] = hi
    fields["datasets"] = ids
    fields["end"] = None
    fields["gene"] = None
    fields["assembly"] = None
    return query


def parse_body(body: Any, *, max_batch: int) -> ParsedRequest:
    """A POST body (already decoded JSON) into queries; QueryError names the bad field."""
    if not isinstance(body, dict):
        raise QueryError("request body: expected a JSON object with 'meta' and 'query'")
    try:
        parsed = BeaconRequestBody.model_validate(body)
    except ValidationError as error:
        raise QueryError(describe(error, prefix="body")) from None
    raw = parsed.query.requestParameters
    where = "query.requestParameters"
    if isinstance(raw, list):
        if not raw:
            raise QueryError(f"{where}: the batch is empty")
        if len(raw) > max_batch:
            raise QueryError(f"{where}: {len(raw)} queries; at most {max_batch} per request")
        queries = [_plain(item) or _parameters(item, f"{where}[{i}]") for i, item in enumerate(raw)]
    elif isinstance(raw, dict):
        queries = [_plain(raw) or _parameters(raw, where)]
    else:
        raise QueryError(f"{where}: expected an object (one query) or a list of objects (a batch)")
    return ParsedRequest(
        queries,
        parsed.query.requestedGranularity,
        parsed.query.includeResultsetResponses,
        isinstance(raw, list),
        parsed.meta.apiVersion,
        parsed.query.testMode,
        parsed.query.pagination.skip,
        parsed.query.pagination.limit,
    )


class GetOptions(BaseModel):
    """The options of a GET request besides the query (the names of the POST body's)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    apiVersion: ApiVersion = API_VERSION
    requestedGranularity: RequestedGranularity = DEFAULT_GRANULARITY
    includeResultsetResponses: IncludedResultsets = DEFAULT_INCLUDE


_GET_FIELDS = PARAMETER_NAMES | set(GetOptions.model_fields) | {"testMode", "skip", "limit", "filters"}


def parse_args(args: Mapping[str, str]) -> ParsedRequest:
    """GET query parameters (the same names as ``requestParameters``) into one query.

    Validated as directly as the POST body (one pydantic model for the query, one for the options),
    without building a body first: a single query's parsing is a visible part of its cost.
    """
    args = dict(args.items())  # the first value of each name, as MultiDict.get gives, in a plain dict
    unknown = sorted(set(args) - _GET_FIELDS)
    if unknown:
        raise QueryError(f"unknown query parameter {unknown[0]!r}; allowed: {', '.join(sorted(_GET_FIELDS))}")
    values: dict[str, Any] = {k: v for k, v in args.items() if k in PARAMETER_NAMES}
    if "datasetIds" in values:
        values["datasetIds"] = [v for v in values["datasetIds"].split(",") if v]
    for name in ("start", "end"):
        if name in values:
            if not re.fullmatch(r"[0-9]{1,10}", values[name]):
                raise QueryError(f"{name}: not a 0-based position: {values[name][:20]!r}")
            values[name] = int(values[name])
    if [term for term in args.get("filters", "").split(",") if term]:
        raise QueryError(f"filters: {NO_FILTERS}")
    skip = _page_number("skip", args.get("skip"), DEFAULT_SKIP, MAX_SKIP)
    limit = _page_number("limit", args.get("limit"), DEFAULT_LIMIT, MAX_LIMIT)
    flag = args.get("testMode", "false").lower()
    if flag not in ("true", "false", "1", "0"):
        raise QueryError("testMode: write true or false")
    for name in ("minValue", "maxValue"):
        if name in values:
            values[name] = _unit_number(name, values[name])
    try:
        options = GetOptions.model_validate(args)
    except ValidationError as error:
        raise QueryError(describe(error, prefix="query")) from None
    return ParsedRequest(
        [_plain(values) or _parameters(values, "query.requestParameters")],
        options.requestedGranularity,
        options.includeResultsetResponses,
        False,
        options.apiVersion,
        flag in ("true", "1"),
        skip,
        limit,
    )


def _page_number(name: str, text: str | None, default: int, maximum: int) -> int:
    """A GET ``skip`` or ``limit``: decimal digits, at most ``maximum`` (``default`` when absent)."""
    if text is None:
        return default
    if not re.fullmatch(r"[0-9]{1,7}", text) or int(text) > maximum:
        raise QueryError(f"{name}: must be an integer from 0 to {maximum}, not {text[:20]!r}")
    return int(text)


def _unit_number(name: str, text: str) -> float:
    """A GET bound as a finite number (the range check itself is the model's)."""
    try:
        number = float(text)
    except ValueError:
        raise QueryError(f"{name}: not a number: {text[:40]!r}") from None
    if not math.isfinite(number):
        raise QueryError(f"{name}: must be a finite number in [0, 1]")
    return number
