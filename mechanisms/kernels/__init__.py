"""Compiled loops of a batch of runs (numba where the evaluation extra installs it), each equal
to the numpy code it replaces bit for bit: :mod:`~mechanisms.kernels.compiled` for the release
rule, the ledgers, OBS and PLBU, :mod:`~mechanisms.kernels.compiled_filters` for the
post-processing filters. A leaf: it imports nothing else of :mod:`mechanisms`."""
