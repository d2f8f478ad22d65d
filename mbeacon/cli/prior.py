"""``mbeacon prior``: build, import, list and query the population priors of a store.

Errors in the input (a malformed file, an unknown prior or probe) print one line on stderr and exit
with status 2, without a traceback; the store is left as it was.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mbeacon.cli._ui import confirmed, fail, finite, reports_data_errors, table_console, yes_option
from mbeacon.cli.lazy_group import HELP_OPTIONS, Group
from mbeacon.store.errors import DataError

STORE_HELP = "Store directory (priors live in STORE/priors/NAME/vK.h5; created if absent)."
NAME_HELP = "Name of the prior (letters, digits, '.', '_', '-'); saving again adds a new version."


def _store_option(command: Callable) -> Callable:
    return click.option(
        "--store", required=True, type=click.Path(file_okay=False, path_type=Path), help=STORE_HELP
    )(command)


def _summary(saved: Any) -> dict[str, Any]:
    return {
        "name": saved.name,
        "version": saved.version,
        "probes": len(saved),
        "n_reference": saved.n_reference,
        "sketch": 0 if saved.quantiles is None else int(saved.quantiles.shape[1]),
        "source": saved.source,
        "created": saved.created,
    }


def _report_saved(store: Path, saved: Any, as_json: bool) -> None:
    from mbeacon.store.priors import prior_names, recorded_default

    summary = _summary(saved)
    default = recorded_default(store)
    if not as_json and default is not None and default != saved.name and len(prior_names(store)) == 2:
        click.echo(
            f"note: the store now holds two priors; {default!r} is recorded as its default, so datasets "
            "whose configuration names no prior keep it (name one with prior = NAME or default_prior)",
            err=True,
        )
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    sketch = f", quantile sketch of {summary['sketch']} levels" if summary["sketch"] else ", no sketch"
    origin = f"{saved.n_reference} reference samples" if saved.n_reference else "from means (sd model)"
    click.echo(f"saved prior {saved.name} version {saved.version}: {len(saved):,} probes, {origin}{sketch}")
    click.echo(f"source: {saved.source}")


@click.group("prior", cls=Group, context_settings=HELP_OPTIONS)
def prior() -> None:
    """Population priors: what a general population looks like at each CpG probe.

    SVT² compares a cohort's count with beta = N * P_prior(value in [lo, hi]), the count the general
    population predicts. A prior holds per probe the population mean and sd, the Beta(a, b) fitted to
    them and, when built from a reference cohort, an empirical quantile sketch. Priors are public.
    Each save adds a new version (v1, v2, ...); a version is never overwritten.
    """


@prior.command("import-means")
@click.argument("path", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_store_option
@click.option("--name", required=True, help=NAME_HELP)
@click.option(
    "--sd-reference",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A probes x samples CSV/TSV to learn how a probe's sd depends on its mean. "
    "[default: the shipped GSE41169 blood table, 20k probes x 10 samples]",
)
@click.option("--json", "as_json", is_flag=True, help="Print the saved prior's summary as JSON.")
@reports_data_errors
def import_means(path: Path | None, store: Path, name: str, sd_reference: Path | None, as_json: bool) -> None:
    """Import per-probe population means (a probe_id,mean_beta CSV/TSV, gz ok) as a prior.

    PATH defaults to the shipped 450K population means (485,577 probes). The sd of each probe is
    predicted from its mean by a model learned on a real reference table (--sd-reference), and the
    Beta(a, b) is fitted by moments. The prior has no quantile sketch, so queries use the Beta.
    """
    from mbeacon.store.priors import check_name, import_means_file, learn_sd_model, save_prior

    check_name(name)
    sd_model = learn_sd_model(sd_reference) if sd_reference is not None else None
    built = import_means_file(path, name=name, sd_model=sd_model)
    _report_saved(store, save_prior(store, built), as_json)


@prior.command("build")
@_store_option
@click.option("--name", required=True, help=NAME_HELP)
@click.option(
    "--from-file",
    "from_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A plain probes x samples CSV/TSV of beta values (gz ok): probe ids in the first column, one "
    "column per reference sample; empty or NA = missing.",
)
@click.option(
    "--from-dataset",
    "from_dataset",
    metavar="ID",
    help="A reference cohort already in the store (ingest it first with `mbeacon ingest`).",
)
@click.option(
    "--quantiles",
    type=click.IntRange(min=0),
    default=101,
    show_default=True,
    help="Levels of the empirical quantile sketch (0: none, queries then use the fitted Beta).",
)
@click.option("--source", default="", help="Provenance text stored with the prior. [default: the file name]")
@click.option("--json", "as_json", is_flag=True, help="Print the saved prior's summary as JSON.")
@reports_data_errors
def build(
    store: Path,
    name: str,
    from_file: Path | None,
    from_dataset: str | None,
    quantiles: int,
    source: str,
    as_json: bool,
) -> None:
    """Build a prior from a reference cohort (e.g. healthy blood samples).

    Per probe: mean and sd of the reference values (missing values ignored), the Beta(a, b) fitted by
    moments and a quantile sketch (used by queries by default). The reference is streamed in blocks of
    rows. Give exactly one of --from-file and --from-dataset.
    """
    built = _reference_prior(
        store, name, from_file=from_file, from_dataset=from_dataset, quantiles=quantiles, source=source
    )
    from mbeacon.store.priors import save_prior

    _report_saved(store, save_prior(store, built), as_json)


def _reference_prior(
    store: Path,
    name: str,
    *,
    from_file: Path | None,
    from_dataset: str | None,
    quantiles: int,
    source: str,
) -> Any:
    """The prior built from the one reference source given on the command line."""
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.priors import check_name, prior_from_cohort, prior_from_table_file

    check_name(name)
    if (from_file is None) == (from_dataset is None):
        raise click.UsageError("give exactly one reference: --from-file MATRIX.csv or --from-dataset ID")
    if quantiles == 1:
        raise click.BadParameter("a sketch needs at least 2 levels (or 0 for none)", param_hint="--quantiles")
    if from_dataset is not None:
        cohort = CohortStore(store).open(from_dataset)
        built = prior_from_cohort(cohort, name=name, quantiles=quantiles or None)
        return dataclasses.replace(built, source=source) if source else built
    return prior_from_table_file(from_file, name=name, quantiles=quantiles or None, source=source)


@prior.command("list")
@_store_option
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@reports_data_errors
def list_(store: Path, as_json: bool) -> None:
    """List every version of every prior in the store."""
    from mbeacon.store.priors import list_priors

    entries = list_priors(store)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    if not entries:
        click.echo(f"no priors in {store}")
        return
    from rich.table import Table

    table = Table("name", "version", "probes", "reference samples", "sketch", "created", "source")
    for e in entries:
        version = f"{e['version']}{' (latest)' if e['latest'] else ''}"
        sketch = str(e["sketch"]) if e["sketch"] else "-"
        table.add_row(
            e["name"], version, f"{e['probes']:,}", str(e["n_reference"]), sketch, e["created"], e["source"]
        )
    table_console().print(table)


@prior.command("show")
@_store_option
@click.option("--name", required=True, help="Name of the prior.")
@click.option("--version", type=click.IntRange(min=1), default=None, help="Version. [default: the latest]")
@click.option(
    "--probe", "probes", multiple=True, metavar="ID", help="A probe id, e.g. cg00000029 (repeatable)."
)
@click.option("--lo", type=float, default=None, help="Lower end of the range (alone: [LO, 1]).")
@click.option("--hi", type=float, default=None, help="Upper end of the range (alone: [0, HI]).")
@click.option(
    "--method",
    type=click.Choice(["auto", "beta", "empirical"]),
    default="auto",
    show_default=True,
    help="beta: the fitted Beta's CDF; empirical: the quantile sketch; auto: the sketch when there is one.",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@reports_data_errors
def show(
    store: Path,
    name: str,
    version: int | None,
    probes: tuple[str, ...],
    lo: float | None,
    hi: float | None,
    method: str,
    as_json: bool,
) -> None:
    """Show a prior, or P_prior(value in [LO, HI]) at the given probes.

    Without --probe: the prior's summary. With --probe: per probe the mean, sd, Beta(a, b) and the
    probability that a member of the general population has a value in the closed range.
    """
    from mbeacon.store.priors import load_prior

    loaded = load_prior(store, name, version)
    if not probes:
        if lo is not None or hi is not None:
            raise click.UsageError("--lo/--hi need at least one --probe")
        summary = _summary(loaded)
        if as_json:
            click.echo(json.dumps(summary, indent=2))
        else:
            for key, value in summary.items():
                click.echo(f"{key}: {value}")
        return
    if lo is None and hi is None:
        raise click.UsageError("give the range: --lo X and/or --hi Y")
    low = 0.0 if lo is None else lo
    high = 1.0 if hi is None else hi
    index = loaded.index(list(probes))
    unknown = [p for p, i in zip(probes, index, strict=True) if i < 0]
    if unknown:
        raise DataError(f"prior {loaded.name} v{loaded.version} does not know probe(s) {', '.join(unknown)}")
    try:
        used = loaded.resolve_method(method)
    except ValueError as exc:
        raise DataError(str(exc)) from None
    p = loaded.probability(index, low, high, method=used)
    rows = [
        {
            "probe": probe,
            "lo": low,
            "hi": high,
            "p": finite(float(p[k])),
            "method": used,
            "mean": float(loaded.mean[i]),
            "sd": float(loaded.sd[i]),
            "a": float(loaded.a[i]),
            "b": float(loaded.b[i]),
        }
        for k, (probe, i) in enumerate(zip(probes, index, strict=True))
    ]
    if as_json:
        click.echo(json.dumps({"prior": loaded.name, "version": loaded.version, "results": rows}, indent=2))
        return
    for r in rows:
        click.echo(
            f"{r['probe']}  P[{low:g}, {high:g}] = {r['p']:.6g}  ({used}; mean {r['mean']:.4f}, "
            f"sd {r['sd']:.4f}, Beta({r['a']:.3g}, {r['b']:.3g}))"
        )


def served_with(store: Path, name: str, config: Any | None) -> list[str]:
    """Why prior ``name`` is in use: the configuration's ``default_prior`` or a ``[datasets.X]`` table
    names it, or a dataset of the store is served with it (named, or the store's only prior)."""
    from mbeacon.store.cohorts import CohortStore
    from mbeacon.store.priors import choose_prior

    reasons = []
    if config is not None and config.default_prior == name:
        reasons.append("the configuration's default_prior")
    if config is not None:
        reasons += [f"[datasets.{d}] prior" for d, policy in config.datasets.items() if policy.prior == name]
    try:
        datasets = CohortStore(store).ids()
    except DataError:
        datasets = []
    for dataset in datasets:
        try:
            choice = choose_prior(store, config.prior_for(dataset) if config is not None else None)
        except DataError:
            continue  # no prior chosen for it: not this one
        if choice.name == name and f"[datasets.{dataset}] prior" not in reasons:
            reasons.append(f"dataset {dataset} ({choice.chosen_by})")
    return reasons


@prior.command("remove")
@click.argument("name")
@click.option("--version", type=click.IntRange(min=1), default=None,
              help="Remove this version only (an older one, which no dataset is served with).")  # fmt: skip
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Store directory. [default: the store of --config]")  # fmt: skip
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The beacon's configuration, to check that none of its datasets is served with the prior. "
              "[default: $MBEACON_CONFIG]")  # fmt: skip
