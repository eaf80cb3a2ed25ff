"""Many runs of one mechanism stepped together, one call per slot, each run releasing what it
releases alone: fixed requirements (:mod:`~mechanisms.batch.fixed`), dynamic ones
(:mod:`~mechanisms.batch.dynamic`), and runs of any other kind stepped one by one
(:mod:`~mechanisms.batch.steppers`)."""
