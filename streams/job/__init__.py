"""The Kafka job, one subpackage per stage of a record's path (docs/design.md, "Layout"):

- :mod:`~streams.job.source`: the source stage, which maps existing telemetry topics and re-keys
  their events by user onto ``reports``;
- :mod:`~streams.job.partitions`: the partition side, admission, slotting, registries and the
  partition's placement of the budget ledger;
- :mod:`~streams.job.coordination`: the coordinator side, which releases each slot once;
- :mod:`~streams.job.worker`: the Kafka/Faust adapter that runs them in a worker (app, tables,
  batched ingest, runners, start-up checks, group membership);
- :mod:`~streams.job.operations`: health, metrics and logs.

Shared by the sides: :mod:`~streams.job.config` (settings every worker agrees on),
:mod:`~streams.job.roles` (a configuration's parts), :mod:`~streams.job.slot_protocol` (the
messages from the partitions to the coordinator), :mod:`~streams.job.batch_handling` (what a
batch handler receives and answers), and :mod:`~streams.job.pipeline`, the same sides in one
process without Kafka."""
