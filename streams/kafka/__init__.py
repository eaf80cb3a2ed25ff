"""Talking to Kafka: connection settings (TLS, SASL), the job's topics, reading offsets, and the
embedded Kafka-protocol broker used by the demo, the tests and the benchmarks."""
