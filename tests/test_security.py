"""Security checks over the Flask test client (issue 6, "Prove it holds").

* **Access table.** Every route of the app, for every kind of caller (no key, a malformed key, an
  unknown key id, a forged secret for a real key id, revoked keys, PUBLIC, REGISTERED and
  CONTROLLED researchers, an admin), has an explicit expected status and, where a route lists
  datasets, the exact datasets it may list. A route missing from :data:`ACCESS` fails
  :func:`test_every_route_is_in_the_access_table`, so no route can be added without deciding who
  may reach it.
* **Hidden datasets.** A dataset above the caller's tier is indistinguishable from one that does not
  exist: same status and same body, in every way of naming it.
* **Keys** are shown once (``users add``/``users rotate`` on the CLI, ``POST /api/admin/users``)
  and never again: not in any response body or header, log line, audit row or CLI listing; nor are
  their stored hash and salt.
* **Thresholds and raw counts** never leave the ledger or the engine. This extends
  ``tests/test_api_behaviour.py::test_no_thresholds_or_keys_in_responses_or_logs`` (thresholds
  planted in one boolean REGISTERED account, keys in bodies and logs) to the accounts it does not
  reach: noisy counts (CONTROLLED, ``count_epsilon > 0``), the shared anonymous account, the
  ``redraw`` variant, budgets exhausted with ``refuse`` and ``prior``, error bodies, the admin views,
  the CLI's ``budget show``, and to raw counts (``alpha``), checked as structured fields.
* **Key verification** is one salted hash and one :func:`hmac.compare_digest` of full digests,
  whatever the key, and the comparison alone decides.

Rate limits and noise independence across real gunicorn workers are in ``tests/test_security_e2e.py``.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from flask import Flask
from log_capture import capture_logs

from mbeacon.api.logs import redact
from mbeacon.beacon import keys
from mbeacon.beacon.config import TIERS
from mbeacon.cli import main as cli_main
from mbeacon.privacy.svt2 import SVT2State
from mbeacon.store.cohorts import CohortStore
from mbeacon.store.demo import DEMO_DATASET

DEMO = DEMO_DATASET  # PUBLIC here
REG = "registered-only-cohort"
CTL = "controlled-only-cohort"
MISSING = "no-such-cohort"
C = 5
POLICY = {"mechanism": "svt2", "c": C, "epsilon": 1.0}
DATASETS = {
    DEMO: {**POLICY, "tier": "PUBLIC"},
    REG: {**POLICY, "tier": "REGISTERED", "variant": "redraw", "on_exhausted": "prior"},
    CTL: {**POLICY, "tier": "CONTROLLED", "count_epsilon": 0.2},
}
EXTRA_PROBES = 200
PUBLIC_T = {p.get("threshold", 1) for p in DATASETS.values()}  # the public thresholds T

# --- callers ------------------------------------------------------------------------------------

USERS = ("PUBLIC", "REGISTERED", "CONTROLLED")
BAD_KEYS = ("malformed", "unknown_id", "forged", "revoked", "revoked_admin")
CALLERS = ("anonymous", "basic_auth", *BAD_KEYS, *USERS, "admin")
REJECTED = ("basic_auth", *BAD_KEYS)  # credentials that must be refused (401) wherever they are read


def tier_of(kind: str) -> str:
    """The tier a caller acts with on data routes (anonymous and admin keys act as PUBLIC)."""
    return kind if kind in USERS else "PUBLIC"


def visible(kind: str) -> set[str]:
    return {d for d, p in DATASETS.items() if TIERS.index(p["tier"]) <= TIERS.index(tier_of(kind))}


def hidden(kind: str) -> set[str]:
    return set(DATASETS) - visible(kind)


@dataclass
class World:
    """An app, its callers' request headers and keys, and a counter for unique names."""

    app: Flask
    mode: str
    headers: dict[str, dict[str, str]]
    keys: dict[str, str]
    probe: str
    counter: Iterator[int] = field(default_factory=itertools.count)

    @property
    def client(self):
        return self.app.test_client()


@pytest.fixture
def probes(store: Path) -> list[str]:
    return CohortStore(store).open(DEMO).probe_ids[:EXTRA_PROBES].tolist()


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def make_world(make_app, probes: list[str], mode: str = "refuse", **overrides) -> World:
    app = make_app(anonymous=mode, **overrides)
    ledger = app.config["MBEACON"].ledger
    made = {tier: ledger.add_user(f"user-{tier.lower()}", tier=tier) for tier in USERS}
    made["admin"] = ledger.add_user("ops", role="admin")
    made["revoked"] = ledger.add_user("gone")
    made["revoked_admin"] = ledger.add_user("gone-ops", role="admin")
    ledger.revoke_user("gone")
    ledger.revoke_user("gone-ops")
    ledger.add_user("target")  # what the admin routes act on
    made["forged"] = made["CONTROLLED"][:-43] + "A" * 43  # the highest tier's key id, a wrong secret
    made["unknown_id"] = keys.mint().key  # well formed, never stored
    made["malformed"] = "not-an-api-key"
    headers = {kind: bearer(key) for kind, key in made.items()}
    headers["anonymous"] = {}
    headers["basic_auth"] = {"Authorization": "Basic b3BzOnNlY3JldA=="}
    return World(app, mode, headers, made, probes[0])


