"""``ccab sim``: a synthetic edge PoP with known, configurable congestion-control effects.

Modules, from pure core to I/O edge:

- :mod:`ccab.sim.scenario` — typed, validated scenario files (YAML);
- :mod:`ccab.sim.dists`, :mod:`ccab.sim.population` — client prefixes and hosts;
- :mod:`ccab.sim.model` — the per-connection congestion-control model (pure numpy);
- :mod:`ccab.sim.timeline` — requests, schedules and sampler snapshots (pure numpy);
- :mod:`ccab.sim.records`, :mod:`ccab.sim.raw` — contract JSON lines, ``ss`` and nginx text;
- :mod:`ccab.sim.stats` — realised summaries (log histograms) for ``truth.json`` and the plot;
- :mod:`ccab.sim.generator` — chunked, deterministic orchestration;
- :mod:`ccab.sim.sinks`, :mod:`ccab.sim.plot` — files, Kafka, figure (the CLI: :mod:`ccab.cli.sim`).
"""
