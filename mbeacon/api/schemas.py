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

from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from mbeacon.beacon.config import ServiceConfig, Tier
from mbeacon.beacon.sanitisers.policy import PolicyBase
from mbeacon.beacon.sanitisers.registry import MechanismName
from mbeacon.beacon.wire import (
    API_VERSION,
    BETA_MAX,
    BETA_MIN,
    BUDGET_FIELDS,
    DATASET_PATTERN,
    ENTRY_TYPE,
    FRAMEWORK_SCHEMAS,
    MAX_LIMIT,
    MAX_SKIP,
    PRODUCTION_STATUS,
    AnswerSource,
    Granularity,
    IncludeResultsets,
)

T = TypeVar("T")
Maybe = T | SkipJsonSchema[None]
"""A field a response may leave out (but never sends as null)."""

Count = Annotated[int, Field(ge=0)]
AtLeastOne = Annotated[int, Field(ge=1)]
Epsilon = Annotated[float, Field(gt=0)]
Spent = Annotated[float, Field(ge=0)]
Beta = Annotated[float, Field(ge=BETA_MIN, le=BETA_MAX)]
Uri = Annotated[str, Field(json_schema_extra={"format": "uri"})]

Mechanism = MechanismName
Variant = PolicyBase.model_fields["variant"].annotation
Scope = PolicyBase.model_fields["scope"].annotation
OnExhausted = PolicyBase.model_fields["on_exhausted"].annotation
Environment = ServiceConfig.model_fields["environment"].annotation
ProductionStatus = Literal[tuple(dict.fromkeys(PRODUCTION_STATUS.values()))]  # type: ignore[valid-type]


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


class CohortBudget(BaseModel):
    """A cohort's shared budget (`cohort-pmw`): every holder's positives come out of it."""

    positivesUsed: Count = Field(description="The cohort's positives spent by every holder together.")
    positivesTotal: AtLeastOne = Field(description="c: the cohort's positives in all.")
    epsilonSpent: Spent = Field(description="The cohort's privacy loss so far, whoever asked.")
    epsilonTotal: Epsilon = Field(description="The cohort's whole privacy budget.")


class Budget(BaseModel):
    """A budget holder's privacy budget on one dataset."""

    positivesUsed: Count = Field(description="Answers taken from the data so far (SVT² positives).")
    positivesTotal: AtLeastOne = Field(
        description="c: the number of answers the data may give in all (`cohort-pmw`: the holder's quota "
        "of the cohort's positives)."
    )
    epsilonSpent: Spent = Field(description="Privacy loss spent so far (`cohort-pmw`: the cohort's).")
    epsilonTotal: Epsilon = Field(description="The whole privacy budget (epsilon).")
    cohort: CohortBudget | None = Field(
        None, description="`cohort-pmw`: the cohort's shared budget, which the quota is a share of."
    )


class BeaconError(BaseModel):
    errorCode: int = Field(ge=400, le=599, description="The HTTP status code.")
    errorMessage: str = Field(description="What went wrong; safe to show anyone.")


class ExhaustedBudget(Budget):
    """Only with 429 for an exhausted privacy budget: the dataset and its budget."""

    dataset: str = Field(description="The dataset whose budget is exhausted.")


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


class AccountParameters(BaseModel):
    """The public SVT² parameters of a budget account (frozen when it opened)."""

    mechanism: Mechanism = Field(
        description="`svt2`, `svt2-margin` (SVT² with decision margins), `svt2-noisy` (a TOP answered "
        "by a noisy count), `online-pmw` (Online Private Multiplicative Weights started at the prior), "
        "or `none`: unprotected raw answers (evaluations only)."
    )
    epsilon: Epsilon = Field(description="The whole privacy budget of a budget holder.")
    epsilon1: Spent = Field(description="Epsilon of the noisy threshold pair.")
    epsilon2: Spent = Field(description="Epsilon of the query noise.")
    countEpsilon: Spent = Field(description="Part of epsilon spent on noisy counts (0: no counts).")
    c: AtLeastOne = Field(description="Positives: how many answers the data may give per budget holder.")
    threshold: AtLeastOne = Field(
        description="T: a dataset answers yes when at least T patients are in the range."
    )
    variant: Variant
    sensitivity: float = Field(
        1.0,
        ge=1,
        description="How much one patient can move a count: the dataset's contribution bound "
        "(the most samples of one patient it counts) when the account opened.",
    )
    marginAbove: float = Field(
        0.0, ge=0, description="`svt2-margin`/`svt2-noisy`: patients above T a TOP needs (0: SVT²'s test)."
    )
    marginBelow: float = Field(
        0.0, ge=0, description="`svt2-margin`/`svt2-noisy`: patients below T a TOP needs (0: SVT²'s test)."
    )
    epsilon3: Spent = Field(
        0.0, description="`svt2-noisy`, `online-pmw`: epsilon of the noisy counts that answer TOPs."
    )
    margin: float = Field(
        0.0, ge=0, description="`online-pmw`: patients of disagreement with the synthetic answer a TOP needs."
    )
    quota: int = Field(
        0, ge=0, description="`cohort-pmw`: the most of the cohort's c positives one budget holder may spend."
    )


