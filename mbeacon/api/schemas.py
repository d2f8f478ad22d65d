"""Schema-only models of the service's responses: what the OpenAPI document's response components are
generated from, and what the tests validate the responses against.

The responses themselves are built as plain dicts (:mod:`mbeacon.api.responses`, the blueprints): that
is the hot path of every answer, and a model instance per result set would cost more than the answer.
The models state the shapes once; bounds, patterns and literals come from :mod:`mbeacon.beacon.wire`,
the policy's choices from :mod:`mbeacon.beacon.sanitisers`. A model's docstring is its
description in the document. Envelopes that follow a Beacon v2 framework schema link to it
(``externalDocs``); the framework's schemas are not referenced with ``$ref`` because they live on
another host, and a document whose references need the network would not load offline.
"""

# The models mirror the Beacon v2 wire format, whose field names are camelCase.
# ruff: noqa: N815

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mbeacon.api.schemas_privacy import (  # noqa: F401 - re-exported: the API's models in one namespace
    AccountParameters,
    BestAttack,
    Budget,
    BudgetDetail,
    CallerBudgets,
    CohortBudget,
    DatasetPrivacy,
    ExhaustedBudget,
    Guarantee,
)
from mbeacon.api.schemas_types import (  # noqa: F401 - re-exported
    AtLeastOne,
    Beta,
    Count,
    Environment,
    Epsilon,
    Maybe,
    Mechanism,
    OnExhausted,
    ProductionStatus,
    Scope,
    Spent,
    Uri,
    Variant,
)
from mbeacon.beacon.config import Tier
from mbeacon.beacon.wire import (
    API_VERSION,
    BUDGET_FIELDS,
    DATASET_PATTERN,
    ENTRY_TYPE,
    FRAMEWORK_SCHEMAS,
    MAX_LIMIT,
    MAX_SKIP,
    AnswerSource,
    Granularity,
    IncludeResultsets,
)


def framework(name: str, what: str) -> ConfigDict:
    """The configuration of a model that follows the framework schema ``name``: a link to it."""
    url = f"{FRAMEWORK_SCHEMAS}/{name}"
    return ConfigDict(json_schema_extra={"externalDocs": {"description": f"Beacon v2 {what}", "url": url}})


# --- the envelopes ---------------------------------------------------------------------------------


class SchemaPerEntity(BaseModel):
    """A schema used for an entity type (Beacon `SchemasPerEntity`)."""

    entityType: Maybe[str] = None
    schema_: Maybe[str] = Field(None, alias="schema")


class InformationalMeta(BaseModel):
    """Beacon `beaconInformationalResponseMeta`."""

    model_config = framework("responses/sections/beaconInformationalResponseMeta.json", "meta section")

    beaconId: str = Field(description="The beacon's id (a reversed domain name).")
    apiVersion: str = Field(description="Beacon API version of the response.", examples=[API_VERSION])
    returnedSchemas: list[SchemaPerEntity]


class ReceivedPagination(BaseModel):
    """Pagination as requested (echoed; it pages records, and no records are returned)."""

    skip: Annotated[int, Field(ge=0, le=MAX_SKIP)]
    limit: Annotated[int, Field(ge=0, le=MAX_LIMIT)]


class EchoedQuery(BaseModel):
    """One query in its canonical form: the probe (or position), the range as counted, and the
    datasets asked when they were named."""

    model_config = ConfigDict(extra="forbid")

    probeId: Maybe[str] = None
    referenceName: Maybe[str] = None
    start: Maybe[Count] = None
    minValue: Beta
    maxValue: Beta
    datasetIds: Maybe[list[Annotated[str, Field(pattern=DATASET_PATTERN)]]] = None


class EchoedBatch(BaseModel):
    """A batch's queries, in order (`queryIndex` counts them)."""

    model_config = ConfigDict(extra="forbid")

    queries: list[EchoedQuery] = Field(min_length=1)


class EchoedParameters(BaseModel):
    """The `requestParameters` echo, under the entry type's name (the framework's echo is an object of
    objects): one query, or a batch."""

    model_config = ConfigDict(extra="forbid")

    methylation: EchoedQuery | EchoedBatch = Field(alias=ENTRY_TYPE)


