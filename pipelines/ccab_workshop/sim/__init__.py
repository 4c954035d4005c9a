"""``ccab sim``: a synthetic edge PoP with known, configurable congestion-control effects.

Modules, from pure core to I/O edge:

- :mod:`ccab_workshop.sim.scenario` — typed, validated scenario files (YAML);
- :mod:`ccab_workshop.sim.dists`, :mod:`ccab_workshop.sim.population` — client prefixes and hosts;
- :mod:`ccab_workshop.sim.model` — the per-connection congestion-control model (pure numpy);
- :mod:`ccab_workshop.sim.timeline` — requests, schedules and sampler snapshots (pure numpy);
- :mod:`ccab_workshop.sim.records`, :mod:`ccab_workshop.sim.raw` — contract JSON lines, ``ss`` and nginx text;
- :mod:`ccab_workshop.sim.stats` — realised summaries (log histograms) for ``truth.json`` and the plot;
- :mod:`ccab_workshop.sim.generator` — chunked, deterministic orchestration;
- :mod:`ccab_workshop.sim.sinks`, :mod:`ccab_workshop.sim.plot` — files, Kafka, figure (the CLI: :mod:`ccab.cli.sim`).
"""