class BestAttack(BaseModel):
    """The best membership attack the trade-off function of an epsilon-DP output allows, whoever asks."""

    epsilon: Spent
    maxAuc: float = Field(ge=0.5, le=1, description="The largest ROC area of any attack: e^eps/(1+e^eps).")
    maxTprAt01PctFpr: float = Field(ge=0, le=1, description="The highest true-positive rate at 0.1% FPR.")
    maxTprAt1PctFpr: float = Field(ge=0, le=1, description="The highest true-positive rate at 1% FPR.")


class Guarantee(BaseModel):
    """What the dataset's protection promises, and to whom."""

    unit: Literal["cohort", "budget holder", "none"] = Field(
        description="`cohort`: one budget for the patients, whoever asks (any coalition of accounts); "
        "`budget holder`: per account, so k holders together compose to k times epsilon; `none`: unprotected."
    )
    epsilonTotal: Epsilon | None = None
    epsilonSpent: Spent | None = None
    positivesUsed: Count | None = None
    positivesTotal: AtLeastOne | None = None
    quota: int | None = None
    bestAttack: BestAttack | None = Field(None, description="`cohort`: the bound on any coalition's attack.")
    bestAttackPerHolder: BestAttack | None = Field(
        None, description="`budget holder`: the bound on one holder's attack (not on a coalition's)."
    )


class DatasetPrivacy(AccountParameters):
    """The published protection of a dataset (never its noisy thresholds)."""

    scope: Scope = Field(description="Who shares one budget.")
    onExhausted: OnExhausted = Field(description="What happens once the c positives are spent.")
    tier: Tier = Field(description="The tier a caller needs to see and query the dataset.")
    guarantee: Guarantee


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
    queries: Count = Field(description="Number of queries in the request (0: an unfiltered request).")
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


class BudgetDetail(Budget):
    budgetHolder: str = Field(description="`user:NAME`, `group:NAME`, `global` or `anonymous`.")
    scope: Scope
    onExhausted: OnExhausted
    mechanism: Mechanism
    epsilon1: Spent
    epsilon2: Spent
    countEpsilon: Spent
    threshold: AtLeastOne
    variant: Variant
    sensitivity: float = Field(
        1.0, ge=1, description="The dataset's contribution bound this account's noise was drawn for."
    )
    marginAbove: float = Field(
        0.0, ge=0, description="`svt2-margin`/`svt2-noisy`: patients above T a TOP needs (0: SVT²'s test)."
    )
    marginBelow: float = Field(
        0.0, ge=0, description="`svt2-margin`/`svt2-noisy`: patients below T a TOP needs (0: SVT²'s test)."
    )
    epsilon3: Spent = Field(
        0.0, description="`svt2-noisy`, `online-pmw`: epsilon of the noisy counts that answer TOPs."
    )
    margin: float = Field(
        0.0, ge=0, description="`online-pmw`: patients of disagreement with the synthetic answer a TOP needs."
    )
    quota: int = Field(0, ge=0, description="`cohort-pmw`: the holder's share of the cohort's positives.")


class CallerBudgets(BaseModel):
    user: str = Field(description="The caller (`anonymous` without a key).")
    tier: Tier
    budgets: dict[str, BudgetDetail]


class BudgetResponse(Informational):
    response: CallerBudgets
