"""The privacy core: secure noise, the sparse-vector family, SVT², selection and the DP audit.

Every mechanism takes ``rng``: ``None`` (the OS CSPRNG, the default and the only source the service
uses), an ``int`` seed or a ``numpy.random.Generator`` (reproducible mode for tests and experiments).

The core the service's promise rests on, each module using only those before it:

* :mod:`~mbeacon.privacy.validation`: one check for every privacy parameter (finite, in range, typed);
* :mod:`~mbeacon.privacy.noise`: the samplers and their exact distribution functions;
* :mod:`~mbeacon.privacy.sparse_vector`: the SVT family (one engine, a thin wrapper per mechanism);
* :mod:`~mbeacon.privacy.truncation`: PrivateSQL's learned per-patient contribution bound, truncation;
* :mod:`~mbeacon.privacy.accounting`: each mechanism's cost rule and composition;
* :mod:`~mbeacon.privacy.svt2` (with its compiled scan ``_svt2_scan``): SVT²;
* :mod:`~mbeacon.privacy.svt2_margin`, :mod:`~mbeacon.privacy.svt2_noisy`,
  :mod:`~mbeacon.privacy.online_pmw`, :mod:`~mbeacon.privacy.cohort_pmw`: sanitisers built on SVT²
  (decision margins, a noisy release on TOP, Online Private Multiplicative Weights started at the
  prior, and its run for a whole cohort);
* :mod:`~mbeacon.privacy.tradeoff`: the best attack an epsilon-DP output allows.

Beside it, :mod:`~mbeacon.privacy.research` holds what the experiments study and the service does not
serve (selection and pay-what-you-get, the automatic clipping bound, range queries, DSSGD), and
:mod:`~mbeacon.privacy.audit` the statistical DP audit of everything, with the incorrect variants it
must catch (:mod:`~mbeacon.privacy.audit.faulty`). The public names of all of them are here.
"""

from mbeacon.privacy.accounting import (
    advanced_composition,
    auto_clip_epsilon,
    bounded_range_composition,
    dssgd_epsilon,
    range_query_svt_epsilon,
    svt2_epsilon,
    svt2_spent,
    truncation_epsilon,
)
from mbeacon.privacy.noise import (
    discrete_laplace,
    discrete_laplace_pmf,
    discrete_laplace_sf,
    gumbel,
    laplace,
    lattice_laplace,
    uniform,
)
from mbeacon.privacy.research.clipping import (
    AutoClipRelease,
    auto_clip_batch,
    auto_clip_bound,
    auto_mean,
    auto_sum,
)
from mbeacon.privacy.research.dssgd import (
    dssgd_select,
    dssgd_select_batch,
    dssgd_sensitivity,
    dssgd_upload_count,
)
from mbeacon.privacy.research.pay_what_you_get import PayWhatYouGet, PayWhatYouGetExhausted
from mbeacon.privacy.research.range_queries import range_counts, range_query_svt, range_query_svt_batch
from mbeacon.privacy.research.selection import (
    TopKRelease,
    exponential_mechanism,
    exponential_mechanism_batch,
    report_noisy_max,
    report_noisy_max_batch,
    top_k,
    top_k_batch,
    unknown_domain_top_k,
    unknown_domain_top_k_restricted,
)
from mbeacon.privacy.sparse_vector import (
    BOT,
    TOP,
    UNANSWERED,
    NumericAnswers,
    above_threshold,
    above_threshold_batch,
    generalized_svt,
    generalized_svt_allocate,
    generalized_svt_batch,
    numeric_sparse,
    numeric_sparse_batch,
    sparse,
    sparse_batch,
    svt_retraversal,
    svt_retraversal_batch,
    svt_with_gap,
    svt_with_gap_batch,
)
from mbeacon.privacy.svt2 import (
    SVT2Params,
    SVT2State,
    svt2,
    svt2_allocate,
    svt2_batch,
    svt2_release,
    svt2_resume,
    svt2_step,
)
from mbeacon.privacy.truncation import (
    TruncatedCountRelease,
    learn_bound,
    learn_bound_batch,
    truncated_count_batch,
)

__all__ = [
    "BOT",
    "TOP",
    "UNANSWERED",
    "AutoClipRelease",
    "NumericAnswers",
    "PayWhatYouGet",
    "PayWhatYouGetExhausted",
    "SVT2Params",
    "SVT2State",
    "TopKRelease",
    "TruncatedCountRelease",
    "above_threshold",
    "above_threshold_batch",
    "advanced_composition",
    "auto_clip_batch",
    "auto_clip_bound",
    "auto_clip_epsilon",
    "auto_mean",
    "auto_sum",
    "bounded_range_composition",
    "discrete_laplace",
    "discrete_laplace_pmf",
    "discrete_laplace_sf",
    "dssgd_epsilon",
    "dssgd_select",
    "dssgd_select_batch",
    "dssgd_sensitivity",
    "dssgd_upload_count",
    "exponential_mechanism",
    "exponential_mechanism_batch",
    "generalized_svt",
    "generalized_svt_allocate",
    "generalized_svt_batch",
    "gumbel",
    "laplace",
    "lattice_laplace",
    "learn_bound",
    "learn_bound_batch",
    "numeric_sparse",
    "numeric_sparse_batch",
    "range_counts",
    "range_query_svt",
    "range_query_svt_batch",
    "range_query_svt_epsilon",
    "report_noisy_max",
    "report_noisy_max_batch",
    "sparse",
    "sparse_batch",
    "svt2",
    "svt2_allocate",
    "svt2_batch",
    "svt2_epsilon",
    "svt2_release",
    "svt2_resume",
    "svt2_spent",
    "svt2_step",
    "svt_retraversal",
    "svt_retraversal_batch",
    "svt_with_gap",
    "svt_with_gap_batch",
    "top_k",
    "top_k_batch",
    "truncated_count_batch",
    "truncation_epsilon",
    "uniform",
    "unknown_domain_top_k",
    "unknown_domain_top_k_restricted",
]
