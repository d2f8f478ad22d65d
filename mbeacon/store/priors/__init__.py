"""Population priors: what a general population looks like at each CpG probe, and P_prior for many queries.

SVT² compares a cohort's count ``alpha`` with ``beta = N * P_prior(value in [lo, hi])``, the count a
general population of the same size predicts. A :class:`Prior` holds, per probe, the population mean and
sd, the Beta(a, b) fitted to them by moments and, when it was built from a reference cohort, an empirical
quantile sketch. Priors are public knowledge: nothing here is private.

Where priors come from:

* :func:`prior_from_matrix` / :func:`prior_from_table_file`: a reference cohort (probes x samples beta
  values), e.g. healthy blood. Mean, sd, Beta by moments and a quantile sketch per probe.
* :func:`prior_from_means` / :func:`import_means_file`: published per-probe means only (the shipped 450K
  means). The sd is predicted from the mean by an :class:`SdModel` learned on a real reference table.

Stored as ``STORE/priors/<name>/v<k>.h5``: named, versioned (``k = 1, 2, ...``, a version is never
overwritten), each file published atomically (:mod:`mbeacon.store.atomic`).

The hot path, :meth:`Prior.probability`, is vectorised over (probe, lo, hi) triples, processed in
cache-sized chunks on a few threads (``scipy.special.betainc`` and numpy release the GIL).

The package, one module per job (in dependency order):

* :mod:`.names`: what a valid prior name is;
* :mod:`.beta_distribution`: Beta by moments (:func:`beta_moments`) and the Beta CDF for P_prior;
* :mod:`.quantile_sketch`: the empirical quantile sketch, built and evaluated;
* :mod:`.model`: the :class:`Prior` and its vectorised, threaded :meth:`Prior.probability`;
* :mod:`.table_files`: reading probes x samples reference tables (CSV/TSV, DataFrame, array);
* :mod:`.sd_model`: :class:`SdModel`, the sd predicted from the mean, and :func:`learn_sd_model`;
* :mod:`.build`: the ``prior_from_*`` builders and :func:`import_means_file`;
* :mod:`.storage`: :func:`save_prior`, :func:`load_prior`, :func:`list_priors`, :func:`remove_prior`,
  versions and locking.

Settings live in the submodule that reads them, and are set there: e.g.
``mbeacon.store.priors.model.THREADS = 1`` (one thread per gunicorn worker), ``model.CHUNK``,
``model.HASH_LOOKUP_MIN``, ``beta_distribution.TAIL_EXPONENT``.
"""

from __future__ import annotations

from mbeacon.store.priors.beta_distribution import beta_moments
from mbeacon.store.priors.build import (
    import_means_file,
    prior_from_blocks,
    prior_from_cohort,
    prior_from_matrix,
    prior_from_means,
    prior_from_table_file,
)
from mbeacon.store.priors.model import Prior
from mbeacon.store.priors.names import check_name
from mbeacon.store.priors.sd_model import SdModel, learn_sd_model
from mbeacon.store.priors.storage import (
    NoPriorChosen,
    PriorChoice,
    choose_prior,
    list_priors,
    load_prior,
    prior_names,
    recorded_default,
    remove_prior,
    save_prior,
)
from mbeacon.store.priors.table_files import iter_table_file

__all__ = [
    "NoPriorChosen",
    "Prior",
    "PriorChoice",
    "SdModel",
    "beta_moments",
    "check_name",
    "choose_prior",
    "import_means_file",
    "iter_table_file",
    "learn_sd_model",
    "list_priors",
    "load_prior",
    "prior_from_blocks",
    "prior_from_cohort",
    "prior_from_matrix",
    "prior_from_means",
    "prior_from_table_file",
    "prior_names",
    "recorded_default",
    "remove_prior",
    "save_prior",
]
