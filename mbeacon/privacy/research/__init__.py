"""Mechanisms the experiments and the audit study, which the service does not serve: selection
(exponential mechanism, report-noisy-max, top-k and pay-what-you-get), the automatic clipping bound,
range queries worth answering and DSSGD's gradient upload. Kept apart so that ``mbeacon.privacy``
shows the core the service's promise rests on; their public names are re-exported there too."""
