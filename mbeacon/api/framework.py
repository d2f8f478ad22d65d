"""The Beacon v2 framework endpoints: /, /info, /service-info, /configuration, /map, /entry_types,
/filtering_terms, /datasets and /datasets/{id}.

All are informational and need no key, except that /datasets lists only the datasets the caller's
tier may see (an anonymous caller sees PUBLIC datasets), and /datasets/{id} of another dataset is the
403 a query of it gets, so nothing about a dataset reaches a caller who may not query it.

The blueprint also installs the CORS hook (:mod:`mbeacon.api.cors`) on the whole app.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request, url_for
from werkzeug.exceptions import NotFound

from mbeacon import __version__
from mbeacon.api import schemas
from mbeacon.api.auth import principal
from mbeacon.api.bodies import read_json_body
from mbeacon.api.cors import add_cors_headers
from mbeacon.api.filtering import filtering_terms as terms_of
from mbeacon.api.responses import informational, informational_meta, request_summary, response_meta
from mbeacon.api.runtime import runtime
from mbeacon.beacon.answers import DatasetUnavailable, Principal
from mbeacon.beacon.config import TIERS
from mbeacon.beacon.request_shapes import Listing, parse_listing_args, parse_listing_body
from mbeacon.beacon.wire import (
    API_VERSION,
    DEFAULT_GRANULARITY,
    ENTRY_TYPE,
    FRAMEWORK_SCHEMAS,
    METHYLATION_SCHEMA_ID,
    PRODUCTION_STATUS,
)

bp = Blueprint("framework", __name__)
bp.after_app_request(add_cors_headers)  # every route of the app; the hook itself picks /api/ routes

METHYLATION_TERM = {"id": "NCIT:C16848", "label": "DNA Methylation"}


def _absolute(endpoint: str, **values) -> str:
    return url_for(endpoint, _external=True, **values)


#: The JSON Schemas of what each entry type returns, served at /api/schemas/<name>.json and named by
#: /entry_types as the entry type's default schema (a schema of results, as clients validate them).
RESULT_SCHEMAS = {ENTRY_TYPE: schemas.ResultSet, "dataset": schemas.Dataset}


def _entry_types() -> dict:
    schema_url = _absolute("framework.result_schema", name=ENTRY_TYPE)
    return {
        ENTRY_TYPE: {
            "id": ENTRY_TYPE,
            "name": "DNA methylation range query",
            "description": (
                "Does a dataset have at least T patients whose beta value at a CpG probe lies in "
                "[minValue, maxValue]? The probe is named by probeId, or a region (referenceName, start, "
                "end) or a gene (geneId) names the probes the dataset's annotation places there, each "
                "answered and charged as one query. Answers are sanitised by SVT² against a public "
                "prior. A result set's `exists` is the answer; no records are returned. Its "
                "`resultsCount` is the number of patients in the range as the answer tells it, marked "
                "`countPrecision: imprecise`: the noisy count at count granularity, else the "
                "dataset's public threshold T for a yes (at least T) and 0 for a no."
            ),
            "partOfSpecification": "MBeacon methylation extension v1.0.0 (on Beacon v2)",
            "ontologyTermForThisType": METHYLATION_TERM,
            "defaultSchema": {
                "id": METHYLATION_SCHEMA_ID,
                "name": "MBeacon methylation query",
                "referenceToSchemaDefinition": schema_url,
                "schemaVersion": "v1.0.0",
            },
            "nonFilteredQueriesAllowed": True,
        },
        "dataset": {
            "id": "dataset",
            "name": "Dataset",
            "description": "A methylation cohort: a probes x patients matrix of beta values.",
            "partOfSpecification": "Beacon v2.0.0",
            "ontologyTermForThisType": {"id": "NCIT:C47824", "label": "Data set"},
            "defaultSchema": {
                "id": "beacon-v2-default-model-dataset",
                "name": "Default schema for datasets",
                "referenceToSchemaDefinition": _absolute("framework.result_schema", name="dataset"),
                "schemaVersion": "v2.0.0",
            },
            "aCollectionOf": [{"id": ENTRY_TYPE, "name": "DNA methylation range query"}],
            "nonFilteredQueriesAllowed": True,
        },
    }


def _info_results() -> dict:
    config = runtime().config
    return {
        "id": config.beacon_id,
        "name": config.beacon_name,
        "apiVersion": API_VERSION,
        "environment": config.environment,
        "version": __version__,
        "description": (
            "A privacy-preserving Beacon for DNA methylation: yes/no answers sanitised by SVT², with "
            "a per-user privacy budget."
        ),
        "organization": {"id": config.organization_id, "name": config.organization_name},
        "welcomeUrl": _absolute("docs.docs_page"),
        "info": {"openapi": _absolute("docs.openapi"), "documentation": _absolute("docs.docs_page")},
    }


@bp.get("/")
@bp.get("/info")
def info():
    return informational(_info_results())


@bp.get("/service-info")
def service_info():
    config = runtime().config
    return jsonify(
        {
            "id": config.beacon_id,
            "name": config.beacon_name,
            "type": {"group": "org.ga4gh", "artifact": "beacon", "version": API_VERSION},
            "description": "Privacy-preserving GA4GH Beacon v2 for DNA methylation (SVT²)",
            "organization": {"name": config.organization_name, "url": config.organization_url},
            "documentationUrl": _absolute("docs.docs_page"),
            "environment": config.environment,
            "version": __version__,
        }
    )


@bp.get("/configuration")
def configuration():
    config = runtime().config
    return informational(
        {
            "$schema": f"{FRAMEWORK_SCHEMAS}/configuration/beaconConfigurationSchema.json",
            "maturityAttributes": {"productionStatus": PRODUCTION_STATUS[config.environment]},
            "securityAttributes": {"defaultGranularity": DEFAULT_GRANULARITY, "securityLevels": list(TIERS)},
            "entryTypes": _entry_types(),
        }
    )


@bp.get("/map")
def beacon_map():
    return informational(
        {
            "$schema": f"{FRAMEWORK_SCHEMAS}/configuration/beaconMapSchema.json",
            "endpointSets": {
                ENTRY_TYPE: {
                    "entryType": ENTRY_TYPE,
                    "rootUrl": _absolute("methylation.methylation_get"),
                    "openAPIEndpointsDefinition": _absolute("docs.openapi"),
                },
                "dataset": {
                    "entryType": "dataset",
                    "rootUrl": _absolute("framework.datasets"),
                    "singleEntryUrl": _absolute("framework.datasets") + "/{id}",
                    "endpoints": {
                        ENTRY_TYPE: {
                            "returnedEntryType": ENTRY_TYPE,
                            "url": _absolute("framework.datasets") + "/{id}/" + ENTRY_TYPE,
                        }
                    },
                },
            },
        }
    )


@bp.get("/entry_types")
def entry_types():
    return informational({"entryTypes": _entry_types()})


@bp.get("/schemas/<name>.json")
def result_schema(name: str):
    """The JSON Schema (draft 2020-12) of what entry type ``name`` returns."""
    model = RESULT_SCHEMAS.get(name)
    if model is None:
        raise NotFound(f"no schema {name[:40]!r}; schemas: {', '.join(RESULT_SCHEMAS)}")
    document = {"$schema": "https://json-schema.org/draft/2020-12/schema", **model.model_json_schema()}
    return jsonify(document)


def _listing() -> Listing:
    """The listing request, GET or POST (an empty POST body lists everything)."""
    if request.method == "POST":
        return parse_listing_body(read_json_body("the Beacon request body", empty={}))
    return parse_listing_args(request.args)


def _listed(caller: Principal, listing: Listing) -> list[str]:
    """The datasets a listing covers: those it names (each one the caller may see), else all visible."""
    visible = runtime().engine.visible(caller)
    for dataset in listing.datasets or ():
        if dataset not in visible:
            raise DatasetUnavailable(f"dataset {dataset[:70]!r} does not exist or is not available to you")
    return list(listing.datasets) if listing.datasets is not None else visible


def _summary(listing: Listing) -> dict:
    return request_summary(
        "record", api_version=listing.api_version, skip=listing.skip, limit=listing.limit,
        schemas=listing.schemas, test_mode=listing.test_mode,
    )  # fmt: skip


@bp.route("/filtering_terms", methods=["GET", "POST"])
def filtering_terms():
    """What a researcher can ask by (attributes, platforms, genes of the datasets the caller may see),
    paged by ``skip``/``limit``. Queries still take no filters: a request with filters is refused with
    a 400 that names them (see :mod:`mbeacon.api.filtering`)."""
    caller = principal(for_query=False)
    listing = _listing()
    terms = terms_of(_listed(caller, listing))
    return jsonify(
        {
            "meta": {**informational_meta(), "receivedRequestSummary": _summary(listing)},
            "response": {"filteringTerms": listing.page(terms), "resources": []},
            "info": {"numTotalResults": len(terms)},
        }
    )


def dataset_policy_public(dataset: str) -> dict:
    """The published protection of a dataset: parameters, never the noisy thresholds."""
    policy = runtime().config.policy(dataset)
    return {
        **runtime().engine.new_params(dataset).to_json(),
        "scope": policy.scope,
        "onExhausted": policy.on_exhausted,
        "tier": policy.tier,
        "guarantee": runtime().engine.guarantee(dataset),
    }


def _collection(dataset: str) -> dict:
    """A dataset as /datasets lists it: its public description and published protection."""
    meta = runtime().engine.cohort(dataset).info
    return {
        "id": meta.id,
        "name": meta.name,
        "description": meta.description,
        "createDateTime": meta.created,
        "info": {
            "patients": meta.patients,
            "probes": meta.probes,
            "tissue": meta.tissue,
            "disease": meta.disease,
            "assembly": _assembly(dataset, meta.assembly),
            **_located(dataset),
            "contribution": runtime().engine.sensitivity(dataset).to_json(),
            "privacy": dataset_policy_public(dataset),
        },
    }


def _assembly(dataset: str, ingested: str) -> str:
    """The genome build of the dataset's positions: as ingested, else its annotation's ("" when the
    dataset has no positions)."""
    if ingested:
        return ingested
    positions = runtime().engine.located(dataset).positions
    return positions.build if positions is not None else ""


def _located(dataset: str) -> dict:
    """Which query forms resolve on ``dataset``, and through which platform."""
    located = runtime().engine.located(dataset)
    return {
        "hasProbePositions": located.positions is not None,
        "hasGenes": located.genes is not None,
        "platform": located.platform,
    }


_ONE = Listing()


def _collections(datasets: list[str], listing: Listing = _ONE):
    """The ``beaconCollectionsResponse`` of ``datasets``: its page, the whole count, the echoes."""
    meta = response_meta("record", _summary(listing), [{"entityType": "dataset"}])
    return jsonify(
        {
            "meta": meta,
            "responseSummary": {"exists": bool(datasets), "numTotalResults": len(datasets)},
            "response": {"collections": [_collection(dataset) for dataset in listing.page(datasets)]},
        }
    )


@bp.route("/datasets", methods=["GET", "POST"])
def datasets():
    """The datasets the caller may see (or those the request names), paged by ``skip``/``limit``."""
    caller = principal(for_query=False)
    listing = _listing()
    return _collections(_listed(caller, listing), listing)


@bp.get("/datasets/<dataset>")
def dataset(dataset: str):
    """One dataset; one the caller may not see is the 403 a query of it gets (existence not told)."""
    caller = principal(for_query=False)
    if dataset not in runtime().engine.visible(caller):
        raise DatasetUnavailable(f"dataset {dataset[:70]!r} does not exist or is not available to you")
    return _collections([dataset])
