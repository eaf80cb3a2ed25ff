"""Operating a worker: its health and readiness endpoints, Prometheus metrics and JSON logs."""
