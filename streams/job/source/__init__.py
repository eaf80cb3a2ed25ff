"""Plugging existing telemetry topics into the job: the mapping of their records to reports
(:mod:`streams.job.source.mapping`), default requirements for users who declared none
(:mod:`streams.job.source.defaults`) and the stage that re-keys mapped reports by user onto the
job's ``reports`` topic (:mod:`streams.job.source.rekey`)."""