class ReceivedRequestSummary(BaseModel):
    """The request as the beacon understood it (Beacon `beaconReceivedRequestSummary`)."""

    apiVersion: str
    requestedSchemas: list[dict]
    filters: list[str] = Field(
        max_length=0, description="Always empty: a request with filters is refused (400)."
    )
    pagination: ReceivedPagination
    requestedGranularity: Granularity
    includeResultsetResponses: Maybe[IncludeResultsets] = None
    requestParameters: Maybe[EchoedParameters] = Field(
        None, description="The queries as answered (methylation answers only)."
    )
    testMode: Maybe[Literal[True]] = Field(None, description="Present when the request was in test mode.")


class ResponseMeta(InformationalMeta):
    """Beacon `beaconResponseMeta`."""

    model_config = framework("responses/sections/beaconResponseMeta.json", "meta section")

    returnedGranularity: Granularity = Field(description="May be coarser than the requested one.")
    receivedRequestSummary: ReceivedRequestSummary
    testMode: Maybe[Literal[True]] = Field(None, description="Present when the request was in test mode.")


class BeaconError(BaseModel):
    errorCode: int = Field(ge=400, le=599, description="The HTTP status code.")
    errorMessage: str = Field(description="What went wrong; safe to show anyone.")


class BeaconErrorResponse(BaseModel):
    """Beacon `beaconErrorResponse`."""

    model_config = framework("responses/beaconErrorResponse.json", "beaconErrorResponse")

    meta: ResponseMeta
    error: BeaconError
    info: Maybe[ExhaustedBudget] = None


class Informational(BaseModel):
    """The envelope of informational responses: ``{"meta": ..., "response": ...}``."""

    meta: InformationalMeta


# --- the framework endpoints -----------------------------------------------------------------------


class Organization(BaseModel):
    id: str
    name: str


class InfoLinks(BaseModel):
    openapi: Uri
    documentation: Uri


class BeaconInfo(BaseModel):
    id: str
    name: str
    apiVersion: str
    environment: Environment
    version: str = Field(description="The MBeacon software version.")
    description: str
    organization: Organization
    welcomeUrl: Uri
    info: InfoLinks


class InfoResponse(Informational):
    """Beacon `beaconInfoResponse`."""

    model_config = framework("responses/beaconInfoResponse.json", "beaconInfoResponse")

    response: BeaconInfo


class ServiceType(BaseModel):
    group: str
    artifact: str
    version: str


class ServiceOrganization(BaseModel):
    name: str
    url: Uri


class ServiceInfo(BaseModel):
    """GA4GH service-info 1.0.0."""

    id: str
    name: str
    type: ServiceType
    description: str
    organization: ServiceOrganization
    documentationUrl: Uri
    environment: Environment
    version: str


class OntologyTerm(BaseModel):
    id: str
    label: str


class DefaultSchema(BaseModel):
    id: str
    name: str
    referenceToSchemaDefinition: Uri
    schemaVersion: str


class NamedEntryType(BaseModel):
    id: str
    name: str


class EntryTypeDefinition(BaseModel):
    id: str
    name: str
    description: Maybe[str] = None
    partOfSpecification: str
    ontologyTermForThisType: OntologyTerm
    defaultSchema: DefaultSchema
    aCollectionOf: Maybe[list[NamedEntryType]] = None
    nonFilteredQueriesAllowed: Maybe[bool] = None


class MaturityAttributes(BaseModel):
    productionStatus: ProductionStatus


class SecurityAttributes(BaseModel):
    defaultGranularity: Granularity
    securityLevels: list[Tier]


class Configuration(BaseModel):
    schema_: str = Field(alias="$schema")
    maturityAttributes: MaturityAttributes
    securityAttributes: SecurityAttributes
    entryTypes: dict[str, EntryTypeDefinition]


class ConfigurationResponse(Informational):
    """Beacon `beaconConfigurationResponse`."""

    model_config = framework("responses/beaconConfigurationResponse.json", "beaconConfigurationResponse")

    response: Configuration


