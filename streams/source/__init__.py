"""Plugging existing telemetry topics into the job: the mapping of their records to reports
(:mod:`streams.source.mapping`), default requirements for users who declared none
(:mod:`streams.source.defaults`) and the stage that re-keys mapped reports by user onto the
job's ``reports`` topic (:mod:`streams.source.rekey`)."""
