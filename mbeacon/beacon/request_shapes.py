"""The request shapes other Beacon v2 implementations send, read into the one shape MBeacon parses.

A Beacon Network forwards one request to every member beacon, in the spelling of whichever software
runs the network. Each spelling of "ask these datasets" is honoured, or refused with a 400 that names
it; none is ignored (a dataset restriction silently dropped would run the query on every dataset the
caller may query):

- ``query.requestParameters.datasetIds`` (MBeacon's own, per query; also each item of a batch);
- ``query.datasets.datasetIds`` (bento's beacon and network);
- ``query.requestParameters.datasets`` as a list of ids (the production implementation's);
- ``query.requestParameters.datasets.datasetIds`` (the framework's request example);
- GET ``datasets`` (comma-separated, the production implementation's) beside MBeacon's ``datasetIds``.

Two spellings in one request must name the same datasets, else the request is refused naming both.
``meta.requestedSchemas`` may list ``{"entityType", "schema"}`` objects (the framework's form) or
schema names (strings, as some implementations send them); both are echoed in the framework's form.

A body whose query names nothing to ask (the framework's minimal request, ``{"meta": {...}}``, or a
``query`` with no ``requestParameters`` but dataset ids) is an *unfiltered* request:
:func:`unfiltered` says so, and the service answers it from public metadata without a budget.

The listing endpoints (``/datasets``, ``/filtering_terms``) read the same bodies and GET parameters
into a :class:`Listing`: the page (``skip`` pages of ``limit``), the echoes, the datasets to list.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from mbeacon.beacon.query import (
    PARAMETER_NAMES,
    BeaconRequestBody,
    Pagination,
    ParsedRequest,
    QueryError,
    canonical_datasets,
    parse_args,
)
from mbeacon.beacon.wire import (
    API_VERSION,
    DATASET_PATTERN,
    DEFAULT_LIMIT,
    DEFAULT_SKIP,
    MAX_DATASET_IDS,
    NO_FILTERS,
)
from mbeacon.pydantic_errors import describe

_dataset_id = re.compile(DATASET_PATTERN).fullmatch


def _ids(value: Any, where: str) -> list[str]:
    """A list of dataset ids at ``where``, checked."""
    if not isinstance(value, list):
        raise QueryError(f"{where}: expected a list of dataset ids")
    if len(value) > MAX_DATASET_IDS:
        raise QueryError(f"{where}: {len(value)} dataset ids; at most {MAX_DATASET_IDS}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _dataset_id(item):
            raise QueryError(f"{where}[{i}]: not a dataset id: {str(item)[:70]!r}")
    return value


def _datasets_object(value: Any, where: str) -> list[str]:
    """``{"datasetIds": [...]}`` (the framework's and bento's ``datasets`` object)."""
    if not isinstance(value, dict):
        raise QueryError(f'{where}: expected an object {{"datasetIds": [...]}}')
    unknown = sorted(set(value) - {"datasetIds"})
    if unknown:
        raise QueryError(f"{where}.{unknown[0]}: not supported; name datasets by {where}.datasetIds")
    if "datasetIds" not in value:
        raise QueryError(f"{where}.datasetIds: missing")
    return _ids(value["datasetIds"], f"{where}.datasetIds")


def _item_datasets(item: Any, where: str) -> tuple[Any, list[tuple[str, list[str]]]]:
    """One query of ``requestParameters`` with its ``datasets`` spelling taken out, and the spellings."""
    if not isinstance(item, dict) or "datasets" not in item:
        return item, []
    item = dict(item)
    raw = item.pop("datasets")
    if isinstance(raw, list):
        return item, [(f"{where}.datasets", _ids(raw, f"{where}.datasets"))]
    return item, [(f"{where}.datasets.datasetIds", _datasets_object(raw, f"{where}.datasets"))]


def _agree(spellings: list[tuple[str, list[str]]]) -> list[str] | None:
    """The one set of datasets all ``spellings`` name, or a refusal naming the two that differ."""
    if not spellings:
        return None
    first_where, first = spellings[0]
    for where, ids in spellings[1:]:
        if set(ids) != set(first):
            raise QueryError(f"{first_where} and {where} name different datasets; name them once")
    return first


def _schemas(meta: Any) -> list[dict]:
    """``meta.requestedSchemas`` in the framework's form (``[{"entityType"?, "schema"?}]``)."""
    if not isinstance(meta, dict) or "requestedSchemas" not in meta:
        return []
    raw = meta["requestedSchemas"]
    if not isinstance(raw, list):
        raise QueryError("meta.requestedSchemas: expected a list of schemas")
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            out.append({"schema": item})
        elif isinstance(item, dict) and all(
            key in ("entityType", "schema") and isinstance(value, str) for key, value in item.items()
        ):
            out.append(dict(item))
        else:
            raise QueryError(
                f"meta.requestedSchemas[{i}]: expected a schema name or an object with string "
                "entityType and schema"
            )
    return out


