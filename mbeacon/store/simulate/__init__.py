"""Simulated methylation cohorts that look like real 450K blood data, written in real file formats.

The membership-inference evaluation (members of a beacon's cohort against non-members of the same
population) only means something on data with the structure of real methylation data. The model,
each choice and its reason, and the measured comparison with real data are in ``docs/simulation.md``;
in short:

* **Probes**: a random subset of the real Illumina 450K probe ids, in the order of the id list, each
  with its real population mean (``mbeacon.data.POPULATION_MEANS``, bimodal: a quarter below 0.07,
  half above 0.62).
* **Spread**: a probe's sd is the real median sd at its mean (:func:`mbeacon.store.priors.learn_sd_model`
  on the real 20k x 10 blood table), times a log-normal probe-to-probe factor whose width is also
  learned from that table (with the sampling noise of a 10-sample sd taken out).
* **Marginals**: Beta with that mean and sd (values in (0, 1), piling up near 0 and 1). A fraction of
  intermediate probes is a two-component Beta mixture (SNP-like genotype clusters): the real table has
  probes whose 10 values fall into two groups separated by a gap.
* **Dependence**: a Gaussian copula. Each individual has a latent standard normal value per probe:
  a few individual-level factors (the leading components of the real table's residuals: cell-type
  composition) plus an AR(1) process along the probe order (co-methylation of neighbouring CpGs).
  A latent value ``z`` becomes a beta value through ``F^-1(Phi(z))``, ``F`` the probe's Beta (mixture).
* **Disease population**: the same except at a fraction of probes (DMPs) whose mean shifts by
  ``delta``, ``|delta|`` uniform in [0.1, 0.3], random sign (flipped when the shifted mean would leave
  [0.01, 0.99]).
* **Groups**: members and non-members from the disease population, the reference sample from the
  general population; a noisy re-measurement (``value + N(0, noise^2)``, clipped to [0, 1]) of every
  member and non-member; missing values (NaN) at random in the measured files.


Everything here is simulation, not privacy noise: the randomness is numpy's seeded Generator (marked
``# noise-ok``), so a seed reproduces every file byte for byte. Probes are generated in fixed blocks of
:data:`GENERATION_BLOCK` with their own random streams, and written while the next block is generated
(one formatting and gzip thread per file), so memory stays bounded at any size (485,577 probes x 500
individuals included).

The modules, one job each (every public name is re-exported here):

* :mod:`.model` -- the parameters of a run (:class:`SimulationConfig`) and the population drawn from
  them (:func:`draw_population`), with the calibration constants;
* :mod:`.real_data` -- the shipped real tables and the sd distribution learned from them;
* :mod:`.beta_quantile` -- the fast Beta (mixture) quantile of a latent normal value;
* :mod:`.generation` -- the values of every group, probe block by probe block (:func:`iter_blocks`,
  :func:`simulate_arrays`);
* :mod:`.writers` -- GEO series matrix and CSV files, streamed (:func:`write_geo_series_matrix`,
  :func:`write_csv_matrix`);
* :mod:`.realism` -- statistics of simulated versus real data (:class:`RealismStats`);
* :mod:`.report` -- the realism figure (:func:`write_report`);
* this module -- :func:`simulate`, which writes every file of a run with its ground truth.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mbeacon import __version__, data

from ..atomic import STAGING, publish
from ..errors import DataError
from .beta_quantile import beta_quantile_of_normal
from .generation import (
    GENERATION_BLOCK,
    VALUE_FLOOR,
    SimulatedBlock,
    SimulatedCohorts,
    iter_blocks,
    simulate_arrays,
)
from .model import (
    BIMODAL_FRACTION,
    BIMODAL_MEAN_RANGE,
    BIMODAL_MIN_SEPARATION,
    BIMODAL_SEPARATION_RANGE,
    BIMODAL_WEIGHT_RANGE,
    COMPONENT_MEAN_RANGE,
    DEFAULT_SEED,
    DISEASE_MEAN_RANGE,
    EFFECT_RANGE,
    FACTOR_VARIANCES,
    MAX_NEIGHBOUR_CORRELATION,
    MAX_SHARED_VARIANCE,
    MEAN_RANGE,
    MIN_CONCENTRATION,
    Population,
    SimulationConfig,
    _prepare,
    draw_population,
    sample_ids,
    series_accession,
)
from .real_data import SdDistribution, learn_sd_distribution, load_blood_reference, load_population_means
from .realism import FIRST, SD_BINS, RealismStats, _real_stats, realism_summary
from .report import write_report
from .writers import (
    COMPRESS_LEVEL,
    PLATFORM_ID,
    _csv_writer,
    _geo_writer,
    _MatrixWriter,
    geo_metadata,
    write_csv_matrix,
    write_geo_series_matrix,
)

__all__ = [
    "BIMODAL_FRACTION",
    "BIMODAL_MEAN_RANGE",
    "BIMODAL_MIN_SEPARATION",
    "BIMODAL_SEPARATION_RANGE",
    "BIMODAL_WEIGHT_RANGE",
    "COMPONENT_MEAN_RANGE",
    "COMPRESS_LEVEL",
    "DEFAULT_SEED",
    "DISEASE_MEAN_RANGE",
    "EFFECT_RANGE",
    "FACTOR_VARIANCES",
    "FILES",
    "FIRST",
    "GENERATION_BLOCK",
    "MAX_NEIGHBOUR_CORRELATION",
    "MAX_SHARED_VARIANCE",
    "MEAN_RANGE",
    "MIN_CONCENTRATION",
    "PLATFORM_ID",
    "REPORT_FILE",
    "REPORT_NUMBERS_FILE",
    "SD_BINS",
    "TRUTH_FILE",
    "VALUE_FLOOR",
    "Population",
    "RealismStats",
    "SdDistribution",
    "SimulatedBlock",
    "SimulatedCohorts",
    "SimulationConfig",
    "SimulationResult",
    "beta_quantile_of_normal",
    "draw_population",
    "geo_metadata",
    "iter_blocks",
    "learn_sd_distribution",
    "load_blood_reference",
    "load_population_means",
    "realism_summary",
    "sample_ids",
    "series_accession",
    "simulate",
    "simulate_arrays",
    "write_csv_matrix",
    "write_geo_series_matrix",
    "write_report",
]

#: The files of a run, by group (``members``: the beacon's cohort, a GEO series matrix).
FILES = {
    "members": "cohort_series_matrix.txt.gz",
    "nonmembers": "nonmembers.csv.gz",
    "reference": "reference.csv.gz",
    "members_remeasured": "members_remeasured.csv.gz",
    "nonmembers_remeasured": "nonmembers_remeasured.csv.gz",
}
TRUTH_FILE = "truth.json"
REPORT_FILE = "report.png"
REPORT_NUMBERS_FILE = "report.json"


@dataclass
class SimulationResult:
    """What :func:`simulate` wrote: file name -> (bytes, rows, columns, content), and the counts."""

    out_dir: Path
    files: dict[str, dict[str, Any]]
    probes: int
    groups: dict[str, int]
    dmps: int
    bimodal: int
    seconds: float
    realism: dict[str, Any] | None = field(default=None)


def _write_json(out_dir: Path, name: str, payload: Any) -> None:
    with publish(out_dir, out_dir / name) as temp:
        temp.write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def simulate(
    out_dir: str | Path,
    config: SimulationConfig | None = None,
    *,
    report: bool = False,
    progress: Callable[[int], None] | None = None,
) -> SimulationResult:
    """Simulate the cohorts and write every file into ``out_dir`` (see the module doc and
    ``docs/simulation.md``). ``progress`` is called with the number of probes finished after each block.
    Each file appears only once complete. Bad parameters raise :class:`DataError`."""
    started = time.perf_counter()
    config = config or SimulationConfig()
    if report and config.reference < 2:
        raise DataError("the report compares the reference sample with real data: it needs 2 or more samples")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise DataError("exists and is not a directory", path=str(out))
    out.mkdir(parents=True, exist_ok=True)
    population = _prepare(config)
    ids = sample_ids(config)
    groups = {
        "members": ids["members"],
        "nonmembers": ids["nonmembers"],
        "reference": ids["reference"],
        "members_remeasured": ids["members"],
        "nonmembers_remeasured": ids["nonmembers"],
    }
    descriptions = {
        "members": "members: the beacon's cohort",
        "nonmembers": "non-members, same population",
        "reference": "general-population reference",
        "members_remeasured": "members, noisy re-measurement",
        "nonmembers_remeasured": "non-members, noisy re-measurement",
    }
    active = [name for name, members in groups.items() if members]
    stats = RealismStats(len(population)) if report else None
    probe_ids = population.probe_ids.tolist()
    n = config.patients

    with contextlib.ExitStack() as stack:
        writers: dict[str, _MatrixWriter] = {}
        for name in active:
            temp = stack.enter_context(publish(out, out / FILES[name]))
            if name == "members":
                writer = _geo_writer(temp, groups[name], geo_metadata(config, groups[name]), compress=True)
            else:
                writer = _csv_writer(temp, groups[name], compress=True)
            writers[name] = stack.enter_context(writer)
        for block in iter_blocks(population, config):
            block_ids = probe_ids[block.start : block.stop]
            for name, writer in writers.items():
                writer.write(block_ids, block.group(name))
            if stats is not None:
                general = block.values[:, n + config.nonmembers :]
                stats.add(block.start, general, block.values[:, :n])
            if progress is not None:
                progress(block.stop - block.start)

    files = {
        FILES[name]: {
            "bytes": (out / FILES[name]).stat().st_size,
            "rows": len(population),
            "columns": len(groups[name]),
            "content": descriptions[name],
            "samples": name.removesuffix("_remeasured"),
        }
        for name in active
    }
    realism = None
    if stats is not None:
        real = _real_stats(load_blood_reference()[1])
        _, real_means = load_population_means()
        realism = realism_summary(stats, real, real_means, population, config)
        with publish(out, out / REPORT_FILE) as temp:
            write_report(temp, stats, real, real_means, population, config, realism)
        _write_json(out, REPORT_NUMBERS_FILE, _json_safe(realism))
        for name in (REPORT_FILE, REPORT_NUMBERS_FILE):
            files[name] = {"bytes": (out / name).stat().st_size, "content": "realism report"}

    dmp_index = np.flatnonzero(population.dmp)
    truth = {
        "generator": f"mbeacon simulate {__version__}",
        "seed": config.seed,
        "parameters": asdict(config),
        "series": {"geo_accession": series_accession(config), "platform_id": PLATFORM_ID},
        "samples": ids,
        "remeasured": {
            "members": FILES["members_remeasured"],
            "nonmembers": FILES["nonmembers_remeasured"],
            "note": "a re-measurement keeps its person's sample id",
        },
        "dmps": [
            {
                "probe_id": probe_ids[i],
                "delta": round(float(population.delta[i]), 6),
                "general_mean": round(float(population.mean[i]), 6),
                "disease_mean": round(float(population.disease_mean[i]), 6),
            }
            for i in dmp_index
        ],
        "bimodal_probes": population.probe_ids[population.bimodal].tolist(),
        "model": {
            "probe_means": data.POPULATION_MEANS,
            "sd_relation": data.BLOOD_REFERENCE,
            "factor_variances": list(FACTOR_VARIANCES),
            "ar_coefficient": population.ar_coefficient,
            "effect_range": list(EFFECT_RANGE),
            "bimodal_mean_range": list(BIMODAL_MEAN_RANGE),
            "missing_in": ["members", "nonmembers", "reference"],
            "documentation": "docs/simulation.md",
        },
        "files": [{"name": name, **info} for name, info in files.items()],
    }
    _write_json(out, TRUTH_FILE, truth)
    for stale in {*FILES.values(), REPORT_FILE, REPORT_NUMBERS_FILE} - set(files):
        (out / stale).unlink(missing_ok=True)  # an earlier run's file that truth.json no longer lists
    with contextlib.suppress(OSError):
        (out / STAGING).rmdir()
    files[TRUTH_FILE] = {"bytes": (out / TRUTH_FILE).stat().st_size, "content": "ground truth"}
    return SimulationResult(
        out_dir=out,
        files=files,
        probes=len(population),
        groups={"members": config.patients, "nonmembers": config.nonmembers, "reference": config.reference},
        dmps=int(population.dmp.sum()),
        bimodal=int(population.bimodal.sum()),
        seconds=time.perf_counter() - started,
        realism=realism,
    )


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
