"""The ledger floor: the beacon's app with one more route, served under ``mbeacon serve``'s settings.

``GET /bench/floor`` does the least that a free SVT² answer must do on this service, and nothing else:

* the key check of every query (the bearer key's row read, its salted hash compared);
* the ledger transaction of a free answer, through the ledger's own methods: the writers' lock and
  ``BEGIN IMMEDIATE``, the account read and locked with its cached answers, a cache row, an audit row,
  the commit.

It skips what the real endpoint adds to that: the Beacon query's parsing and validation, alpha from
the store, beta from the prior, the SVT² step, the fsync of a spent positive, the answer's metrics and
the Beacon v2 response. Its throughput against ``/livez`` on the same server is therefore a ceiling
for any SVT² endpoint that keeps the ledger's contract (the key check, and every answer's cache and
audit rows committed before it is sent): ``bench_service`` measures it beside the real endpoint, so
the gap between the two says how much room the SVT²-specific work has.

The cache key is the request's query string, so the benchmark's queries (each one new) write a cache
row each, as new queries to the real endpoint do; a repeated query string is answered from the cache
and writes only its audit row, as a repeat does there.

Only the benchmark starts this server: ``python -m benchmarks.floor_server --config C --bind H:P``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

FLOOR_PATH = "/bench/floor"


def floor() -> Any:
    """A free answer's key check and ledger transaction, and a minimal JSON body (see the module)."""
    from flask import jsonify, request

    from mbeacon.api.auth import principal
    from mbeacon.api.runtime import runtime
    from mbeacon.beacon.ledger.ledger import AuditRow, CachedAnswer

    rt = runtime()
    caller = principal(for_query=True)
    dataset = rt.engine.dataset_ids()[0]
    holder = caller.budget_holder(rt.config.policy(dataset).scope)
    key = request.query_string.decode("latin-1")
    with rt.ledger.db.transaction() as tx:
        _, cached = rt.ledger.lock_account_and_answers(
            tx, holder, dataset, [key], lambda: rt.engine.new_params(dataset)
        )
        hit = cached.get(key)
        if hit is None:
            rt.ledger.store_answers(tx, holder, dataset, [(key, CachedAnswer(False, "prior", None))])
        rt.ledger.append_audit(
            tx, [AuditRow("query", caller.name, holder, dataset, key, "prior", cached=hit is not None)]
        )
    return jsonify({"exists": False if hit is None else hit.exists, "cached": hit is not None})


def create_app(config_path: str | None) -> Any:
    """The beacon's app (:func:`mbeacon.api.create_app`) with ``GET /bench/floor`` added."""
    from mbeacon.api import create_app as beacon_app

    app = beacon_app(config_path)
    app.add_url_rule(FLOOR_PATH, "bench_floor", floor, methods=["GET"])
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.floor_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", required=True, help="the beacon's TOML configuration")
    parser.add_argument("--bind", required=True, help="HOST:PORT")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args(argv)
    from mbeacon import server  # sets up the metrics directory before anything imports the app

    server.prepare_metrics_dir()
    config = os.path.abspath(args.config)
    os.environ["MBEACON_CONFIG"] = config
    server.run(config, server.settings(args.bind, args.workers, args.threads), app_factory=create_app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
