"""One run of a mechanism: the one interface (:mod:`~mechanisms.run.mechanism`: a ledger, the
release rule and the last publication), fixed requirements (:mod:`~mechanisms.run.fixed`; over
named levels for the job's coordinator, :mod:`~mechanisms.run.named_levels`), dynamic ones
(:mod:`~mechanisms.run.dynamic`), and dry runs of a ledger (:mod:`~mechanisms.run.planning`)."""