def beacon_body(params, *, granularity: str = "boolean", include: str = "ALL") -> dict:
    return {
        "meta": {"apiVersion": "v2.0.0"},
        "query": {"requestParameters": params, "requestedGranularity": granularity,
                  "includeResultsetResponses": include},
    }  # fmt: skip


# --- the access table ---------------------------------------------------------------------------

Request = Callable[[World], tuple[str, dict]]


@dataclass(frozen=True)
class Access:
    """One route's rule: the request the table sends, the status for each caller kind, how to read the
    datasets a 200 lists (None: it lists none), and whether an admin may see every dataset there."""

    request: Request
    status: Mapping[str, int]
    lists: Callable[[dict], set[str]] | None = None
    operator: bool = False
    shared_anonymous: int | None = None  # anonymous's status when the operator set anonymous = "shared"

    def expected(self, kind: str, mode: str) -> int:
        if kind == "anonymous" and mode == "shared" and self.shared_anonymous is not None:
            return self.shared_anonymous
        return self.status[kind]


def statuses(*, anonymous: int, rejected: int, users: int, admin: int) -> dict[str, int]:
    return {"anonymous": anonymous, **dict.fromkeys(REJECTED, rejected), **dict.fromkeys(USERS, users),
            "admin": admin}  # fmt: skip


EVERYONE = statuses(anonymous=200, rejected=200, users=200, admin=200)  # credentials are not read
NOBODY = statuses(anonymous=404, rejected=404, users=404, admin=404)
CATALOGUE = statuses(anonymous=200, rejected=401, users=200, admin=200)  # anonymous sees PUBLIC
DATA = statuses(anonymous=401, rejected=401, users=200, admin=403)  # admin keys cannot query
OPERATOR = statuses(anonymous=401, rejected=401, users=403, admin=200)


def static(path: str, **query) -> Request:
    return lambda w: (path, {"query_string": query})


def query_get(w: World) -> tuple[str, dict]:
    return "/api/methylation", {
        "query_string": {"probeId": w.probe, "minValue": 0.5, "includeResultsetResponses": "ALL"}
    }


def query_post(w: World) -> tuple[str, dict]:
    return "/api/methylation", {"json": beacon_body({"probeId": w.probe, "minValue": 0.5})}


def new_user(w: World) -> tuple[str, dict]:
    return "/api/admin/users", {"json": {"name": f"new-{next(w.counter)}"}}


def listed_datasets(body: dict) -> set[str]:
    return {c["id"] for c in body["response"]["collections"]}


def answered_datasets(body: dict) -> set[str]:
    return {rs["id"] for rs in body["response"]["resultSets"]} | set(body["info"]["budgets"])


def budget_datasets(body: dict) -> set[str]:
    return set(body["response"]["budgets"])