def normalise_body(body: Any) -> tuple[Any, list[dict]]:
    """``body`` with every dataset spelling moved to each query's ``datasetIds``, and the requested
    schemas in the framework's form. A body that is not an object is left to the parser's refusal."""
    if not isinstance(body, dict):
        return body, []
    schemas = _schemas(body.get("meta"))
    body = copy.copy(body)
    if isinstance(body.get("meta"), dict):
        body["meta"] = {k: v for k, v in body["meta"].items() if k != "requestedSchemas"}
    query = body.get("query")
    if not isinstance(query, dict):
        return body, schemas
    query = dict(query)
    body["query"] = query
    outer: list[tuple[str, list[str]]] = []
    if "datasets" in query:
        outer.append(("query.datasets.datasetIds", _datasets_object(query.pop("datasets"), "query.datasets")))
    where = "query.requestParameters"
    raw = query.get("requestParameters")
    if isinstance(raw, dict):
        item, spelled = _item_datasets(raw, where)
        named = _agree(outer + spelled + _own(item, where))
        query["requestParameters"] = _with_ids(item, named)
    elif isinstance(raw, list):
        items = []
        for i, entry in enumerate(raw):
            item, spelled = _item_datasets(entry, f"{where}[{i}]")
            named = _agree(outer + spelled + _own(item, f"{where}[{i}]"))
            items.append(_with_ids(item, named))
        query["requestParameters"] = items
    elif outer and raw is None:
        query["requestParameters"] = {"datasetIds": outer[0][1]}
    return body, schemas


def _own(item: Any, where: str) -> list[tuple[str, list[str]]]:
    """MBeacon's own ``datasetIds`` of a query, when it is a list (else left to the parser)."""
    ids = item.get("datasetIds") if isinstance(item, dict) else None
    if isinstance(ids, list) and all(isinstance(i, str) for i in ids):
        return [(f"{where}.datasetIds", ids)]
    return []


def _with_ids(item: Any, named: list[str] | None) -> Any:
    if named is None or not isinstance(item, dict):
        return item
    return {**item, "datasetIds": named}


def unfiltered(body: Any) -> bool:
    """Whether a (normalised) body asks nothing: no ``query``, or a query without request parameters
    besides dataset ids. Such a body is answered from public metadata (no budget)."""
    if not isinstance(body, dict):
        return False
    query = body.get("query")
    if query is None:
        return True
    if not isinstance(query, dict):
        return False
    raw = query.get("requestParameters")
    return raw is None or (isinstance(raw, dict) and set(raw) <= {"datasetIds"})


def normalise_args(args: Mapping[str, str]) -> tuple[dict[str, str], list[dict]]:
    """GET parameters with ``datasets`` read as ``datasetIds`` and ``requestedSchema`` taken out (as the
    framework's endpoints name it), and the requested schemas."""
    out = dict(args.items())
    schemas = []
    if "requestedSchema" in out:
        schemas.append({"schema": out.pop("requestedSchema")})
    if "datasets" in out:
        datasets = out.pop("datasets")
        if "datasetIds" in out and set(filter(None, out["datasetIds"].split(","))) != set(
            filter(None, datasets.split(","))
        ):
            raise QueryError("datasets and datasetIds name different datasets; name them once")
        out["datasetIds"] = datasets
    return out, schemas


def unfiltered_args(args: Mapping[str, str]) -> bool:
    """Whether normalised GET parameters ask nothing (no query parameter besides ``datasetIds``)."""
    return not (set(args) & PARAMETER_NAMES) - {"datasetIds"}


def parse_unfiltered_body(body: dict, schemas: list[dict]) -> ParsedRequest:
    """An unfiltered body (:func:`unfiltered`): its options validated as any request's, no query."""
    query = body.get("query") or {}
    ids = (query.get("requestParameters") or {}).get("datasetIds")
    try:
        parsed = BeaconRequestBody.model_validate({**body, "query": {**query, "requestParameters": None}})
    except ValidationError as error:
        raise QueryError(describe(error, prefix="body")) from None
    named = None if ids is None else _ids(ids, "query.requestParameters.datasetIds")
    q = parsed.query
    return ParsedRequest([], q.requestedGranularity, q.includeResultsetResponses, False,
                         parsed.meta.apiVersion, q.testMode, q.pagination.skip, q.pagination.limit,
                         tuple(schemas), True, canonical_datasets(named))  # fmt: skip


