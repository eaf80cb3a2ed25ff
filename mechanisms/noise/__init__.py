"""Noise and randomness: the noise calibrated to a budget (:mod:`~mechanisms.noise.calibrated`),
its exact integer samplers (random bits in :mod:`~mechanisms.noise.bits`, Bernoulli draws in
:mod:`~mechanisms.noise.bernoulli`, geometric draws in :mod:`~mechanisms.noise.geometric`, the
discrete Laplace in :mod:`~mechanisms.noise.discrete_laplace`) and the per-slot randomness of
the live job (:mod:`~mechanisms.noise.slot_randomness`)."""
