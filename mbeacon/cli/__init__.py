"""The ``mbeacon`` command: operator and evaluator entry points.

Built on click (the CLI library Flask itself uses). One module per command group, each imported only
when its command runs, so ``mbeacon --help`` and the light commands do not pay for numpy, scipy,
Flask or httpx:

* :mod:`.audit` -- ``audit``, the statistical DP tests of every mechanism;
* :mod:`.serve` -- ``serve``, ``reload`` and ``demo``, the beacon under gunicorn;
* :mod:`.config` -- ``config check``, a configuration checked against its store and ledger;
* :mod:`.users` -- ``users``, the keys of researchers and operators;
* :mod:`.budget` -- ``budget``, the privacy budgets in the ledger and the SVT² parameter advisor;
* :mod:`.db` -- ``db``, the ledger's schema;
* :mod:`.log` -- ``log``, the ledger's audit log, read and exported;
* :mod:`.data` -- ``ingest``, ``datasets`` and ``demo-data``, the cohort store;
* :mod:`.annotation` -- ``annotation``, the probe annotations of array platforms;
* :mod:`.prior` -- ``prior``, the population priors;
* :mod:`.simulate` -- ``simulate``, simulated cohorts with ground truth;
* :mod:`.attack` -- ``attack``, the membership-inference evaluation and the live attack;
* :mod:`.experiment` -- ``experiment``, published comparisons of the mechanisms;

and beneath them :mod:`._service` (the service's configuration and ledger, for the operator
commands), :mod:`._extras` (the pip extras a command needs, and its one-line error when one is
missing), :mod:`._ui` (progress bars on stderr, one-line errors) and :mod:`.lazy_group`. Nothing
outside this package imports it: the command sits on top of every layer.
"""

from __future__ import annotations

import click

from mbeacon import __version__
from mbeacon.cli.lazy_group import HELP_OPTIONS, LazyCommand, LazyGroup

#: Where ``--actor`` is kept in the root context's ``meta`` (read by ``mbeacon.cli._service.cli_actor``).
ACTOR_KEY = "mbeacon.actor"

COMMANDS = {
    "annotation": LazyCommand(
        "mbeacon.cli.annotation:annotation",
        "Probe annotations of array platforms: positions and genes for region and gene queries.",
    ),
    "attack": LazyCommand(
        "mbeacon.cli.attack:attack",
        "Measure how well a defence resists membership inference, and what it costs in utility.",
    ),
    "audit": LazyCommand(
        "mbeacon.cli.audit:audit", "Statistically test that each mechanism is epsilon-DP (StatDP's method)."
    ),
    "budget": LazyCommand(
        "mbeacon.cli.budget:budget",
        "Show, set and reset privacy budgets (every change is written to the audit log).",
    ),
    "config": LazyCommand("mbeacon.cli.config:config", "Check a service configuration before serving it."),
    "datasets": LazyCommand(
        "mbeacon.cli.data:datasets", "List the datasets of a store (or manage them with a subcommand)."
    ),
    "db": LazyCommand("mbeacon.cli.db:db", "The ledger database's schema."),
    "demo": LazyCommand(
        "mbeacon.cli.serve:demo",
        "Serve a demo beacon on a simulated cohort, with a demo user; prints its url and key.",
    ),
    "demo-data": LazyCommand(
        "mbeacon.cli.data:demo_data",
        "Build the small deterministic demo cohort and prior (once; a few seconds).",
    ),
    "experiment": LazyCommand(
        "mbeacon.cli.experiment:experiment",
        "Reproduce published experiments on the privacy mechanisms (seeded, so results are repeatable).",
    ),
    "ingest": LazyCommand(
        "mbeacon.cli.data:ingest", "Ingest a methylation matrix file into the store as a new dataset."
    ),
    "log": LazyCommand(
        "mbeacon.cli.log:log",
        "Read and export the ledger's audit log: who changed what, and which queries were answered.",
    ),
    "prior": LazyCommand(
        "mbeacon.cli.prior:prior",
        "Population priors: what a general population looks like at each CpG probe.",
    ),
    "reload": LazyCommand(
        "mbeacon.cli.serve:reload",
        "Reload a running beacon's configuration and priors, after checking that they can be served.",
    ),
    "serve": LazyCommand(
        "mbeacon.cli.serve:serve",
        "Serve the beacon under gunicorn (the master runs in this process; stop with Ctrl-C/SIGTERM).",
    ),
    "simulate": LazyCommand(
        "mbeacon.cli.simulate:simulate",
        "Simulate realistic methylation cohorts for a membership-inference evaluation.",
    ),
    "users": LazyCommand(
        "mbeacon.cli.users:users",
        "Create, list, rotate and revoke API keys (researchers) and admin keys (operators).",
    ),
}


@click.group(cls=LazyGroup, lazy_subcommands=COMMANDS, context_settings=HELP_OPTIONS)
@click.version_option(__version__, prog_name="mbeacon")
@click.option(
    "--actor",
    default=None,
    metavar="NAME",
    help="Who the audit log names for the changes this command makes. "
    "[default: the configuration's operator, else the OS user]",
)
@click.pass_context
def main(ctx: click.Context, actor: str | None) -> None:
    """MBeacon: a privacy-preserving Beacon for DNA methylation data.

    \b
    First steps of an operator:
      mbeacon demo                                    a demo beacon to try: its url and a key
      mbeacon ingest FILE --store S --dataset ID      a cohort into the store
      mbeacon prior import-means --store S --name P   a population prior
      mbeacon users add NAME --config FILE            a researcher's key (--admin: an operator's)
      mbeacon config check --config FILE              what it will serve, checked
      mbeacon serve --config FILE                     the beacon under gunicorn
      mbeacon log --config FILE                       who changed what: the audit log
    See README.md and deploy/README.md; `mbeacon audit` tests the privacy mechanisms.
    """
    if actor is not None:
        if not actor.strip():
            raise click.BadParameter("give a name", param_hint="--actor")
        ctx.meta[ACTOR_KEY] = actor.strip()
