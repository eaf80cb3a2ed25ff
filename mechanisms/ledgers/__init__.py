"""Budget ledgers: what each level (or user) may spend at a slot.

:mod:`~mechanisms.ledgers.plan` holds what every ledger returns (a slot's plan and what it
charged); :mod:`~mechanisms.ledgers.fixed` the ledgers of fixed requirements, one row per
requirement level (their window sums over :mod:`~mechanisms.ledgers.recent`), with
:mod:`~mechanisms.ledgers.adaptive`; :mod:`~mechanisms.ledgers.dynamic` those of dynamic
requirements (DPBD, and DPBA in :mod:`~mechanisms.ledgers.dpba`), one column per group of users
with the same history, stored as in :mod:`~mechanisms.ledgers.columns`, merged by
:mod:`~mechanisms.ledgers.groups`, saved by :mod:`~mechanisms.ledgers.dynamic_snapshot` and seen
as levels by :mod:`~mechanisms.ledgers.grid_levels`; :mod:`~mechanisms.ledgers.kinds` names
every ledger class.
"""