@yes_option
@reports_data_errors
def remove(name: str, version: int | None, store: Path | None, config_path: Path | None, yes: bool) -> None:
    """Remove a prior (or one version of it), refused while a dataset is served with it.

    A dataset is served with the latest version of its prior: the one its [datasets.X] table or
    default_prior names, else the store's only prior. Removing that prior, or its latest version, is
    refused while any dataset uses it; an older version can go.
    """
    import os

    from mbeacon.store.priors import list_priors, remove_prior

    config = None
    path = config_path or os.environ.get("MBEACON_CONFIG")
    if path:
        from mbeacon.cli._service import load_service_config

        config = load_service_config(Path(path))
    if store is None:
        if config is None:
            raise click.UsageError("give --store STORE (or --config FILE, whose store is used)")
        store = Path(config.store)
    versions = [e["version"] for e in list_priors(store) if e["name"] == name]
    latest = max(versions) if versions else None
    if version is None or version == latest:
        reasons = served_with(store, name, config)
        if reasons:
            what = "its latest version" if version is not None else f"prior {name!r}"
            fail(f"cannot remove {what}: served with {', '.join(reasons)}; name another prior there first")
    what = (
        f"version {version} of prior {name!r}" if version is not None else f"prior {name!r} (every version)"
    )
    confirmed(f"Remove {what} from {store}?", f"removing {what} deletes it", yes=yes)
    removed = remove_prior(store, name, version)
    click.echo(f"removed {name} version{'s' if len(removed) > 1 else ''} {', '.join(map(str, removed))}")
