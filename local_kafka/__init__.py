"""Kafka brokers started on this machine, for the tests, the benchmarks and ``pwevent demo``:
the embedded Kafka-protocol broker (:mod:`local_kafka.embedded`) and a local Apache Kafka
cluster in KRaft mode from the jars the set-up fetches (:mod:`local_kafka.apache`). A worker
never needs them: it connects to the cluster it is given."""
