"""The names of the empirical privacy audit (mechanisms/evaluation/privacy_audit/): mechanisms,
population modes, pairs and planted defects; apart from the audit, so that a command line can
offer them without importing it."""

from __future__ import annotations

#: the mechanisms the job runs, audited by default
AUDITED = ("pbd", "pba", "bd", "ba", "uniform", "sample", "pbad", "pbu", "pbd_ipw", "pba_ipw",
           "dpbd", "dpba")
#: ``declared``: every user declared its requirement and is registered from slot 1;
#: ``defaults``: every user holds a default requirement, as a latent population (every device
#: counts from slot 1 with its rule's requirement; level sizes and users are public constants)
MODES = ("declared", "defaults")
#: the neighbouring pairs of inputs (module doc)
PAIRS = ("slot", "window", "first_event")
PLANTS = ("noise_halved", "charge_dropped", "threshold_off_by_one", "realised_users")
NEIGHBOURING = ("add-remove", "replace")
