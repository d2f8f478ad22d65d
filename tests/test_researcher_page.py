"""The researcher page's server side: the public prior curve (``/api/prior``), the probe type-ahead
(``/api/prior/probes``), the pages' Content-Security-Policy and the API reference's files.

The page itself is driven in a real browser by tests/test_browser.py; here the routes it uses are held
to the project's rules: bad input gets a 400 naming the field, nothing private leaves (only the public
prior and probe list), and the pages run only their own code.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mbeacon.api import create_app
from mbeacon.api.docs import PRIOR_BINS, SUGGESTIONS
from mbeacon.store.demo import ensure_demo
from mbeacon.store.priors import load_prior

BASE = "http://beacon.test"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return ensure_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def beacon(demo, tmp_path_factory):
    ledger = tmp_path_factory.mktemp("ledger") / "ledger.sqlite3"
    app = create_app(
        {
            "store": str(demo.store),
            "database_url": f"sqlite:///{ledger}",
            "rate_limit_per_minute": 0,
            "default_prior": demo.prior,
        }
    )
    key = app.config["MBEACON"].ledger.add_user("ada", tier="CONTROLLED")
    return app, {"Authorization": f"Bearer {key}"}, key


@pytest.fixture(scope="module")
def probes(beacon, demo):
    """A probe the prior knows, and a probe of the cohort that the prior lacks (if any)."""
    app, _, _ = beacon
    cohort = app.config["MBEACON"].engine.cohort(demo.dataset).probe_ids
    prior = load_prior(demo.store, demo.prior)
    known = prior.index(cohort) >= 0
    return str(cohort[known][0]), prior


def _get(beacon, path: str, **params):
    app, headers, _ = beacon
    return app.test_client().get(path, query_string=params, headers=headers, base_url=BASE)


def test_prior_curve_is_the_prior_svt2_uses(beacon, demo, probes):
    probe, prior = probes
    response = _get(
        beacon, "/api/prior", datasetId=demo.dataset, probeId=probe, minValue="0.25", maxValue="0.75"
    )
    assert response.status_code == 200
    body = response.get_json()
    assert body["probeId"] == probe and body["prior"] == demo.prior and body["model"] in ("empirical", "beta")
    assert len(body["edges"]) == PRIOR_BINS + 1 and len(body["probabilities"]) == PRIOR_BINS
    assert body["edges"][0] == 0.0 and body["edges"][-1] == 1.0
    assert math.isclose(sum(body["probabilities"]), 1.0, abs_tol=0.02)  # closed bins share their edges
    expected = float(prior.probability(probe, 0.25, 0.75)[()])
    assert body["range"] == {
        "minValue": 0.25,
        "maxValue": 0.75,
        "probability": expected,
        "expectedPatients": body["patients"] * expected,
    }
    assert body["patients"] == 60  # the public N of /api/datasets, never a per-probe count


def test_prior_bins_are_the_priors_own(beacon, demo, probes):
    """Each bin is P_prior of that bin, computed by the prior alone: no cohort value enters the curve."""
    probe, _ = probes
    first = _get(beacon, "/api/prior", datasetId=demo.dataset, probeId=probe).get_json()
    edges = np.linspace(0.0, 1.0, PRIOR_BINS + 1)
    prior = load_prior(demo.store, demo.prior)
    assert first["probabilities"] == prior.probability(probe, edges[:-1], edges[1:]).tolist()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "datasetId"),
        ({"datasetId": "no such/dataset"}, "datasetId"),
        ({"datasetId": "DS"}, "probeId"),
        ({"datasetId": "DS", "probeId": "cg99999999"}, "probeId"),
        ({"datasetId": "DS", "probeId": "cg 1"}, "probeId"),
        ({"datasetId": "DS", "probeId": "P", "minValue": "abc"}, "minValue"),
        ({"datasetId": "DS", "probeId": "P", "maxValue": "1.5"}, "maxValue"),
        ({"datasetId": "DS", "probeId": "P", "minValue": "nan"}, "minValue"),
        ({"datasetId": "DS", "probeId": "P", "minValue": "0.9", "maxValue": "0.1"}, "minValue"),
        ({"datasetId": "DS", "probeId": "P", "bogus": "1"}, "bogus"),
    ],
)
def test_prior_curve_refuses_bad_input_naming_the_field(beacon, demo, probes, params, field):
    probe, _ = probes
    filled = {k: v.replace("DS", demo.dataset) if k == "datasetId" else v for k, v in params.items()}
    if filled.get("probeId") == "P":
        filled["probeId"] = probe
    response = _get(beacon, "/api/prior", **filled)
    assert response.status_code == 400
    assert response.get_json()["error"]["errorMessage"].startswith(field + ":")


def test_prior_curve_of_a_dataset_the_caller_may_not_see(beacon, demo, probes):
    app, _, _ = beacon
    probe, _ = probes
    anonymous = app.test_client().get(
        "/api/prior", query_string={"datasetId": demo.dataset, "probeId": probe}, base_url=BASE
    )
    assert anonymous.status_code == 403  # the demo dataset is REGISTERED: as for /datasets, not listed
    missing = _get(beacon, "/api/prior", datasetId="elsewhere", probeId=probe)
    assert missing.status_code == 403
    assert missing.get_json()["error"]["errorMessage"] == anonymous.get_json()["error"][
        "errorMessage"
    ].replace(demo.dataset, "elsewhere")


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=12)))
def test_any_bound_is_answered_or_refused_by_name(beacon, demo, probes, text):
    probe, _ = probes
    response = _get(beacon, "/api/prior", datasetId=demo.dataset, probeId=probe, minValue=text)
    assert response.status_code in (200, 400)
    if response.status_code == 400:
        assert response.get_json()["error"]["errorMessage"].startswith("minValue:")
    else:
        value = response.get_json()["range"]["minValue"]
        assert 0.0 <= value <= 1.0 and math.copysign(1.0, value) == 1.0  # -0 is 0


def test_probe_suggestions(beacon, demo):
    app, _, _ = beacon
    ids = sorted(map(str, app.config["MBEACON"].engine.cohort(demo.dataset).probe_ids))
    body = _get(beacon, "/api/prior/probes", datasetId=demo.dataset, prefix="").get_json()
    assert body["probeIds"] == ids[:SUGGESTIONS]
    prefix = ids[7][:6]
    body = _get(beacon, "/api/prior/probes", datasetId=demo.dataset, prefix=prefix).get_json()
    assert body["probeIds"] == [p for p in ids if p.startswith(prefix)][:SUGGESTIONS]
    assert _get(beacon, "/api/prior/probes", datasetId=demo.dataset, prefix="zz").get_json()["probeIds"] == []
    bad = _get(beacon, "/api/prior/probes", datasetId=demo.dataset, prefix="<script>")
    assert bad.status_code == 400 and bad.get_json()["error"]["errorMessage"].startswith("prefix:")


def _csp(response) -> dict[str, str]:
    policy = response.headers["Content-Security-Policy"]
    return {
        part.split()[0]: part.partition(" ")[2] for part in (p.strip() for p in policy.split(";")) if part
    }


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_researcher_page_runs_only_its_own_code(beacon):
    _, _, key = beacon
    response = _get(beacon, "/api/docs")
    assert response.status_code == 200 and response.mimetype == "text/html"
    page = response.get_data(as_text=True)
    csp = _csp(response)
    assert csp["default-src"] == "'none'" and csp["connect-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'" and csp["base-uri"] == "'none'"
    scripts = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    styles = re.findall(r"<style>(.*?)</style>", page, re.DOTALL)
    assert len(scripts) == 1 and len(styles) == 1
    assert csp["script-src"] == _hash(scripts[0]) and csp["style-src"] == _hash(styles[0])  # no unsafe-inline
    assert "unsafe" not in response.headers["Content-Security-Policy"]
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert key not in page
    assert "localStorage" not in page and "sessionStorage" not in page and "document.cookie" not in page
    assert not re.search(r"https?://(?!beacon\.test)", page.replace("http://www.w3.org/2000/svg", ""))


def test_reference_page_and_its_files(beacon):
    app, _, _ = beacon
    client = app.test_client()
    page = client.get("/api/reference", base_url=BASE)
    assert page.status_code == 200
    csp = _csp(page)
    assert csp["script-src"] == "'self'" and csp["default-src"] == "'none'"
    html = page.get_data(as_text=True)
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(s.startswith(f"{BASE}/api/") for s in sources)  # nothing from a CDN
    assert f'data-spec="{BASE}/api/openapi.json"' in html
    for name, kind in (
        ("swagger-ui-bundle.js", "javascript"),
        ("swagger-ui.css", "css"),
        ("reference.js", "javascript"),
        ("reference.css", "css"),
    ):
        asset = client.get(f"/api/reference/{name}", base_url=BASE)
        assert asset.status_code == 200 and kind in asset.mimetype and len(asset.data) > 100
        assert asset.headers["X-Content-Type-Options"] == "nosniff"
    for name in ("index.html", "swagger-editor-bundle.js", "..%2F__init__.py", "LICENSE", "researcher.js"):
        assert client.get(f"/api/reference/{name}", base_url=BASE).status_code == 404


def test_the_pages_icon_is_served_at_the_root(beacon):
    """Browsers ask every site for /favicon.ico: an icon, not a 404 in every page view's log."""
    app, _, _ = beacon
    client = app.test_client()
    page = _get(beacon, "/api/docs").get_data(as_text=True)
    assert '<link rel="icon" href="/favicon.svg" type="image/svg+xml">' in page
    for path in ("/favicon.ico", "/favicon.svg"):
        icon = client.get(path, base_url=BASE)
        assert icon.status_code == 200 and icon.mimetype == "image/svg+xml"
        assert icon.data.startswith(b"<svg") and icon.headers["X-Content-Type-Options"] == "nosniff"
