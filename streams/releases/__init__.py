"""Reading what the job publishes: a typed client of the releases topic and the live dashboard."""
