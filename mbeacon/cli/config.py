"""``mbeacon config check``: a configuration checked against its store and ledger without serving.

It runs the checks ``mbeacon serve`` (and every worker, and ``mbeacon reload``) runs, and prints what
each dataset will be served at and who may ask it. It reads the store and the ledger and creates or
changes neither (a ledger that does not exist yet is reported, not created).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mbeacon.cli._service import check_backends, config_option, load_service_config, sqlite_path
from mbeacon.cli._ui import fail, table_console
from mbeacon.cli.lazy_group import HELP_OPTIONS, Group

if TYPE_CHECKING:
    from mbeacon.beacon.config import ServiceConfig
    from mbeacon.beacon.preflight import DatasetPlan, LedgerState


class Checked:
    """A configuration that passed every check: the datasets' plans, the ledger, and notes."""

    def __init__(self, config: ServiceConfig, plans: list[DatasetPlan], state: LedgerState) -> None:
        from mbeacon.beacon.preflight import coherence_notes

        self.config = config
        self.plans = plans
        self.state = state
        self.notes = coherence_notes(config, plans, state) + _issuer_notes(config)


def _issuer_notes(config: ServiceConfig) -> list[str]:
    """A trusted identity provider whose discovery document cannot be read now: its researchers could
    not sign in (a note, not a refusal: the provider may be down only for the moment)."""
    if config.oidc is None:
        return []
    from mbeacon.api.oidc import TokenRefused, Verifier

    verifier = Verifier(config.oidc)
    notes = []
    for issuer in config.oidc.issuers:
        try:
            verifier.discovery(issuer)
        except TokenRefused as refused:
            notes.append(f"OIDC issuer {issuer}: {refused}; its researchers cannot sign in until it can be")
    return notes


class NotServable(Exception):
    """What stops a configuration from being served (one line)."""


def check_service(config_path: Path | None) -> Checked:
    """Every check serving runs, with nothing created; :class:`NotServable` on the first failure."""
    from mbeacon.beacon.config import ConfigError
    from mbeacon.beacon.engine import AnswerEngine
    from mbeacon.beacon.ledger import Ledger, LedgerUnavailable
    from mbeacon.beacon.preflight import ledger_problems, ledger_state, plan, store_problems
    from mbeacon.store.errors import DataError

    config = load_service_config(config_path)
    check_backends(config)
    file = sqlite_path(config.database_url)
    exists = file is None or file.exists()
    ledger = Ledger.open(config.database_url, migrate=False) if exists else None
    try:
        engine = AnswerEngine(config, ledger)  # type: ignore[arg-type]  # the checks never touch it
        engine.check()
        problems = store_problems(engine)
        if problems:
            raise NotServable(problems[0])
        plans = plan(engine)
        state = ledger_state(config, ledger)
    except (ConfigError, DataError, LedgerUnavailable, ValueError, OSError) as error:
        raise NotServable(str(error)) from None
    finally:
        if ledger is not None:
            ledger.close()
    for problem in ledger_problems(state):
        raise NotServable(problem)
    return Checked(config, plans, state)


@click.group(cls=Group, context_settings=HELP_OPTIONS)
def config() -> None:
    """Check a service configuration before serving it."""


@config.command("check")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def config_check(config_path: Path | None, as_json: bool) -> None:
    """Check a configuration against its store and ledger, and print what each dataset will be
    served at (mechanism, epsilon, c, T, quota, prior, who may ask). Exit status 2 and one line when
    serving would fail: a [datasets.X] table that names no dataset (with the likely name), a dataset
    without a chosen prior, a ledger that cannot be reached. Creates nothing."""
    from mbeacon.beacon.preflight import who_may_ask

    try:
        checked = check_service(config_path)
    except NotServable as error:
        fail(f"cannot serve: {error}")
    users = checked.state.users_by_tier if checked.state.exists else None
    if as_json:
        out = {
            "datasets": [
                asdict(p) | {"who_may_ask": who_may_ask(checked.config, p.tier, users)} for p in checked.plans
            ],
            "ledger": asdict(checked.state),
            "notes": checked.notes,
        }
        click.echo(json.dumps(out, indent=2))
        return
    _print_table(checked, users)
    for note in checked.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(
        f"ok: {len(checked.plans)} dataset{'' if len(checked.plans) == 1 else 's'} can be served", err=True
    )


def _print_table(checked: Checked, users: dict[str, int] | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from mbeacon.beacon.preflight import who_may_ask

    table = Table("dataset", "policy", "mechanism", "epsilon", "c", "T", "quota", "scope", "prior",
                  "who may ask")  # fmt: skip
    shown = lambda value: "-" if value is None else str(value)  # noqa: E731
    for p in checked.plans:
        table.add_row(
            p.dataset, escape(f"[datasets.{p.dataset}]" if p.configured else "[defaults]"), p.mechanism,
            shown(p.epsilon), shown(p.c), shown(p.threshold), shown(p.quota), p.scope, shown(p.prior),
            who_may_ask(checked.config, p.tier, users),
        )  # fmt: skip
    table_console().print(table)