ACCESS: dict[tuple[str, str], Access] = {
    ("/api/", "GET"): Access(static("/api/"), EVERYONE),
    ("/api/info", "GET"): Access(static("/api/info"), EVERYONE),
    ("/api/service-info", "GET"): Access(static("/api/service-info"), EVERYONE),
    ("/api/configuration", "GET"): Access(static("/api/configuration"), EVERYONE),
    ("/api/map", "GET"): Access(static("/api/map"), EVERYONE),
    ("/api/entry_types", "GET"): Access(static("/api/entry_types"), EVERYONE),
    # the terms of the datasets the caller may see: read like /datasets
    ("/api/filtering_terms", "GET"): Access(static("/api/filtering_terms"), CATALOGUE),
    ("/api/filtering_terms", "POST"): Access(
        lambda w: ("/api/filtering_terms", {"json": {"meta": {"apiVersion": "v2.0"}}}), CATALOGUE
    ),
    ("/api/schemas/<name>.json", "GET"): Access(static("/api/schemas/methylation.json"), EVERYONE),
    ("/api/openapi.json", "GET"): Access(static("/api/openapi.json"), EVERYONE),
    ("/api/docs", "GET"): Access(static("/api/docs"), EVERYONE),
    ("/api/reference", "GET"): Access(static("/api/reference"), EVERYONE),
    ("/api/reference/<asset>", "GET"): Access(static("/api/reference/swagger-ui.css"), EVERYONE),
    ("/api/prior", "GET"): Access(
        lambda w: ("/api/prior", {"query_string": {"datasetId": DEMO, "probeId": w.probe}}), CATALOGUE
    ),
    ("/api/prior/probes", "GET"): Access(static("/api/prior/probes", datasetId=DEMO, prefix="cg"), CATALOGUE),
    ("/api/datasets", "GET"): Access(static("/api/datasets"), CATALOGUE, listed_datasets),
    ("/api/datasets", "POST"): Access(
        lambda w: ("/api/datasets", {"json": {"meta": {"apiVersion": "v2.0"}, "query": {}}}),
        CATALOGUE,
        listed_datasets,
    ),
    ("/api/datasets/<dataset>", "GET"): Access(static(f"/api/datasets/{DEMO}"), CATALOGUE),
    ("/api/datasets/<dataset>/methylation", "GET"): Access(
        lambda w: (f"/api/datasets/{DEMO}/methylation", query_get(w)[1]), DATA, shared_anonymous=200
    ),
    ("/api/datasets/<dataset>/methylation", "POST"): Access(
        lambda w: (f"/api/datasets/{DEMO}/methylation", query_post(w)[1]), DATA, shared_anonymous=200
    ),
    ("/api/methylation", "GET"): Access(query_get, DATA, answered_datasets, shared_anonymous=200),
    ("/api/methylation", "POST"): Access(query_post, DATA, answered_datasets, shared_anonymous=200),
    ("/api/budget", "GET"): Access(static("/api/budget"), DATA, budget_datasets, shared_anonymous=200),
    ("/api/admin/users", "GET"): Access(static("/api/admin/users"), OPERATOR, operator=True),
    ("/api/admin/users", "POST"): Access(new_user, {**OPERATOR, "admin": 201}, operator=True),
    ("/api/admin/users/<name>/revoke", "POST"): Access(
        static("/api/admin/users/target/revoke"), OPERATOR, operator=True
    ),
    ("/api/admin/budget", "GET"): Access(static("/api/admin/budget"), OPERATOR, operator=True),
    ("/api/admin/budget/<holder>/<dataset>", "PUT"): Access(
        lambda w: (f"/api/admin/budget/user:target/{CTL}", {"json": {"c": 3}}), OPERATOR, operator=True
    ),
    ("/api/admin/budget/<holder>/<dataset>/reset", "POST"): Access(
        lambda w: (f"/api/admin/budget/user:target/{CTL}/reset", {"json": {"confirm": True}}),
        OPERATOR,
        operator=True,
    ),
    ("/api/admin/audit", "GET"): Access(static("/api/admin/audit", limit="50"), OPERATOR, operator=True),
    ("/livez", "GET"): Access(static("/livez"), EVERYONE),
    ("/favicon.ico", "GET"): Access(static("/favicon.ico"), EVERYONE),
    ("/favicon.svg", "GET"): Access(static("/favicon.svg"), EVERYONE),
    ("/readyz", "GET"): Access(static("/readyz"), EVERYONE),
    ("/metrics", "GET"): Access(static("/metrics"), OPERATOR, operator=True),
}


def routes(app: Flask) -> set[tuple[str, str]]:
    return {
        (rule.rule, method)
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }


@dataclass
class Exchange:
    kind: str
    route: tuple[str, str]
    status: int
    text: str  # body and headers
    body: dict | None


def drive(world: World) -> tuple[list[str], list[Exchange]]:
    """Every route of the table as every caller; the rule violations found, and every exchange."""
    problems: list[str] = []
    exchanges: list[Exchange] = []
    for route, access in ACCESS.items():
        _, method = route
        for kind in CALLERS:
            path, options = access.request(world)
            response = world.client.open(path, method=method, headers=world.headers[kind], **options)
            text = response.get_data(as_text=True)
            body = response.get_json(silent=True)
            exchanges.append(Exchange(kind, route, response.status_code, text + str(response.headers), body))
            where = f"{method} {route[0]} as {kind}"
            expected = access.expected(kind, world.mode)
            if response.status_code != expected:
                problems.append(f"{where}: {response.status_code}, expected {expected}")
                continue
            may_see = set(DATASETS) if access.operator and kind == "admin" else visible(kind)
            problems += [f"{where}: names dataset {d}" for d in sorted(set(DATASETS) - may_see) if d in text]
            if access.lists is not None and response.status_code == 200:
                shown = access.lists(body)
                if shown != visible(kind):
                    problems.append(f"{where}: lists {sorted(shown)}, expected {sorted(visible(kind))}")
            if response.status_code >= 400:
                if not (body and body["error"]["errorCode"] == response.status_code):
                    problems.append(f"{where}: not a Beacon error body")
                if (response.status_code == 401) != ("WWW-Authenticate" in response.headers):
                    problems.append(f"{where}: WWW-Authenticate must come with 401 and only with it")
    return problems, exchanges


def test_every_route_is_in_the_access_table(app) -> None:
    """A new route fails here until its access rule is written into ACCESS (and a removed one too)."""
    found = routes(app)
    assert found - set(ACCESS) == set(), "routes without an access rule: add them to ACCESS"
    assert set(ACCESS) - found == set(), "ACCESS has rules for routes that no longer exist"
    for access in ACCESS.values():
        assert set(access.status) == set(CALLERS)


