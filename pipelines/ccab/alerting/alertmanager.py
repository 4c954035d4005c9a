"""A small client of Alertmanager's API v2 (stdlib only: ``urllib``).

``url`` is always the Alertmanager's base URL (``http://127.0.0.1:9093``, or a prefix behind a
proxy such as ``https://am.example/alertmanager``; a trailing ``/api/v2`` is accepted too).

- :func:`post_alerts` — ``POST /api/v2/alerts``: a list of ``{labels, annotations, startsAt,
  endsAt, generatorURL}``. The labels identify an alert; posting the same labels again updates it.
- :func:`resolve` — the same alerts again with ``endsAt`` = now: Alertmanager marks them resolved.
- :func:`list_alerts`, :func:`list_alert_groups` — ``GET /api/v2/alerts[/groups]``, with label
  filters (``{"rollout": "r1"}`` or matcher strings such as ``'arm=~"bbr.*"'``).
- :func:`list_silences`, :func:`create_silence`, :func:`expire_silence` — ``/api/v2/silences``.

Timestamps are RFC 3339 strings or timezone-aware ``datetime`` objects. Every network or HTTP
failure raises :class:`AlertmanagerError`, which names the URL and the operation; malformed input
raises ``ValueError`` (or ``TypeError``) before anything is sent.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

DEFAULT_TIMEOUT_S = 10.0

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_ALERT_KEYS = ("labels", "annotations", "startsAt", "endsAt", "generatorURL")
_GETTABLE_ONLY_KEYS = ("fingerprint", "receivers", "status", "updatedAt")


class AlertmanagerError(RuntimeError):
    """A request to Alertmanager failed: ``url`` (the endpoint), ``what`` (the operation),
    ``status`` (the HTTP status, or None when there was no answer) and ``detail``."""

    def __init__(self, url: str, what: str, detail: str, status: int | None = None):
        self.url, self.what, self.detail, self.status = url, what, detail, status
        answer = f"HTTP {status}: {detail}" if status is not None else detail
        super().__init__(f"Alertmanager {url}: {what} failed: {answer}")


# ---- the public functions ------------------------------------------------------------------------

def post_alerts(url: str, alerts: Iterable[Mapping[str, Any]], *, timeout: float = DEFAULT_TIMEOUT_S) -> int:
    """Send ``alerts`` (each ``{labels, annotations?, startsAt?, endsAt?, generatorURL?}``);
    returns how many were sent (0 sends nothing)."""
    body = [_postable_alert(a, i) for i, a in enumerate(alerts)]
    if not body:
        return 0
    _request(url, "POST", "/alerts", f"posting {len(body)} alert(s)", body=body, timeout=timeout)
    return len(body)


def resolve(url: str, alerts: Iterable[Mapping[str, Any]], *, now: datetime | None = None,
            timeout: float = DEFAULT_TIMEOUT_S) -> int:
    """Resolve ``alerts``: post them again (same labels) with ``endsAt`` = ``now`` (default: the
    current time). Annotations, ``startsAt`` and ``generatorURL`` are kept when given. Alerts as
    :func:`list_alerts` returns them are accepted too (their read-only fields are left out)."""
    ends = _timestamp(now or datetime.now(timezone.utc), "now")
    body = []
    for i, a in enumerate(alerts):
        if isinstance(a, Mapping):
            a = {k: v for k, v in a.items() if k not in _GETTABLE_ONLY_KEYS}
        p = _postable_alert(a, i)
        p["endsAt"] = ends
        body.append(p)
    if not body:
        return 0
    _request(url, "POST", "/alerts", f"resolving {len(body)} alert(s)", body=body, timeout=timeout)
    return len(body)


def list_alerts(url: str, filters: Mapping[str, str] | Sequence[str] | None = None, *, active: bool = True,
                silenced: bool = True, inhibited: bool = True, unprocessed: bool = True,
                receiver: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict]:
    """The alerts Alertmanager holds (resolved ones are not listed), each with ``labels``,
    ``annotations``, ``startsAt``, ``endsAt``, ``fingerprint``, ``receivers`` and
    ``status: {state: active|suppressed|unprocessed, silencedBy, inhibitedBy}``. ``filters``: label
    equalities (``{"rollout": "r1"}``) or matcher strings (``'pop=~"tyo.*"'``); ``receiver``: a regex."""
    query = _alert_query(filters, active, silenced, inhibited, unprocessed, receiver)
    return _request(url, "GET", "/alerts", "listing alerts", query=query, timeout=timeout, expect=list)


def list_alert_groups(url: str, filters: Mapping[str, str] | Sequence[str] | None = None, *, active: bool = True,
                      silenced: bool = True, inhibited: bool = True, receiver: str | None = None,
                      timeout: float = DEFAULT_TIMEOUT_S) -> list[dict]:
    """The alert groups as the route's ``group_by`` forms them: each ``{labels, receiver, alerts}``,
    where ``labels`` are the grouping labels' values."""
    query = _alert_query(filters, active, silenced, inhibited, None, receiver)
    return _request(url, "GET", "/alerts/groups", "listing alert groups", query=query, timeout=timeout, expect=list)


