"""The workshop: tools that build, feed and exercise ccab on one machine, apart from the product.

- :mod:`ccab_workshop.sim` — the simulator (``ccab sim``): synthetic edge PoPs with known effects;
- :mod:`ccab_workshop.lab` — the lab (``ccab lab``): real kernels and sockets in network namespaces;
- :mod:`ccab_workshop.kafka` — a local Kafka broker and KRaft cluster from the jars (``ccab kafka``);
- :mod:`ccab_workshop.dags_local` — a local Airflow running the DAGs in-process (``ccab dags``);
- :mod:`ccab_workshop.sim_actuator` — a SIMULATED agent for ``ccab sim`` hosts
  (``ccab rollout sim-actuator``).

The workshop imports the product (``ccab``); the product never imports the workshop — only the
CLI (``ccab.cli``) reaches it, so ``ccab sim|lab|kafka …`` still work
(``pipelines/tests/architecture/test_layers.py`` checks both).
"""
