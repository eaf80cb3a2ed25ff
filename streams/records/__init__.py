"""The record formats of the job's topics: defined once in :mod:`~streams.records.formats` (which
also writes the JSON Schemas in ``schemas/``) from :mod:`~streams.records.format_nodes`,
:mod:`~streams.records.field_formats`, :mod:`~streams.records.input_formats` and
:mod:`~streams.records.output_formats`; and parsed in batches by
:mod:`~streams.records.field_parsing`, :mod:`~streams.records.domains`,
:mod:`~streams.records.report_parsing`, :mod:`~streams.records.requirement_parsing` and
:mod:`~streams.records.dead_letters`."""