def list_silences(url: str, filters: Mapping[str, str] | Sequence[str] | None = None, *,
                  timeout: float = DEFAULT_TIMEOUT_S) -> list[dict]:
    """Every silence (active, pending and expired), each with ``id``, ``matchers``, ``startsAt``,
    ``endsAt``, ``createdBy``, ``comment`` and ``status: {state}``; ``filters`` as in :func:`list_alerts`."""
    query = [("filter", m) for m in _matcher_strings(filters)]
    return _request(url, "GET", "/silences", "listing silences", query=query, timeout=timeout, expect=list)


def create_silence(url: str, matchers: Mapping[str, str] | Sequence[Mapping[str, Any]], *, created_by: str,
                   comment: str, starts_at: datetime | str | None = None, ends_at: datetime | str | None = None,
                   duration_s: float = 3600.0, timeout: float = DEFAULT_TIMEOUT_S) -> str:
    """Silence the alerts whose labels match ``matchers`` and return the silence's id.

    ``matchers``: label equalities (``{"rollout": "r1", "arm": "bbr2"}``), or a list of
    ``{name, value, isRegex?, isEqual?}``. The silence runs from ``starts_at`` (default now) to
    ``ends_at`` (default ``starts_at`` + ``duration_s``)."""
    ms = _silence_matchers(matchers)
    if not created_by or not comment:
        raise ValueError("create_silence: created_by and comment are required (Alertmanager refuses a silence without them)")
    start = starts_at if starts_at is not None else datetime.now(timezone.utc)
    if ends_at is None:
        if not isinstance(start, datetime):
            start = _parse_timestamp(start, "starts_at")
        if duration_s <= 0:
            raise ValueError(f"create_silence: duration_s must be positive, got {duration_s}")
        ends_at = start + timedelta(seconds=duration_s)
    body = {"matchers": ms, "startsAt": _timestamp(start, "starts_at"), "endsAt": _timestamp(ends_at, "ends_at"),
            "createdBy": created_by, "comment": comment}
    what = "creating a silence for " + ", ".join(_matcher_string(m) for m in ms)
    answer = _request(url, "POST", "/silences", what, body=body, timeout=timeout, expect=dict)
    sid = answer.get("silenceID")
    if not isinstance(sid, str) or not sid:
        raise AlertmanagerError(_endpoint(url, "/silences"), what, f"the answer has no silenceID: {answer!r:.200}")
    return sid


