"""The coordinator side (step 3 of a report's path, docs/design.md): every partition's messages
checked and ordered, and each slot released once. Pure Python and numpy: nothing here talks to
Kafka."""