@pytest.mark.parametrize("mode", ["refuse", "shared"])
def test_access_table(make_app, probes, mode: str) -> None:
    world = make_world(make_app, probes, mode)
    problems, exchanges = drive(world)
    assert problems == []
    assert len(exchanges) == len(ACCESS) * len(CALLERS)
    # refused credentials all get the same answer: a wrong secret for a real key id, an unknown id,
    # a revoked key and garbage are indistinguishable (the bodies differ only in their meta)
    by_route: dict[tuple[str, str], set[str]] = {}
    for ex in exchanges:
        if ex.kind in BAD_KEYS and ex.status == 401:
            by_route.setdefault(ex.route, set()).add(json.dumps(ex.body["error"]))
    assert by_route and all(len(bodies) == 1 for bodies in by_route.values()), by_route
    # the table's queries did not open an account anywhere a caller may not see
    opened = {(a.principal, a.dataset) for a in world.app.config["MBEACON"].ledger.accounts()}
    holders = {f"user:user-{tier.lower()}": tier for tier in USERS} | {"anonymous": "PUBLIC"}
    assert {(h, d) for h, d in opened if h in holders and d in hidden(holders[h])} == set()
    if mode == "shared":
        assert {d for h, d in opened if h == "anonymous"} == {DEMO}
    else:
        assert not any(h == "anonymous" for h, _ in opened)


# --- hidden datasets ----------------------------------------------------------------------------


def _naming(world: World, kind: str, dataset: str) -> list[tuple[int, str]]:
    """Every way of naming ``dataset`` in a query, as ``kind``: (status, body with the name masked)."""
    headers = world.headers[kind]
    params = {"probeId": world.probe, "minValue": 0.25}
    first_visible = DEMO
    calls = [
        ("GET", {"query_string": {**params, "datasetIds": dataset}}),
        ("GET", {"query_string": {**params, "datasetIds": f"{first_visible},{dataset}"}}),
        ("GET", {"query_string": {**params, "datasetIds": dataset, "testMode": "true"}}),
        ("GET", {"query_string": {**params, "datasetIds": dataset, "requestedGranularity": "count"}}),
        ("POST", {"json": beacon_body({**params, "datasetIds": [dataset]})}),
        (
            "POST",
            {
                "json": beacon_body(
                    [{**params, "datasetIds": [first_visible]}, {**params, "datasetIds": [dataset]}]
                )
            },
        ),
        ("POST", {"json": beacon_body({**params, "datasetIds": [dataset]}, granularity="count")}),
    ]
    out = []
    for method, options in calls:
        response = world.client.open("/api/methylation", method=method, headers=headers, **options)
        out.append((response.status_code, response.get_data(as_text=True).replace(dataset, "<dataset>")))
    return out


@pytest.mark.parametrize("mode", ["refuse", "shared"])
def test_a_hidden_dataset_is_indistinguishable_from_a_missing_one(make_app, probes, mode: str) -> None:
    """Below a dataset's tier, every way of naming it answers exactly as for an id that does not exist
    (status and body), with no partial answer; an admin key gets one refusal whatever the dataset."""
    world = make_world(make_app, probes, mode)
    kinds = [*USERS, "admin"] + (["anonymous"] if mode == "shared" else [])
    compared = 0
    for kind in kinds:
        missing = _naming(world, kind, MISSING)
        assert {status for status, _ in missing} == {403}, (kind, missing)
        for dataset in sorted(hidden(kind)) if kind != "admin" else sorted(DATASETS):
            assert _naming(world, kind, dataset) == missing, (kind, dataset)
            compared += 1
        budgets = world.client.get("/api/budget", headers=world.headers[kind])
        if kind != "admin":
            assert set(budgets.get_json()["response"]["budgets"]) == visible(kind)
    assert compared == len(hidden("PUBLIC")) + len(hidden("REGISTERED")) + len(DATASETS) + (
        len(hidden("anonymous")) if mode == "shared" else 0
    )
    assert world.app.config["MBEACON"].ledger.accounts() == []  # nothing was answered or opened
    assert not [e for e in world.app.config["MBEACON"].ledger.audit_log(limit=1000) if e["event"] == "query"]


def test_public_metrics_do_not_name_hidden_datasets(make_app, probes) -> None:
    world = make_world(make_app, probes, metrics_public=True)
    post = world.client.post("/api/methylation", headers=world.headers["CONTROLLED"],
                             json=beacon_body({"probeId": world.probe, "datasetIds": [CTL]}))  # fmt: skip
    assert post.status_code == 200
    public = world.client.post("/api/methylation", headers=world.headers["CONTROLLED"],
                               json=beacon_body({"probeId": world.probe, "datasetIds": [DEMO]}))  # fmt: skip
    assert public.status_code == 200
    text = world.client.get("/metrics").get_data(as_text=True)
    assert f'dataset="{DEMO}"' in text, "a PUBLIC dataset's series stay on the public page"
    assert CTL not in text
    admin = world.client.get("/metrics", headers=world.headers["admin"]).get_data(as_text=True)
    assert f'dataset="{CTL}"' in admin, "an admin key sees every dataset's series"


# --- keys ---------------------------------------------------------------------------------------


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    handler = capture_logs()
    yield handler.stream
    logging.getLogger("mbeacon").removeHandler(handler)