def expire_silence(url: str, silence_id: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Expire (end now) the silence ``silence_id``."""
    if not silence_id:
        raise ValueError("expire_silence: silence_id is empty")
    _request(url, "DELETE", "/silence/" + urllib.parse.quote(silence_id, safe=""),
             f"expiring silence {silence_id}", timeout=timeout)


# ---- input -----------------------------------------------------------------------------------------

def _postable_alert(alert: Mapping[str, Any], i: int) -> dict:
    if not isinstance(alert, Mapping):
        raise TypeError(f"alert {i}: expected a mapping with labels, got {type(alert).__name__}")
    unknown = sorted(set(alert) - set(_ALERT_KEYS))
    if unknown:
        raise ValueError(f"alert {i}: unknown field(s) {', '.join(unknown)}; known: {', '.join(_ALERT_KEYS)}")
    labels = _string_map(alert.get("labels"), f"alert {i} labels", names=True)
    if not labels:
        raise ValueError(f"alert {i}: labels are required (they identify the alert)")
    out: dict[str, Any] = {"labels": labels}
    if alert.get("annotations") is not None:
        out["annotations"] = _string_map(alert["annotations"], f"alert {i} annotations", names=False)
    for key in ("startsAt", "endsAt"):
        if alert.get(key) is not None:
            out[key] = _timestamp(alert[key], f"alert {i} {key}")
    if alert.get("generatorURL"):
        if not isinstance(alert["generatorURL"], str):
            raise TypeError(f"alert {i} generatorURL: expected a string")
        out["generatorURL"] = alert["generatorURL"]
    return out


def _string_map(value: Any, where: str, *, names: bool) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{where}: expected a mapping of strings, got {type(value).__name__}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"{where}: {k!r}: names and values must be strings, got {type(v).__name__}")
        if names and not _LABEL_NAME.match(k):
            raise ValueError(f"{where}: {k!r} is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        out[k] = v
    return out


def _timestamp(value: datetime | str, where: str) -> str:
    if isinstance(value, str):
        _parse_timestamp(value, where)
        return value
    if not isinstance(value, datetime):
        raise TypeError(f"{where}: expected a datetime or an RFC 3339 string, got {type(value).__name__}")
    if value.tzinfo is None:
        raise ValueError(f"{where}: datetime {value.isoformat()} has no timezone (use datetime.now(timezone.utc))")
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_timestamp(value: str, where: str) -> datetime:
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{where}: {value!r} is not an RFC 3339 timestamp") from None
    if ts.tzinfo is None:
        raise ValueError(f"{where}: {value!r} has no timezone (end it with Z or +00:00)")
    return ts


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _matcher_strings(filters: Mapping[str, str] | Sequence[str] | None) -> list[str]:
    if filters is None:
        return []
    if isinstance(filters, Mapping):
        labels = _string_map(filters, "filters", names=True)
        return [f"{k}={_quote(v)}" for k, v in labels.items()]
    if isinstance(filters, str):
        raise TypeError("filters: expected a mapping or a list of matcher strings, got one string")
    out = []
    for f in filters:
        if not isinstance(f, str) or not f:
            raise TypeError(f"filters: {f!r} is not a matcher string such as 'rollout=\"r1\"'")
        out.append(f)
    return out


def _alert_query(filters, active, silenced, inhibited, unprocessed, receiver) -> list[tuple[str, str]]:
    q = [("active", _bool(active)), ("silenced", _bool(silenced)), ("inhibited", _bool(inhibited))]
    if unprocessed is not None:
        q.append(("unprocessed", _bool(unprocessed)))
    q += [("filter", m) for m in _matcher_strings(filters)]
    if receiver:
        q.append(("receiver", receiver))
    return q


def _bool(b: bool) -> str:
    return "true" if b else "false"


def _silence_matchers(matchers) -> list[dict]:
    if isinstance(matchers, Mapping):
        labels = _string_map(matchers, "matchers", names=True)
        ms = [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in labels.items()]
    elif isinstance(matchers, Sequence) and not isinstance(matchers, str):
        ms = []
        for i, m in enumerate(matchers):
            if not isinstance(m, Mapping) or not isinstance(m.get("name"), str) or not isinstance(m.get("value"), str):
                raise TypeError(f"matchers[{i}]: expected {{name, value, isRegex?, isEqual?}} with string name and value")
            if not _LABEL_NAME.match(m["name"]):
                raise ValueError(f"matchers[{i}]: {m['name']!r} is not a valid label name")
            ms.append({"name": m["name"], "value": m["value"], "isRegex": bool(m.get("isRegex", False)),
                       "isEqual": bool(m.get("isEqual", True))})
    else:
        raise TypeError(f"matchers: expected a mapping or a list of matchers, got {type(matchers).__name__}")
    if not ms:
        raise ValueError("matchers: at least one matcher is required (a silence without matchers would match nothing)")
    return ms


def _matcher_string(m: Mapping[str, Any]) -> str:
    op = {(False, True): "=", (False, False): "!=", (True, True): "=~", (True, False): "!~"}[
        (bool(m.get("isRegex")), bool(m.get("isEqual", True)))]
    return f"{m['name']}{op}{_quote(m['value'])}"


# ---- HTTP ------------------------------------------------------------------------------------------

def _endpoint(url: str, path: str) -> str:
    if not isinstance(url, str) or not url:
        raise ValueError("Alertmanager URL is empty")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"Alertmanager URL {url!r}: expected http(s)://host:port[/prefix]")
    base = url.rstrip("/")
    if base.endswith("/api/v2"):
        base = base[: -len("/api/v2")]
    return base + "/api/v2" + path


def _request(url: str, method: str, path: str, what: str, *, body: Any = None,
             query: list[tuple[str, str]] | None = None, timeout: float = DEFAULT_TIMEOUT_S,
             expect: type | None = None) -> Any:
    endpoint = _endpoint(url, path)
    full = endpoint + ("?" + urllib.parse.urlencode(query) if query else "")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(full, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        try:
            detail = exc.read(500).decode("utf-8", "replace").strip()
        except Exception:  # the error body is a courtesy; the status is the message
            detail = ""
        raise AlertmanagerError(endpoint, what, detail or exc.reason or "", status=exc.code) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise AlertmanagerError(endpoint, what, f"no answer within {timeout:g} s") from None
        raise AlertmanagerError(endpoint, what, f"unreachable: {reason}") from None
    except TimeoutError:
        raise AlertmanagerError(endpoint, what, f"no answer within {timeout:g} s") from None
    except OSError as exc:  # connection reset while reading, and the like
        raise AlertmanagerError(endpoint, what, f"connection failed: {exc}") from None
    if expect is None:
        return None
    try:
        answer = json.loads(raw)
    except ValueError:
        raise AlertmanagerError(endpoint, what, f"the answer is not JSON: {raw[:200]!r}") from None
    if not isinstance(answer, expect):
        raise AlertmanagerError(endpoint, what, f"expected a JSON {expect.__name__}, got {type(answer).__name__}")
    return answer
