"""Talking to on-call's own tools. ``alertmanager``: a stdlib-only client of Alertmanager's API v2."""

from ccab.alerting.alertmanager import (
    AlertmanagerError,
    create_silence,
    expire_silence,
    list_alert_groups,
    list_alerts,
    list_silences,
    post_alerts,
    resolve,
)

__all__ = [
    "AlertmanagerError",
    "create_silence",
    "expire_silence",
    "list_alert_groups",
    "list_alerts",
    "list_silences",
    "post_alerts",
    "resolve",
]
