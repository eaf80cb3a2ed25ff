"""The partition side (step 1 of a report's path, docs/design.md): admission, slotting by event
time, each partition's registry of users and, under dynamic requirements, its part of the budget
ledger. Pure Python and numpy: nothing here talks to Kafka."""