class Endpoint(BaseModel):
    returnedEntryType: str
    url: str


class EndpointSet(BaseModel):
    entryType: str
    rootUrl: Uri
    singleEntryUrl: Maybe[str] = Field(None, description="One entry by id (a URI template).")
    openAPIEndpointsDefinition: Maybe[Uri] = None
    endpoints: Maybe[dict[str, Endpoint]] = None


class BeaconMap(BaseModel):
    schema_: str = Field(alias="$schema")
    endpointSets: dict[str, EndpointSet]


class MapResponse(Informational):
    """Beacon `beaconMapResponse`."""

    model_config = framework("responses/beaconMapResponse.json", "beaconMapResponse")

    response: BeaconMap


class EntryTypes(BaseModel):
    entryTypes: dict[str, EntryTypeDefinition]


class EntryTypesResponse(Informational):
    """Beacon `beaconEntryTypesResponse`."""

    model_config = framework("responses/beaconEntryTypesResponse.json", "beaconEntryTypesResponse")

    response: EntryTypes


class FilteringTerm(BaseModel):
    """What a researcher can ask by: a dataset attribute (with its values), a probe platform
    (`platform:GPL13534`) or a gene (`geneId:BRCA1`, the `geneId` request parameter)."""

    type: Literal["alphanumeric", "custom"]
    id: str
    label: str
    scopes: list[str]
    values: Maybe[list[str]] = Field(None, min_length=1)


class FilteringTerms(BaseModel):
    """The page of terms asked for (queries take no Beacon filters: they are refused, named)."""

    filteringTerms: list[FilteringTerm]
    resources: list[dict] = Field(max_length=0)


class ListingMeta(InformationalMeta):
    """Informational meta with the request as understood (its page)."""

    receivedRequestSummary: ReceivedRequestSummary


class ListingInfo(BaseModel):
    numTotalResults: Count = Field(description="Terms in all, over every page.")


class FilteringTermsResponse(BaseModel):
    """Beacon `beaconFilteringTermsResponse`."""

    model_config = framework("responses/beaconFilteringTermsResponse.json", "beaconFilteringTermsResponse")

    meta: ListingMeta
    response: FilteringTerms
    info: ListingInfo


class ContributionBound(BaseModel):
    """The most samples of one patient the dataset counts: the sensitivity of its counts."""

    bound: AtLeastOne = Field(description="Samples of one patient counted at most; the sensitivity.")
    source: Literal["configuration", "declared", "learned", "one sample per patient"] = Field(
        description="`configuration`/`declared`: set by the operator (free); `learned`: by the sparse "
        "vector technique from the patient ids at ingest; `one sample per patient`: no patient ids."
    )
    learningEpsilon: Spent = Field(
        description="Epsilon spent once, for the whole dataset, to learn the bound (0 unless learned)."
    )
    truncated: bool = Field(
        description="Whether samples beyond the bound are left out of counts (each patient's first "
        "`bound` samples are counted)."
    )
    patients: Count = Field(description="Distinct patients (public, as the cohort size).")


class DatasetInfo(BaseModel):
    patients: Count = Field(description="Cohort size N (public).")
    probes: Count
    tissue: str
    disease: str
    assembly: str
    hasProbePositions: bool = Field(
        description="Whether queries by referenceName + start (+ end) resolve (positions from a manifest "
        "ingested with the dataset, or from its platform's annotation)."
    )
    hasGenes: bool = Field(description="Whether queries by geneId resolve (the annotation has genes).")
    platform: str = Field(description="The array platform (e.g. GPL13534) whose annotation locates probes.")
    contribution: ContributionBound
    privacy: DatasetPrivacy


class Dataset(BaseModel):
    id: str = Field(pattern=DATASET_PATTERN)
    name: str
    description: str
    createDateTime: str
    info: DatasetInfo


class CollectionsSummary(BaseModel):
    exists: bool
    numTotalResults: Count


class Collections(BaseModel):
    collections: list[Dataset]


