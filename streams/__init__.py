"""The pwevent Kafka job: topics, records, slotting, state, workers, coordinator and CLI."""
