"""The Kafka/Faust adapter: a worker's app, topics and tables, the batched ingest, the runners
that feed the partition and coordinator sides, its checks at start-up and its membership of the
consumer group."""