class DatasetsResponse(BaseModel):
    """Beacon `beaconCollectionsResponse`."""

    model_config = framework("responses/beaconCollectionsResponse.json", "beaconCollectionsResponse")

    meta: ResponseMeta
    responseSummary: CollectionsSummary
    response: Collections


# --- methylation answers and the caller's budget ---------------------------------------------------


class TestModeBudget(BaseModel):
    """In test mode no budget is read or spent."""

    model_config = ConfigDict(extra="forbid")

    testMode: Literal[True]


class ResultSetInfo(BaseModel):
    """Budget fields after the answer; a test-mode answer has `testMode` instead."""

    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": list(BUDGET_FIELDS)}, {"required": ["testMode"]}]}
    )

    answeredFrom: AnswerSource = Field(
        description="`prior`: from the public prior (free); `data`: from the data (spent one of the c "
        "positives); `refused`: not answered, the budget is exhausted (exists is false)."
    )
    cached: bool = Field(description="A repeat of an earlier identical query: the same answer, at no cost.")
    probeId: str | None = Field(description="The probe answered (null: a position that maps to no probe).")
    range: tuple[Beta, Beta] = Field(description="[minValue, maxValue] as answered.")
    positivesUsed: Maybe[Count] = None
    positivesTotal: Maybe[AtLeastOne] = None
    epsilonSpent: Maybe[Spent] = None
    epsilonTotal: Maybe[Epsilon] = None
    budgetExhausted: Maybe[Literal[True]] = Field(None, description="Present when the budget ran out.")
    queryIndex: Maybe[Count] = Field(None, description="Position of the query in a batch (batches only).")
    testMode: Maybe[Literal[True]] = Field(None, description="A test-mode answer: from the prior, no budget.")

    @model_validator(mode="after")
    def _budget_or_test_mode(self) -> ResultSetInfo:
        if self.testMode is None and any(getattr(self, name) is None for name in BUDGET_FIELDS):
            raise ValueError(f"a result set shows its budget ({', '.join(BUDGET_FIELDS)}) or testMode")
        return self


class ResultSet(BaseModel):
    id: str = Field(description="The dataset.")
    setType: Literal["dataset"]
    exists: bool
    resultsCount: Count = Field(
        description="Patients in the range, as the answer tells it (no records are returned): with "
        "`count` granularity the noisy count; otherwise the answer's meaning, the dataset's threshold T "
        "for a yes (at least T) and 0 for a no. An unfiltered request's: the cohort size."
    )
    countPrecision: Literal["exact", "imprecise"] = Field(
        description="Beacon v2.2: `imprecise` for every answer (noisy), `exact` for a public cohort size."
    )
    results: list[dict] = Field(max_length=0)
    info: Maybe[ResultSetInfo] = Field(None, description="Absent only in an unfiltered request's answer.")


class ResponseSummary(BaseModel):
    exists: bool = Field(description="Whether any (query, dataset) pair was answered yes.")
    numTotalResults: Maybe[Count] = Field(
        None, description="Sum of the result sets' counts (a single query, one result set per dataset)."
    )
    countPrecision: Maybe[Literal["exact", "imprecise"]] = Field(None, description="Of numTotalResults.")


class ResultSets(BaseModel):
    resultSets: list[ResultSet]


class AnswersInfo(BaseModel):
    budgets: dict[str, Budget | TestModeBudget]
    refused: Count = Field(description="Pairs refused because the budget is exhausted.")
    queries: Count = Field(
        description="Probe queries the request was answered and charged as (a gene or region counts each "
        "of its probes; 0: an unfiltered request)."
    )
    unfiltered: Maybe[Literal[True]] = Field(None, description="The request named nothing to ask.")
    message: Maybe[str] = Field(None, description="What an unfiltered answer is, and how to ask.")


class MethylationResponse(BaseModel):
    """Beacon `beaconResultsetsResponse`: one result set per (query, dataset) pair kept by
    includeResultsetResponses."""

    model_config = framework("responses/beaconResultsetsResponse.json", "beaconResultsetsResponse")

    meta: ResponseMeta
    responseSummary: ResponseSummary
    response: ResultSets
    info: AnswersInfo


class BudgetResponse(Informational):
    response: CallerBudgets
