"""The global release rule, run on aggregates: OBS (:mod:`~mechanisms.release.obs`), the
Sampling Mechanism (:mod:`~mechanisms.release.sampling`), the publish test and the release
(:mod:`~mechanisms.release.rule`, its unbiased estimator in :mod:`~mechanisms.release.ipw`),
and each run's draws of a slot (:mod:`~mechanisms.release.run_draws`)."""
