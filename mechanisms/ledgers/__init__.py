"""Budget ledgers: what each level (or user) may spend at a slot.

:mod:`~mechanisms.ledgers.plan` holds what every ledger returns (a slot's plan and what it
charged); :mod:`~mechanisms.ledgers.fixed` the ledgers of fixed requirements, one row per
requirement level; :mod:`~mechanisms.ledgers.dynamic` those of dynamic requirements, one column
per group of users with the same history, stored as in :mod:`~mechanisms.ledgers.columns` and
merged by :mod:`~mechanisms.ledgers.groups`.
"""
