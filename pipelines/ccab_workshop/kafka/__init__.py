"""A local Kafka from the jars: one KRaft broker (:mod:`.broker`) or a small cluster (:mod:`.cluster`),
for development, the demo, the lab and the tests. The product's Kafka code (topics, reachability)
is :mod:`ccab.kafka`; it works against any cluster."""