def _cli(*args: str) -> SimpleNamespace:
    result = CliRunner().invoke(cli_main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return SimpleNamespace(stdout=result.stdout, stderr=result.stderr)


def _config_file(tmp_path: Path, database_url: str) -> str:
    path = tmp_path / "cli.toml"
    path.write_text(f'database_url = "{database_url}"\n')
    return str(path)


def _secret(key: str) -> str:
    return key[len("mbk_") + 12 + 1 :]


def test_keys_are_shown_once_and_never_again(make_app, probes, tmp_path, captured_logs) -> None:
    url = f"sqlite:///{tmp_path}/keys/ledger.sqlite3"
    world = make_world(make_app, probes, "refuse", database_url=url)
    config = _config_file(tmp_path, url)
    shown: list[str] = []  # every text that legitimately carries a key once: its creation
    added = _cli("users", "add", "cli-user", "--tier", "CONTROLLED", "--config", config)
    added_admin = _cli("users", "add", "cli-ops", "--admin", "--config", config)
    cli_key, cli_admin = added.stdout.strip(), added_admin.stdout.strip()
    assert keys.split(cli_key) and keys.split(cli_admin)
    assert "only once" in added.stderr and cli_key not in added.stderr
    rotated = _cli("users", "rotate", "cli-user", "--config", config)
    new_cli_key = rotated.stdout.strip()
    shown += [added.stdout, added_admin.stdout, rotated.stdout]
    created = world.client.post("/api/admin/users", json={"name": "api-user", "tier": "REGISTERED"},
                                headers=world.headers["admin"])  # fmt: skip
    assert created.status_code == 201
    api_key = created.get_json()["response"]["key"]
    shown.append(_exchange(created))
    once = [cli_key, cli_admin, new_cli_key, api_key]  # keys whose creation shows them

    # every route as every caller (the table's admin also creates users: those 201 bodies show keys)
    problems, exchanges = drive(world)
    assert problems == []
    texts = []
    for ex in exchanges:
        if ex.status == 201:
            shown.append(ex.text)
            once.append(ex.body["response"]["key"])
        else:
            texts.append(ex.text)
    client = world.client
    for key in (new_cli_key, api_key, cli_key):  # the new keys on the data routes, errors included
        headers = bearer(key)
        for path, options in (
            query_get(world),
            query_post(world),
            ("/api/budget", {}),
            ("/api/datasets", {}),
        ):
            for method in ("GET", "POST") if path == "/api/methylation" else ("GET",):
                texts.append(_exchange(client.open(path, method=method, headers=headers, **options)))
        texts.append(
            _exchange(client.get("/api/methylation", query_string={"minValue": "x"}, headers=headers))
        )
        texts.append(_exchange(client.get("/api/nothing-here", headers=headers)))
        texts.append(_exchange(client.delete("/api/budget", headers=headers)))
    for path in ("/api/admin/users", "/api/admin/budget", "/api/admin/audit", "/metrics"):
        texts.append(_exchange(client.get(path, headers=bearer(cli_admin))))
    cli_outputs = [
        _cli(*command, "--config", config)
        for command in (
            ("users", "list"),
            ("users", "list", "--json"),
            ("budget", "show"),
            ("budget", "show", "--json"),
        )
    ]
    texts += [o.stdout + o.stderr for o in cli_outputs]
    logs = captured_logs.getvalue()
    texts.append(logs)
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        stored = db.execute("SELECT name, key_salt, key_hash FROM users").fetchall()
        texts.append(json.dumps(db.execute("SELECT * FROM audit_log").fetchall()))

    assert json.loads(cli_outputs[1].stdout) and "cli-user" in cli_outputs[0].stdout
    made_here = [k for k in world.keys.values() if keys.split(k)]  # by the test: never shown
    assert len(once) == len(set(once)) == 4 + 1 and len(made_here) == 8
    for key in (*once, *made_here):
        assert all(key not in t and _secret(key) not in t for t in texts), f"key {key[:17]}... shown again"
        assert sum(t.count(_secret(key)) for t in shown) == (key in once)  # once: where it was created
    for name, salt, digest in stored:
        assert len(salt) == 32 and len(digest) == 64
        assert all(salt not in t and digest not in t for t in (*texts, *shown)), f"{name}'s hash or salt"
    assert "mbk_" not in logs  # nothing even tried to log a key (the formatter would mask its secret)
    for line in logs.splitlines():
        entry = json.loads(line)
        assert not {k.lower() for k in _keys_in(entry)} & {"key", "authorization", "key_hash", "key_salt"}
    # the users listings carry no key material at all
    for user in json.loads(cli_outputs[1].stdout):
        assert set(user) == {"name", "role", "tier", "group", "created", "revoked", "expires"}
    listing = client.get("/api/admin/users", headers=world.headers["admin"]).get_json()["response"]["users"]
    assert all(
        set(user) == {"name", "role", "tier", "group", "created", "revoked", "expires"} for user in listing
    )


def _exchange(response) -> str:
    return response.get_data(as_text=True) + str(response.headers)


def _keys_in(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys_in(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys_in(v)}
    return set()


def _values_of(value, name: str) -> list:
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k == name]
        return found + [x for v in value.values() for x in _values_of(v, name)]
    if isinstance(value, list):
        return [x for v in value for x in _values_of(v, name)]
    return []


# --- thresholds and raw counts ------------------------------------------------------------------

# Names a secret would have if a field carried one: thresholds, raw counts, the true statistic.
FORBIDDEN = re.compile(r"(?i)^(z1|z2|z|thresholds|noisy_?thresholds?|alpha|raw_?counts?|true_?counts?|"
                       r"counts?_in_range|secret|key_?(hash|salt))$")  # fmt: skip
PLANTED = {  # distinctive non-lattice thresholds planted in accounts (drawn ones are integers)
    ("anonymous", DEMO): (6.1827364519, -3.9182736455),
    ("user:reg", REG): (5.2736451928, -2.8374659102),
    ("user:con", CTL): (4.3645192837, -5.4657382910),
    ("user:con", DEMO): (3.4554637281, -4.5748392016),
}


def _queries(probes: list[str], dataset: str, *, wide: bool) -> Iterator[dict]:
    """Distinct queries: wide ranges (many patients in range) or narrow ones near 1."""
    for k in range(100):
        for p in probes:
            lo = round(k / 10_000, 4) if wide else round(0.9 + k / 1000, 3)
            yield {"probeId": p, "minValue": lo, "maxValue": 1.0, "datasetIds": [dataset]}


def _plant(app: Flask, holder: str, dataset: str, z: tuple[float, float]) -> None:
    ledger = app.config["MBEACON"].ledger
    with ledger.db.transaction() as tx:
        account = ledger.lock_account(tx, holder, dataset, lambda: None)
        ledger.save_account(tx, account, SVT2State(z[0], z[1], account.state.count))


def test_thresholds_and_raw_counts_never_leave_the_engine(make_app, probes, store, tmp_path, captured_logs):
    url = f"sqlite:///{tmp_path}/secrets/ledger.sqlite3"
    app = make_app(anonymous="shared", database_url=url)
    ledger = app.config["MBEACON"].ledger
    con, reg = ledger.add_user("con", tier="CONTROLLED"), ledger.add_user("reg")
    admin = ledger.add_user("ops", role="admin")
    client = app.test_client()
    texts: list[str] = []
    bodies: list[dict] = []

    def call(method: str, path: str, key: str | None = None, **options):
        response = client.open(path, method=method, headers=bearer(key), **options)
        texts.append(_exchange(response))
        if response.is_json:
            bodies.append(response.get_json())
        return response

    streams = {(CTL, True): _queries(probes, CTL, wide=True), (REG, False): _queries(probes, REG, wide=False),
               (DEMO, False): _queries(probes, DEMO, wide=False)}  # fmt: skip

    def take(dataset: str, n: int, wide: bool = False) -> list[dict]:
        return list(itertools.islice(streams[(dataset, wide)], n))

    def until_exhausted(key: str | None, dataset: str, wide: bool = False, **options) -> None:
        for _ in range(200):
            response = call(
                "POST", "/api/methylation", key, json=beacon_body(take(dataset, 50, wide), **options)
            )
            if response.status_code == 429:
                return
            assert response.status_code == 200, response.get_data(as_text=True)
            if any(rs["info"].get("budgetExhausted") for rs in response.get_json()["response"]["resultSets"]):
                return
        pytest.fail(f"{dataset}: budget not exhausted")

    # open the accounts, then plant distinctive thresholds in them
    for (_holder, dataset), key in zip(PLANTED, (None, reg, con, con), strict=True):
        granularity = "count" if dataset == CTL else "boolean"
        params = take(dataset, 1, dataset == CTL)
        opened = call("POST", "/api/methylation", key, json=beacon_body(params, granularity=granularity))
        assert opened.status_code == 200
    for (holder, dataset), z in PLANTED.items():
        _plant(app, holder, dataset, z)

    # noisy counts: single GET and batches, until the CONTROLLED account is spent (then 429)
    single = take(CTL, 1, wide=True)[0]
    call("GET", "/api/methylation", con, query_string={**single, "datasetIds": CTL,
                                                       "requestedGranularity": "count",
                                                       "includeResultsetResponses": "ALL"})  # fmt: skip
    until_exhausted(con, CTL, wide=True, granularity="count")
    refused = call("POST", "/api/methylation", con, json=beacon_body(take(CTL, 5, True), granularity="count"))
    assert refused.status_code == 429 and refused.get_json()["info"]["dataset"] == CTL
    # the shared anonymous account (refuse) and the redraw account (prior) spent too
    until_exhausted(None, DEMO)
    until_exhausted(reg, REG)
    prior = call("POST", "/api/methylation", reg, json=beacon_body(take(REG, 20)))
    assert {rs["info"]["answeredFrom"] for rs in prior.get_json()["response"]["resultSets"]} == {"prior"}
    call("POST", "/api/methylation", con, json=beacon_body(take(DEMO, 30)))
    # errors and the views of budgets
    call("GET", "/api/methylation", con, query_string={"probeId": probes[0], "minValue": "2"})
    call("GET", "/api/methylation", reg, query_string={"probeId": probes[0], "datasetIds": CTL})
    call("POST", "/api/methylation", con, data="{broken", content_type="application/json")
    for key in (None, con, reg):
        call("GET", "/api/budget", key)
        call("GET", "/api/datasets", key)
    for path in ("/api/admin/budget", "/api/admin/audit?limit=10000", "/metrics", "/readyz"):
        call("GET", path, admin)
    call("PUT", f"/api/admin/budget/user:con/{CTL}", admin, json={"c": 4})
    call("POST", f"/api/admin/budget/user:reg/{REG}/reset", admin, json={"confirm": True})
    config = _config_file(tmp_path, url)
    texts += [
        _cli("budget", "show", "--config", config).stdout,
        _cli("budget", "show", "--json", "--config", config).stdout,
    ]
    bodies += json.loads(texts[-1])
    logs = captured_logs.getvalue()
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        thresholds = dict(
            ((p, d), (z1, z2))
            for p, d, z1, z2 in db.execute("SELECT principal, dataset, z1, z2 FROM accounts")
        )
        audit = db.execute("SELECT query, detail FROM audit_log").fetchall()
    texts += [logs, json.dumps(audit)]

    # 1. the planted thresholds (still in place, or replaced by redraw) are nowhere
    assert thresholds[("user:con", CTL)] == PLANTED[("user:con", CTL)]  # refuse: spent with them
    for z in PLANTED.values():
        for secret in (*map(repr, z), *(str(v)[:7] for v in z)):
            assert all(secret not in t for t in texts), secret
    # 2. no field anywhere is named like a secret, and every "threshold" is the public T
    log_entries = [json.loads(line) for line in logs.splitlines()]
    audit_json = [json.loads(text) for row in audit for text in row if text and text.startswith("{")]
    for value in (*bodies, *log_entries, *audit_json):
        assert not {k for k in _keys_in(value) if FORBIDDEN.match(k)}, _keys_in(value)
    assert {v for b in bodies for v in _values_of(b, "threshold")} <= PUBLIC_T
    # 3. raw counts: count answers from the data are noisy (not alpha), logs carry no counts or queries
    cohort = CohortStore(store).open(CTL)
    counted = [b for b in bodies if b.get("meta", {}).get("returnedGranularity") == "count"]
    result_sets = [rs for b in counted for rs in b["response"]["resultSets"]]
    data_answers = [rs for rs in result_sets if rs["id"] == CTL and rs["info"]["answeredFrom"] == "data"]
    assert len(data_answers) == C
    alpha = [int(cohort.count_in_range(cohort.probe_index([rs["info"]["probeId"]]), [rs["info"]["range"][0]],
                                       [rs["info"]["range"][1]])[0]) for rs in data_answers]  # fmt: skip
    assert min(alpha) >= 20  # wide ranges: the noise (scale c/count_epsilon = 25) is seldom clipped at 0
    noisy = [rs["resultsCount"] for rs in data_answers]
    # each noisy count equals its alpha with probability (1-q)/(1+q) = 0.02 (q = e^-1/25): all five
    # equal has probability 3e-9
    assert noisy != alpha
    for entry in log_entries:
        assert not {k for k in entry if "count" in k.lower() or k in ("exists", "answeredFrom")}
        assert not any(p in json.dumps(entry) for p in probes), "query text in a log line"
    for query, _ in audit:
        if query:
            assert set(json.loads(query)) <= {"probeId", "referenceName", "start", "minValue", "maxValue",
                                              "probe", "granularity"}  # fmt: skip
    budget_info = refused.get_json()["info"]
    assert set(budget_info) == {"dataset", "positivesUsed", "positivesTotal", "epsilonSpent", "epsilonTotal"}


# --- key verification ---------------------------------------------------------------------------


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Count every hash and comparison of ``keys.verify``; ``force`` overrides the comparison's result."""
    import hmac

    seen = SimpleNamespace(digests=[], compares=[], force=None)

    def digest(salt_hex: str, secret: str) -> str:
        out = real_digest(salt_hex, secret)
        seen.digests.append(out)
        return out

    def compare_digest(a, b) -> bool:
        seen.compares.append((a, b))
        result = hmac.compare_digest(a, b)
        return result if seen.force is None else seen.force

    real_digest = keys.digest
    monkeypatch.setattr(keys, "digest", digest)
    monkeypatch.setattr(keys, "hmac", SimpleNamespace(compare_digest=compare_digest))
    return seen


def test_key_check_is_one_hash_and_one_full_constant_time_comparison(app, spies) -> None:
    """Whatever the key (valid, wrong secret for a real key id, unknown id, revoked, garbage), the
    ledger hashes once and compares two full 64-hex digests once with ``hmac.compare_digest``: no
    early exit reveals that a key id exists (an unknown id is compared against a dummy digest)."""
    ledger = app.config["MBEACON"].ledger
    good, gone = ledger.add_user("alice"), ledger.add_user("bob")
    ledger.revoke_user("bob")
    with sqlite3.connect(ledger.db.path) as db:
        stored = dict(db.execute("SELECT name, key_hash FROM users"))
    forged = good[:-43] + ("B" if good[-43] != "B" else "C") + good[-42:]  # first secret char changed
    cases = {
        "valid": (good, True),
        "wrong secret, real key id": (forged, False),
        "unknown key id": (keys.mint().key, False),
        "revoked": (gone, False),
        "malformed": ("mbk_short", False),
        "empty secret": (good[:-43], False),
    }
    hex64 = re.compile(r"^[0-9a-f]{64}$")
    for name, (key, accepted) in cases.items():
        spies.digests.clear()
        spies.compares.clear()
        assert (ledger.authenticate(key) is not None) is accepted, name
        assert len(spies.digests) == 1 and len(spies.compares) == 1, name
        ((a, b),) = spies.compares
        assert hex64.match(a) and hex64.match(b), (name, a, b)  # full digests, never a prefix
        assert a == spies.digests[0], name  # the fresh hash of what was sent
    spies.compares.clear()
    ledger.authenticate(forged)
    assert spies.compares[0][1] == stored["alice"]  # a real id: compared with its stored digest
    # the comparison alone decides: forced true, a forged secret of a real id gets in; forced false,
    # the right key does not; an unknown id or a revoked key stays out whatever it returns
    spies.force = True
    assert ledger.authenticate(forged).name == "alice"
    assert ledger.authenticate(keys.mint().key) is None and ledger.authenticate(gone) is None
    spies.force = False
    assert ledger.authenticate(good) is None


def test_one_key_check_per_request(make_app, spies) -> None:
    """Over HTTP a request checks its key once, refused or not (the rate limiter asks first, then the
    route): a wrong secret for a real key id costs what an unknown id costs."""
    app = make_app(rate_limit_per_minute=1000)
    ledger = app.config["MBEACON"].ledger
    good, gone = ledger.add_user("alice"), ledger.add_user("bob")
    ledger.revoke_user("bob")
    client = app.test_client()
    for key, status in ((good, 200), (good[:-43] + "A" * 43, 401), (keys.mint().key, 401), (gone, 401),
                        ("junk", 401)):  # fmt: skip
        spies.compares.clear()
        assert client.get("/api/budget", headers=bearer(key)).status_code == status
        assert len(spies.compares) == 1, (key[:20], len(spies.compares))


# --- logs ---------------------------------------------------------------------------------------


def test_log_lines_carry_the_pid_and_mask_key_secrets(app, captured_logs) -> None:
    """Each JSON line names its process (so a worker's lines can be told apart) and a key that some
    library message might carry is masked; the key id stays, so the line is still useful."""
    import os

    key = keys.mint().key
    logging.getLogger("mbeacon.test").warning(
        "saw %s", key, extra={"url": "postgresql://beacon:hunter2@db/ledger", "nested": {"k": key}}
    )
    assert app.test_client().get("/livez").status_code == 200
    lines = [json.loads(line) for line in captured_logs.getvalue().splitlines()]
    assert lines and all(entry["pid"] == os.getpid() for entry in lines)
    text = captured_logs.getvalue()
    assert _secret(key) not in text and "hunter2" not in text
    assert f"{key[:17]}<redacted>" in lines[0]["message"]
    assert lines[0]["url"] == "postgresql://beacon:<redacted>@db/ledger"
    assert redact("no secrets here: mbk_ and ://host/x") == "no secrets here: mbk_ and ://host/x"


# --- the rate limiter's Redis client ------------------------------------------------------------


def test_redis_client_is_made_once_per_process_under_concurrent_requests(monkeypatch) -> None:
    """gthread workers ask from several threads at once: one client must be made, not one per thread
    (redis-py closes the pool of a dropped client while another thread still reads from it)."""
    import threading
    import time

    import redis

    from mbeacon.api.ratelimit import RateLimiter

    made = []

    def from_url(url: str, **options) -> SimpleNamespace:
        time.sleep(0.05)  # a slow connect widens the window a race needs
        made.append(url)
        return SimpleNamespace(url=url)

    monkeypatch.setattr(redis, "Redis", SimpleNamespace(from_url=from_url))
    limiter = RateLimiter(10, "redis://127.0.0.1:1/0")
    start = threading.Barrier(8)
    clients = []

    def use() -> None:
        start.wait()
        clients.append(limiter._client())

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and len({id(c) for c in clients}) == 1 and len(clients) == 8


def test_a_broken_redis_connection_lets_the_request_through(monkeypatch, captured_logs) -> None:
    """A socket closed under redis-py surfaces as ValueError or OSError, not only RedisError: the limit
    protects the service, so the request is let through with a warning, never answered with a 500."""
    from mbeacon.api.ratelimit import RateLimiter

    def broken() -> None:
        raise ValueError("I/O operation on closed file.")

    pipeline = SimpleNamespace(incr=lambda key: None, expire=lambda key, seconds: None, execute=broken)
    limiter = RateLimiter(10, "redis://127.0.0.1:1/0")
    monkeypatch.setattr(limiter, "_client", lambda: SimpleNamespace(pipeline=lambda: pipeline))
    assert limiter.hit("user:alice") == (True, 0)
    (entry,) = [json.loads(line) for line in captured_logs.getvalue().splitlines()]
    assert entry["level"] == "warning" and entry["error"].startswith("ValueError")
