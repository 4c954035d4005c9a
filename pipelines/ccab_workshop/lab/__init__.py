"""The lab (``ccab lab run|report``): congestion-control experiments on one machine with real
kernels, real nginx and real sockets in network namespaces, analysed by the production pipeline.

- ``spec``: experiment YAML → cases (pure).
- ``netns``: namespaces, veths, the bottleneck router (tbf, nftables loss, netem when present),
  the leftover sweep and the cleanup registry.
- ``edge``: one edge host = nginx + ccab-collector + congestion control set by ccab-agent.
- ``client``: the traffic generator, run inside the client namespace.
- ``runner``: one run of an experiment: Kafka, cases, loader, analysis, ``run.json``.
- ``analysis``: SQL over tcp_samples/http_requests and the metrics (Jain, collapse, loss-75%, CIs).
- ``report``: figures and the self-contained ``index.html``.
"""
