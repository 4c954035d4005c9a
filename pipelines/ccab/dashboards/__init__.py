"""Grafana dashboards as code: ``ccab dashboards build`` writes dashboards/generated/*.json and
dashboards/provisioning/ from :mod:`ccab.dashboards.definitions` and
:mod:`ccab.dashboards.provisioning` (see dashboards/README.md)."""
