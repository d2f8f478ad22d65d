"""The Beacon v2 framework endpoints: /, /info, /service-info, /configuration, /map, /entry_types,
/filtering_terms, /datasets and /datasets/{id}.

All are informational and need no key, except that /datasets lists only the datasets the caller's
tier may see (an anonymous caller sees PUBLIC datasets), and /datasets/{id} of another dataset is the
403 a query of it gets, so nothing about a dataset reaches a caller who may not query it.

The blueprint also installs the CORS hook (:mod:`mbeacon.api.cors`) on the whole app.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request, url_for

from mbeacon import __version__
from mbeacon.api.auth import principal
from mbeacon.api.cors import add_cors_headers
from mbeacon.api.responses import informational, request_summary, response_meta
from mbeacon.api.runtime import runtime
from mbeacon.beacon.answers import DatasetUnavailable
from mbeacon.beacon.config import TIERS
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


def _entry_types() -> dict:
    schema_url = request.url_root.rstrip("/") + "/api/openapi.json#/components/schemas/RequestParameters"
    return {
        ENTRY_TYPE: {
            "id": ENTRY_TYPE,
            "name": "DNA methylation range query",
            "description": (
                "Does a dataset have at least T patients whose beta value at a CpG probe lies in "
                "[minValue, maxValue]? The probe is named by probeId, or a region (referenceName, start, "
                "end) or a gene (geneId) names the probes the dataset's annotation places there, each "
                "answered and charged as one query. Answers are sanitised by SVT² against a public "
                "prior. A result "
                "set's `exists` is the answer; its `resultsCount` is the number of records in "
                "`results`, always 0 (no records are returned), except at count granularity, where it "
                "is the noisy count of patients in the range."
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
                "referenceToSchemaDefinition": "https://github.com/ga4gh-beacon/beacon-v2/tree/main/models",
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
                    "endpoints": _query_forms(_absolute("methylation.methylation_get")),
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


def _query_forms(root: str) -> dict:
    """The three ways to name the CpGs of a methylation query, as URI templates of the GET route."""
    common = "minValue,maxValue,datasetIds"
    forms = {
        "byProbe": f"probeId,{common}",
        "byRegion": f"referenceName,start,end,assemblyId,{common}",
        "byGene": f"geneId,assemblyId,{common}",
    }
    return {
        name: {"returnedEntryType": ENTRY_TYPE, "url": f"{root}{{?{names}}}"} for name, names in forms.items()
    }


@bp.get("/entry_types")
def entry_types():
    return informational({"entryTypes": _entry_types()})


@bp.get("/filtering_terms")
def filtering_terms():
    # Methylation queries take no filters; an empty list says so explicitly, and a request with filters
    # (GET `filters`, POST `query.filters`) is refused with a 400 that names them. Genes are not
    # filtering terms: a gene names the CpGs asked about (the `geneId` request parameter, as Beacon v2's
    # genomic queries take it), it does not filter records (see docs/service.md).
    return informational({"filteringTerms": [], "resources": []})


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
            "assembly": meta.assembly,
            **_located(dataset),
            "contribution": runtime().engine.sensitivity(dataset).to_json(),
            "privacy": dataset_policy_public(dataset),
        },
    }


def _located(dataset: str) -> dict:
    """Which query forms resolve on ``dataset``, and through which platform."""
    located = runtime().engine.located(dataset)
    return {
        "hasProbePositions": located.positions is not None,
        "hasGenes": located.genes is not None,
        "platform": located.platform,
    }


def _collections(collections: list[dict]):
    return jsonify(
        {
            "meta": response_meta("record", request_summary("record"), [{"entityType": "dataset"}]),
            "responseSummary": {"exists": bool(collections), "numTotalResults": len(collections)},
            "response": {"collections": collections},
        }
    )


@bp.get("/datasets")
def datasets():
    caller = principal(for_query=False)
    return _collections([_collection(dataset) for dataset in runtime().engine.visible(caller)])


@bp.get("/datasets/<dataset>")
def dataset(dataset: str):
    """One dataset; one the caller may not see is the 403 a query of it gets (existence not told)."""
    caller = principal(for_query=False)
    if dataset not in runtime().engine.visible(caller):
        raise DatasetUnavailable(f"dataset {dataset[:70]!r} does not exist or is not available to you")
    return _collections([_collection(dataset)])
