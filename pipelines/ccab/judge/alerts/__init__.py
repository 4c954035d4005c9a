"""Alerts on-call receives, one module per job: built from the judge's findings (:mod:`.build`,
its words and numbers in :mod:`.text`), stored in ``alerts`` (:mod:`.store`), closed when the
controller or a person acts (:mod:`.close`), sent to Alertmanager (:mod:`.notify`); the record
itself in :mod:`.model`.

- ``alert_id`` = hash of what the finding *is* (rollout, pop, kind, metric, statistic, segment, arms,
  direction) — not of the window — so every look that sees it again replaces the same row.
- Severities: guardrail regressions carry their guardrail's severity; a circuit-breaker trip pages;
  a failed data-quality gate is a ticket; informational, segment and shift findings are ``info``.
- ``action`` is what the rollout controller did (:func:`.close.set_action`): ``none`` until it acts.
- The webhook speaks Alertmanager's API (``POST /api/v2/alerts``, a JSON list of
  ``{labels, annotations, startsAt, generatorURL}``), so it can point at an Alertmanager or any
  receiver that accepts that shape. ``ccab alerts --json`` prints the contract's fields.
"""