def parse_unfiltered_args(args: dict[str, str], schemas: list[dict]) -> ParsedRequest:
    """Unfiltered GET parameters (:func:`unfiltered_args`): the options validated by the GET parser
    (through a stand-in probe id, whose query is then dropped), no query."""
    ids = args.pop("datasetIds", None)
    named = None if ids is None else _ids([i for i in ids.split(",") if i], "datasetIds")
    parsed = parse_args({**args, "probeId": "cg00000000"})
    return dataclasses.replace(parsed, queries=[], requested_schemas=tuple(schemas), unfiltered=True,
                               datasets=canonical_datasets(named))  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Listing:
    """A request of a listing endpoint (``/datasets``, ``/filtering_terms``): its page and echoes."""

    skip: int = DEFAULT_SKIP
    limit: int = DEFAULT_LIMIT
    api_version: str = API_VERSION
    test_mode: bool = False
    schemas: tuple[dict, ...] = ()
    datasets: tuple[str, ...] | None = None

    def page(self, items: list) -> list:
        """``items`` paged as the framework pages: ``skip`` pages of ``limit`` (0: all of them)."""
        if self.limit == 0:
            return items
        start = self.skip * self.limit
        return items[start : start + self.limit]


def parse_listing_body(body: Any) -> Listing:
    """A POST body of a listing endpoint: the framework's request body, whose only request parameter is
    the datasets to list (in any spelling :func:`normalise_body` reads); an empty body lists all."""
    body, schemas = normalise_body(body)
    if not isinstance(body, dict):
        raise QueryError("request body: expected a JSON object with 'meta' and 'query'")
    query = body.get("query") or {}
    raw = query.get("requestParameters") if isinstance(query, dict) else None
    ids = None
    if isinstance(raw, dict):
        extra = sorted(set(raw) - {"datasetIds"})
        if extra:
            raise QueryError(f"query.requestParameters.{extra[0]}: this endpoint takes no request "
                             "parameters besides the datasets to list")  # fmt: skip
        ids = raw.get("datasetIds")
    elif raw is not None:
        raise QueryError("query.requestParameters: this endpoint takes one object (the datasets to list)")
    try:
        parsed = BeaconRequestBody.model_validate(
            {**body, "query": {**query, "requestParameters": None} if isinstance(query, dict) else query}
        )
    except ValidationError as error:
        raise QueryError(describe(error, prefix="body")) from None
    q = parsed.query
    named = None if ids is None else _ids(ids, "query.requestParameters.datasetIds")
    return Listing(q.pagination.skip, q.pagination.limit, parsed.meta.apiVersion, q.testMode,
                   tuple(schemas), canonical_datasets(named))  # fmt: skip


_LISTING_ARGS = {"skip", "limit", "testMode", "apiVersion", "requestedSchema", "datasets", "datasetIds",
                 "filters"}  # fmt: skip


def parse_listing_args(args: Mapping[str, str]) -> Listing:
    """GET parameters of a listing endpoint: ``skip``/``limit``, the echoes, the datasets to list."""
    unknown = sorted(set(args) - _LISTING_ARGS)
    if unknown:
        raise QueryError(
            f"unknown query parameter {unknown[0]!r}; allowed: {', '.join(sorted(_LISTING_ARGS))}"
        )
    values, schemas = normalise_args(args)
    if [term for term in values.get("filters", "").split(",") if term]:
        raise QueryError(f"filters: {NO_FILTERS}")
    pagination = {name: values[name] for name in ("skip", "limit") if name in values}
    for name, text in pagination.items():
        if not re.fullmatch(r"[0-9]{1,7}", text):
            raise QueryError(f"{name}: must be an integer, not {text[:20]!r}")
    flag = values.get("testMode", "false").lower()
    if flag not in ("true", "false", "1", "0"):
        raise QueryError("testMode: write true or false")
    try:
        page = Pagination.model_validate({name: int(text) for name, text in pagination.items()})
    except ValidationError as error:
        raise QueryError(describe(error)) from None
    ids = values.get("datasetIds")
    named = None if ids is None else _ids([i for i in ids.split(",") if i], "datasetIds")
    return Listing(page.skip, page.limit, values.get("apiVersion", API_VERSION), flag in ("true", "1"),
                   tuple(schemas), canonical_datasets(named))  # fmt: skip
