"""The pages people read: the OpenAPI document (``/api/openapi.json``), the researcher page
(``/api/docs``), the interactive API reference (``/api/reference``, Swagger UI) and the public prior
curve the researcher page draws (``/api/prior``).

The researcher page is one self-contained HTML file: its script and style are inlined from
``static/`` and allowed by their SHA-256 in the Content-Security-Policy, so the page runs nothing but
its own code and talks to nothing but this server. The API reference is Swagger UI from the
``swagger-ui-py`` package's bundled files (no CDN), served under ``/api/reference/`` from an
allow-list. ``/api/prior`` returns only the public prior (never a count of the cohort): the density a
researcher sees is the one SVT² compares the data with.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import math
import re
from pathlib import Path

import numpy as np
from flask import Blueprint, Response, abort, jsonify, render_template, request, send_file
from markupsafe import Markup

from mbeacon.api.auth import principal
from mbeacon.api.openapi_spec import openapi_document
from mbeacon.api.runtime import runtime
from mbeacon.beacon.answers import DatasetUnavailable
from mbeacon.beacon.query import QueryError, canonical_bound
from mbeacon.beacon.wire import DATASET_PATTERN, PROBE_PATTERN
from mbeacon.store.priors import NoPriorChosen

bp = Blueprint("docs", __name__, template_folder="templates")
#: The pages' icon, at the site's root where browsers look for it.
icon_bp = Blueprint("icon", __name__)

STATIC = Path(__file__).parent / "static"
#: Bins of the prior curve on [0, 1]: fine enough to show a bimodal probe, small enough to send at once.
PRIOR_BINS = 50
#: Probe ids suggested per type-ahead request.
SUGGESTIONS = 20
#: The Swagger UI files the reference page loads (nothing else of the package is served).
SWAGGER_ASSETS = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript"}
#: The reference page's own files (from ``static/``): its start-up script and its header's style.
REFERENCE_FILES = {"reference.js": "text/javascript", "reference.css": "text/css"}

_PROBE = re.compile(PROBE_PATTERN)
_DATASET = re.compile(DATASET_PATTERN)
_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{0,64}$")

# Shared by both pages: nothing from elsewhere, no plugins, no framing, no forms posted anywhere, and
# no referrer (the page's URL never carries a key, but it need not travel either).
_CSP_COMMON = (
    "default-src 'none'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _hash_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@functools.cache
def _inline(name: str) -> tuple[Markup, str]:
    """A file of ``static/`` to inline, and its CSP hash source (read once per process)."""
    text = (STATIC / name).read_text(encoding="utf-8")
    return Markup(text), _hash_source(text)


def _page_headers(response: Response, csp: str) -> Response:
    response.headers["Content-Security-Policy"] = csp
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    return response


def _base() -> str:
    return request.url_root.rstrip("/") + "/api"


@icon_bp.get("/favicon.ico")
@icon_bp.get("/favicon.svg")
def favicon():
    """The beacon's icon (SVG, which browsers take at either name): a tab, a bookmark, no 404 in the log."""
    response = send_file(STATIC / "favicon.svg", mimetype="image/svg+xml", max_age=86_400)
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


@bp.get("/openapi.json")
def openapi():
    return jsonify(openapi_document(_base()))


@bp.get("/docs")
def docs_page():
    """The researcher page: ask questions, see the prior, the answer, its source and the budget."""
    script, script_hash = _inline("researcher.js")
    style, style_hash = _inline("researcher.css")
    page = render_template("docs.html", base=_base(), script=script, style=style)
    csp = f"{_CSP_COMMON}; script-src {script_hash}; style-src {style_hash}; img-src 'self'"
    return _page_headers(Response(page, mimetype="text/html"), csp)


@bp.get("/reference")
def reference_page():
    """Swagger UI over ``/api/openapi.json``."""
    page = render_template("reference.html", base=_base())
    # Swagger UI sets element styles from script (allowed) and draws its icons as inline SVG data URIs.
    csp = f"{_CSP_COMMON}; script-src 'self'; style-src 'self'; img-src 'self' data:"
    return _page_headers(Response(page, mimetype="text/html"), csp)


@functools.cache
def _swagger_dir() -> Path:
    """The Swagger UI files of the ``swagger-ui-py`` package, found without importing the package."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the swagger-ui-py package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


@bp.get("/reference/<asset>")
def reference_asset(asset: str):
    """One file of the reference page: an allow-listed Swagger UI file or one of the page's own."""
    if asset in REFERENCE_FILES:
        path, mimetype = STATIC / asset, REFERENCE_FILES[asset]
    elif asset in SWAGGER_ASSETS:
        try:
            path, mimetype = _swagger_dir() / asset, SWAGGER_ASSETS[asset]
        except FileNotFoundError:
            abort(404, description="the API reference is not installed (pip package swagger-ui-py)")
    else:
        abort(404, description=f"no such file of the API reference: {asset!r}")
    response = send_file(path, mimetype=mimetype, max_age=3600)
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def _visible_dataset(value: str | None) -> str:
    """The ``datasetId`` parameter: a dataset the caller may query (403 otherwise, as for a query)."""
    if not value:
        raise QueryError("datasetId: required (one of the ids listed by /api/datasets)")
    if not _DATASET.match(value):
        raise QueryError(f"datasetId: {value[:80]!r} is not a valid dataset id")
    if value not in runtime().engine.visible(principal(for_query=False)):
        raise DatasetUnavailable(f"dataset {value!r} does not exist or is not available to you")
    return value


