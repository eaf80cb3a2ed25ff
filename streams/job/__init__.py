"""The Kafka job: the partition worker (:mod:`~streams.job.partition`) and its placement of the
ledger, the coordinator (:mod:`~streams.job.coordinator`) and its side of the placement, the slot
protocol between them, and what runs them (on Kafka :mod:`~streams.job.partition_runner` and
:mod:`~streams.job.coordinator_runner`, wired into one Faust app by :mod:`~streams.job.faust_job`;
:mod:`~streams.job.pipeline` in one process)."""
