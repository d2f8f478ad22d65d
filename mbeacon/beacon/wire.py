"""The wire contract of the Beacon API: every bound, pattern and literal a request or response must
respect, stated once.

The request models (:mod:`mbeacon.beacon.query`), the batch items' fast path beside them, the response
builders (:mod:`mbeacon.api.responses`, :mod:`mbeacon.api.framework`), the schema-only response models
(:mod:`mbeacon.api.schemas`) and so the OpenAPI document all read them from here, so none can drift
from another.
"""

from __future__ import annotations

from typing import Literal, get_args

API_VERSION = "v2.0.0"
"""The Beacon API version the service speaks (and the default a request states)."""

ENTRY_TYPE = "methylation"
"""The entry type of a methylation query."""

METHYLATION_SCHEMA_ID = "mbeacon-methylation-v1.0.0"
"""The default schema of the methylation entry type, as ``returnedSchemas`` names it."""

FRAMEWORK_SCHEMAS = "https://raw.githubusercontent.com/ga4gh-beacon/beacon-v2/main/framework/json"
"""The official Beacon v2 framework schemas the responses follow."""

Granularity = Literal["boolean", "count", "record"]
GRANULARITIES: tuple[str, ...] = get_args(Granularity)
DEFAULT_GRANULARITY: Granularity = "boolean"

IncludeResultsets = Literal["ALL", "HIT", "MISS", "NONE"]
INCLUDE_RESULTSETS: tuple[str, ...] = get_args(IncludeResultsets)
DEFAULT_INCLUDE: IncludeResultsets = "HIT"

AnswerSource = Literal["prior", "data", "refused"]
"""Where an answer came from: the public prior (free), the data (one positive spent), or nowhere (the
budget is exhausted and the dataset refuses)."""
ANSWER_SOURCES: tuple[str, ...] = get_args(AnswerSource)

PROBE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
DATASET_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
REFERENCE_PATTERN = r"^(chr)?([0-9]{1,2}|X|Y|M|MT)$"

GENE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"
"""A gene symbol as the annotations hold them (HGNC symbols, as in Illumina's UCSC_RefGene_Name)."""

ASSEMBLY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$"
"""A genome assembly name (``GRCh37``, ``GRCh38``, ``hg19``, ``hg38``...)."""

MAX_REGION_PROBES = 500
"""The most probes one region or gene query may cover: each is answered (and charged) as one
single-probe query, so a wider question is refused (400, nothing spent) rather than silently cut."""

MAX_START = 2**31 - 1
"""The largest 0-based position a query may name (positions are stored as 32-bit integers)."""

BETA_MIN, BETA_MAX = 0.0, 1.0
"""The range of a beta value, and so of ``minValue`` and ``maxValue``."""

MAX_DATASET_IDS = 100
"""The most ``datasetIds`` one query may list."""

BUDGET_FIELDS = ("positivesUsed", "positivesTotal", "epsilonSpent", "epsilonTotal")
"""A budget as every response shows it (result sets, ``/budget``, the admin API, the 429 body)."""

MAX_AUDIT_LIMIT = 10_000
"""The most audit entries one admin request may read."""

PRODUCTION_STATUS = {"prod": "PROD", "test": "TEST", "staging": "TEST", "dev": "DEV"}
"""The Beacon ``productionStatus`` of each service environment."""

APPLIES_FROM = ("after budget reset", "next query")
"""When a budget override applies: an open account keeps its parameters until it is reset."""

DEFAULT_SKIP, DEFAULT_LIMIT = 0, 10
"""Beacon pagination when a request states none (the framework's defaults: skip 0 pages of 10)."""

MAX_SKIP, MAX_LIMIT = 1_000_000, 10_000
"""The largest ``skip`` and ``limit`` a request may state. Pagination pages records, and MBeacon returns
none (a result set's ``results`` is always empty), so both are only validated and echoed; the bounds
keep the echo an ordinary number."""

NO_FILTERS = (
    "methylation queries take no filters (/api/filtering_terms lists what can be asked: genes by "
    "geneId, and the datasets' attributes); send no filters or an empty list"
)
"""The refusal of a request with filters, on GET (``filters``) and POST (``query.filters``) alike."""