def _bound(name: str, default: float) -> float:
    text = request.args.get(name)
    if text is None or text.strip() == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise QueryError(f"{name}: {text[:40]!r} is not a number") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise QueryError(f"{name}: must be between 0 and 1, got {text[:40]!r}")
    return canonical_bound(value)  # the bound the answer uses: the prior drawn is the one asked


def _unknown_parameters(allowed: set[str]) -> None:
    unknown = sorted(set(request.args) - allowed)
    if unknown:
        raise QueryError(f"{unknown[0]}: unknown parameter (allowed: {', '.join(sorted(allowed))})")


@bp.get("/prior")
def prior_curve():
    """The public prior of one probe, as the dataset's SVT² uses it: the probability of each of
    :data:`PRIOR_BINS` equal bins of [0, 1] and, for ``[minValue, maxValue]``, the probability and
    the count the prior predicts for the dataset's (public) number of patients. No cohort data."""
    _unknown_parameters({"datasetId", "probeId", "minValue", "maxValue"})
    dataset = _visible_dataset(request.args.get("datasetId"))
    probe = request.args.get("probeId", "")
    if not _PROBE.match(probe):
        raise QueryError(f"probeId: {'required' if not probe else repr(probe[:80]) + ' is not a probe id'}")
    lo, hi = _bound("minValue", 0.0), _bound("maxValue", 1.0)
    if lo > hi:
        raise QueryError(f"minValue: {lo} is greater than maxValue {hi}")
    engine = runtime().engine
    cohort = engine.cohort(dataset)
    edges = np.linspace(0.0, 1.0, PRIOR_BINS + 1)
    try:
        prior = engine.prior(dataset)
    except NoPriorChosen:  # only an unprotected dataset may have none; it is answered uniformly
        prior = None
    known = prior is not None and bool(prior.index([probe])[0] >= 0)
    if not known and cohort.probe_row(probe) < 0:  # the probe list is public: say so plainly
        raise QueryError(f"probeId: {probe!r} is not a probe of dataset {dataset!r}")
    if known:
        assert prior is not None
        bins = prior.probability(probe, edges[:-1], edges[1:])
        in_range = float(prior.probability(probe, lo, hi)[()])
        row = int(prior.index([probe])[0])
        mean, sd = float(prior.mean[row]), float(prior.sd[row])
    else:  # the engine's rule for a probe its prior lacks: the uniform prior on [0, 1]
        bins = np.diff(edges)
        in_range = max(0.0, min(hi, 1.0) - max(lo, 0.0))
        mean, sd = 0.5, math.sqrt(1.0 / 12.0)
    patients = cohort.n_patients
    return jsonify(
        {
            "datasetId": dataset,
            "probeId": probe,
            "prior": prior.name if prior is not None else None,
            "model": (prior.resolve_method() if known and prior is not None else "uniform"),
            "mean": mean,
            "sd": sd,
            "edges": [round(float(e), 6) for e in edges],
            "probabilities": [float(p) for p in bins],
            "range": {
                "minValue": lo,
                "maxValue": hi,
                "probability": in_range,
                "expectedPatients": patients * in_range,
            },
            "patients": patients,
        }
    )


@bp.get("/prior/probes")
def probe_suggestions():
    """Up to :data:`SUGGESTIONS` probe ids of a dataset starting with ``prefix`` (the probe list is
    public), for the researcher page's type-ahead."""
    _unknown_parameters({"datasetId", "prefix"})
    dataset = _visible_dataset(request.args.get("datasetId"))
    prefix = request.args.get("prefix", "")
    if not _PREFIX.match(prefix):
        raise QueryError(f"prefix: {prefix[:80]!r} is not the start of a probe id")
    ids = _sorted_probe_ids(dataset, runtime().engine.cohort(dataset).info.checksum)
    start = int(np.searchsorted(ids, prefix))
    found = [str(p) for p in ids[start : start + SUGGESTIONS] if str(p).startswith(prefix)]
    return jsonify({"datasetId": dataset, "prefix": prefix, "probeIds": found})


@functools.lru_cache(maxsize=8)
def _sorted_probe_ids(dataset: str, checksum: str) -> np.ndarray:
    """The dataset's probe ids, sorted; cached per version of its file (``checksum``)."""
    return np.sort(runtime().engine.cohort(dataset).probe_ids)
