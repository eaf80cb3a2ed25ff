"""The record formats of the job's topics: defined once in :mod:`~streams.records.formats`
(which also writes the JSON Schemas in ``schemas/``) and parsed in batches by
:mod:`~streams.records.parsing`."""
