"""The realism figure (``report.png``): simulated versus real data, six panels.

Probe means, sd versus mean, neighbour correlation, disease effects, residual components of sets of
10 samples and the value density, each drawn from the :class:`~.realism.RealismStats` of the simulated
reference sample and of the real blood table. matplotlib is imported on first use (Agg backend): only
``--report`` needs it.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

from .model import Population, SimulationConfig
from .realism import RealismStats

__all__ = ["write_report"]


def write_report(
    path: Path,
    sim: RealismStats,
    real: RealismStats,
    real_means: np.ndarray,
    population: Population,
    config: SimulationConfig,
    numbers: dict[str, Any],
) -> None:
    """The realism figure: simulated versus real, six panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim_color, real_color = "#1f77b4", "#d62728"
    fig, axes = plt.subplots(2, 3, figsize=(17, 10.5))
    fig.suptitle(
        f"Simulated vs real methylation data  ({len(population):,} probes, {config.reference} reference "
        f"samples, {config.patients} members, seed {config.seed})",
        fontsize=14,
    )

    ax = axes[0, 0]
    bins = np.linspace(0, 1, 51)
    ax.hist(
        real_means, bins=bins, density=True, color=real_color, alpha=0.45, label="real 450K means (485,577)"
    )
    ax.hist(
        sim.mean,
        bins=bins,
        density=True,
        histtype="step",
        lw=2,
        color=sim_color,
        label="simulated general pop.",
    )
    ax.set(title="Per-probe mean (bimodal)", xlabel="probe mean beta", ylabel="density")
    ax.legend(loc="upper center")

    ax = axes[0, 1]
    edges = np.arange(0, 1.0001, 0.05)
    centres = (edges[:-1] + edges[1:]) / 2

    def band(mean: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, ...]:
        q = np.full((3, centres.size), np.nan)
        for i, (lo, hi) in enumerate(itertools.pairwise(edges)):
            s = sd[(mean >= lo) & (mean < hi) & np.isfinite(sd)]
            if s.size >= 10:
                q[:, i] = np.percentile(s, [10, 50, 90])
        return q[0], q[1], q[2]

    for (mean, sd), color, label, style in (
        ((real.mean10, real.sd10), real_color, "real blood table (10 samples)", "-"),
        ((sim.mean10, sim.sd10), sim_color, "simulated (10 reference samples)", "-"),
        ((sim.mean, sim.sd), "black", f"simulated (all {config.reference})", "--"),
    ):
        lo, med, hi = band(mean, sd)
        ax.plot(centres, med, style, color=color, lw=2, label=f"{label}: median")
        if style == "-":
            ax.fill_between(centres, lo, hi, color=color, alpha=0.15, label=f"{label}: 10-90%")
    ax.set(title="Per-probe sd versus mean", xlabel="probe mean beta", ylabel="probe sd", ylim=(0, None))
    ax.legend(fontsize=8, loc="upper left")

    ax = axes[0, 2]
    corr_bins = np.linspace(-1, 1, 41)
    real_lag, sim_lag = real.lag1_10[np.isfinite(real.lag1_10)], sim.lag1_10[np.isfinite(sim.lag1_10)]
    ax.hist(
        real_lag,
        bins=corr_bins,
        density=True,
        color=real_color,
        alpha=0.45,
        label=f"real table, 10 samples (ids not in genome order): mean {real_lag.mean():.3f}",
    )
    ax.hist(
        sim_lag,
        bins=corr_bins,
        density=True,
        histtype="step",
        lw=2,
        color=sim_color,
        label=f"simulated (10 samples): mean {sim_lag.mean():.3f}",
    )
    all_lag = sim.lag1[np.isfinite(sim.lag1)]
    ax.hist(
        all_lag,
        bins=corr_bins,
        density=True,
        histtype="step",
        lw=1.5,
        color="black",
        ls="--",
        label=f"simulated (all {config.reference}): mean {all_lag.mean():.3f}",
    )
    ax.set(
        title=f"Neighbour correlation (lag 1; latent target {config.neighbour_correlation:g})",
        xlabel="correlation across samples of adjacent probes",
        ylabel="density",
    )
    ax.legend(fontsize=8, loc="upper left")

    ax = axes[1, 0]
    observed = sim.disease_mean - sim.mean
    effect_bins = np.linspace(-0.4, 0.4, 65)
    if population.dmp.any():
        ax.hist(
            population.delta[population.dmp],
            bins=effect_bins,
            color="#2ca02c",
            alpha=0.5,
            label=f"true effect at the {int(population.dmp.sum())} DMPs",
        )
        ax.hist(
            observed[population.dmp],
            bins=effect_bins,
            histtype="step",
            lw=2,
            color="#2ca02c",
            label="observed at DMPs (members - reference)",
        )
    ax.hist(
        observed[~population.dmp],
        bins=effect_bins,
        histtype="step",
        lw=1.5,
        color="gray",
        label="observed elsewhere (members - reference)",
    )
    ax.set(
        title="Disease effects (DMPs)",
        xlabel="mean difference (disease - general)",
        ylabel="probes",
        yscale="log",
    )
    ax.legend(fontsize=8, loc="upper left")

    ax = axes[1, 1]
    real_eig, sim_eig = real.eigen_shares()[0], sim.eigen_shares()
    k = np.arange(1, min(real_eig.size, sim_eig.shape[1]) + 1)
    width = 0.38
    ax.bar(
        k - width / 2, real_eig[: k.size], width, color=real_color, alpha=0.6, label="real table (10 samples)"
    )
    ax.bar(
        k + width / 2,
        sim_eig.mean(axis=0)[: k.size],
        width,
        yerr=sim_eig.std(axis=0)[: k.size],
        color=sim_color,
        alpha=0.8,
        capsize=3,
        label=f"simulated: mean and sd over {sim_eig.shape[0]} sets of 10",
    )
    if k.size:
        ax.axhline(1 / k.size, color="gray", ls=":", label="independent samples")
    ax.set(
        title="How samples correlate: residual components",
        xlabel="principal component of per-probe standardised residuals",
        ylabel="share of residual variance",
        xticks=k,
    )
    ax.legend(fontsize=8)

    ax = axes[1, 2]
    centres100 = (np.arange(100) + 0.5) / 100
    ax.plot(centres100, real.value_density(), color=real_color, lw=2, label="real table (10 samples)")
    ax.plot(
        centres100,
        sim.value_density(like=real.mean10),
        color=sim_color,
        lw=2,
        label="simulated, probes weighted to the real table's means",
    )
    ax.plot(
        centres100,
        sim.value_density(),
        color="black",
        lw=1.2,
        ls="--",
        label="simulated, all probes (450K mix: more near 0)",
    )
    gap = numbers["gapped_fraction_mean_0.2_0.8"]
    ax.set(
        title="Beta values of 10 samples (piled up near 0 and 1)",
        xlabel="beta value",
        ylabel="density",
        yscale="log",
    )
    ax.text(
        0.5,
        0.04,
        f"probes with mean in [0.2, 0.8] whose 10 values split\n(gap > 0.2, >= 2 each side): "
        f"real {gap['real']:.2%}, simulated {gap['simulated']:.2%}",
        transform=ax.transAxes,
        ha="center",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper center")
    for a in axes.ravel():
        a.grid(alpha=0.25)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
