"""Contract records as JSON lines, formatted from column arrays without a dict per record.

Field names, order and units follow ``tcp_sample/1`` and ``http_request/1`` of
``contracts/CONTRACTS.md``. Strings that are constant per host are pre-rendered once
(:func:`host_fragment`); nullable fields are pre-rendered per row as ``null`` or a number; the
rest goes through one ``%`` template per record, which measured about 3x faster than building
dicts for orjson.
"""

from __future__ import annotations

import json

import numpy as np

TCP_SCHEMA = "tcp_sample/1"
HTTP_SCHEMA = "http_request/1"
CONN_SCHEMA = "tcp_conn/1"

#: gains as ss prints them (%g of value/256) -- the records carry the same rounded values
GAIN_TEXT = {2.88671875: "2.88672", 2.7734375: "2.77344", 1.25: "1.25", 0.75: "0.75", 1.0: "1", 2.0: "2",
             0.34375: "0.34375"}
GAIN_JSON = {k: (v if "." in v else v + ".0") for k, v in GAIN_TEXT.items()}

_TCP_TEMPLATE = (
    '{"schema":"tcp_sample/1","ts_ms":%d,%s,"sock_id":"%016x","peer_prefix":"%s","local_port":%d,'
    '"state":"ESTAB","rtt_us":%d,"rttvar_us":%d,"min_rtt_us":%d,"rto_ms":%d,"mss":%d,"cwnd":%d,'
    '"ssthresh":%s,"unacked":%d,"sacked":%d,"lost":%d,"retrans_out":%d,"total_retrans":%d,'
    '"reordering":%d,"bytes_sent":%d,"bytes_acked":%d,"bytes_retrans":%d,"bytes_received":%d,'
    '"segs_out":%d,"segs_in":%d,"data_segs_out":%d,"data_segs_in":%d,"delivery_rate_bps":%d,'
    '"pacing_rate_bps":%d,"delivered":%d,"app_limited":%s,"busy_ms":%d,"rwnd_limited_ms":%d,'
    '"sndbuf_limited_ms":%d,"notsent_bytes":%d,"send_q_bytes":%d,"recv_q_bytes":0,"snd_wnd":%d,'
    '"rcv_space":%d,"lastsnd_ms":%d,"lastrcv_ms":%d,"lastack_ms":%d,%s,"sample_rate":%s}'
)

# tcp_conn/1: the final counters at close. The simulated kernel (6.1) reports no RTO totals and
# no dsack/reord counters in this model: null, never 0. The simulator knows each connection's open
# duration (a real destroy event does not).
_CONN_TEMPLATE = (
    '{"schema":"tcp_conn/1","ts_ms":%d,%s,"cc_source":"socket","sock_id":"%016x","peer_prefix":"%s",'
    '"local_port":%d,"duration_ms":%d,"seen_duration_ms":null,"rtt_us":%d,"rttvar_us":%d,"min_rtt_us":%d,'
    '"rto_ms":%d,"mss":%d,"cwnd":%d,"ssthresh":%s,"unacked":%d,"sacked":%d,"lost":%d,"retrans_out":%d,'
    '"total_retrans":%d,"reordering":%d,"bytes_sent":%d,"bytes_acked":%d,"bytes_retrans":%d,'
    '"bytes_received":%d,"segs_out":%d,"segs_in":%d,"data_segs_out":%d,"data_segs_in":%d,'
    '"delivery_rate_bps":%d,"pacing_rate_bps":%d,"delivered":%d,"delivered_ce":0,"app_limited":%s,'
    '"busy_ms":%d,"rwnd_limited_ms":%d,"sndbuf_limited_ms":%d,"notsent_bytes":%d,"snd_wnd":%d,'
    '"rcv_space":%d,"dsack_dups":null,"reord_seen":null,"rcv_ooopack":null,"total_rto":null,'
    '"total_rto_recoveries":null,"total_rto_time_ms":null,"sample_rate":%s}'
)

_HTTP_TEMPLATE = (
    '{"schema":"http_request/1","ts_ms":%d,%s,"peer_prefix":"%s","conn_serial":%d,"conn_requests":%d,'
    '"method":"%s","status":%d,"bytes_sent":%d,"body_bytes_sent":%d,"request_time_ms":%d.0,%s,'
    '"sample_rate":%s}'
)

BBR_NULL = '"bbr_bw_bps":null,"bbr_min_rtt_us":null,"bbr_pacing_gain":null,"bbr_cwnd_gain":null'
TCPINFO_NULL = '"tcpinfo_rtt_us":null,"tcpinfo_rttvar_us":null,"tcpinfo_snd_cwnd":null,"tcpinfo_rcv_space":null'


def host_fragment(*, pop: str, host: str, kernel: str, arm: str, rollout_id: str, cc: str,
                  cc_version: int | None, with_cc_version: bool) -> str:
    """The per-host constant part of a record (``"pop":...,"cc":...``), JSON-escaped."""
    parts = [f'"pop":{json.dumps(pop)}', f'"host":{json.dumps(host)}', f'"kernel":{json.dumps(kernel)}',
             f'"arm":{json.dumps(arm)}', f'"rollout_id":{json.dumps(rollout_id)}', f'"cc":{json.dumps(cc)}']
    if with_cc_version:
        parts.append(f'"cc_version":{"null" if cc_version is None else int(cc_version)}')
    return ",".join(parts)


def nullable_ints(values: np.ndarray, null_mask: np.ndarray) -> list[str]:
    """``"null"`` where ``null_mask`` else the integer as text."""
    return ["null" if z else str(v) for v, z in zip(values.tolist(), null_mask.tolist())]


def bbr_fragments(is_bbr: np.ndarray, bw_bps: np.ndarray, min_rtt_us: np.ndarray,
                  pacing_gain: np.ndarray, cwnd_gain: np.ndarray) -> list[str]:
    """The four ``bbr_*`` fields per row: numbers for BBR sockets, nulls otherwise."""
    out = []
    for b, bw, mr, pg, cg in zip(is_bbr.tolist(), bw_bps.tolist(), min_rtt_us.tolist(),
                                 pacing_gain.tolist(), cwnd_gain.tolist()):
        if b:
            out.append(f'"bbr_bw_bps":{bw},"bbr_min_rtt_us":{mr},'
                       f'"bbr_pacing_gain":{GAIN_JSON[pg]},"bbr_cwnd_gain":{GAIN_JSON[cg]}')
        else:
            out.append(BBR_NULL)
    return out


def tcpinfo_fragments(missing: np.ndarray, rtt_us: np.ndarray, rttvar_us: np.ndarray,
                      cwnd: np.ndarray, rcv_space: np.ndarray) -> list[str]:
    """The four ``tcpinfo_*`` fields per row (all null where nginx logged them empty)."""
    tmpl = '"tcpinfo_rtt_us":%d,"tcpinfo_rttvar_us":%d,"tcpinfo_snd_cwnd":%d,"tcpinfo_rcv_space":%d'
    return [TCPINFO_NULL if m else tmpl % (a, b, c, d)
            for m, a, b, c, d in zip(missing.tolist(), rtt_us.tolist(), rttvar_us.tolist(),
                                     cwnd.tolist(), rcv_space.tolist())]


#: rows formatted per slice: bounds the Python objects alive at once (columns as lists)
SLICE_ROWS = 16_384

_TCP_COLUMNS = (
    "ts_ms", "host_fragment", "sock_hash", "peer_prefix", "local_port", "rtt_us", "rttvar_us", "min_rtt_us",
    "rto_ms", "mss", "cwnd", "ssthresh_text", "unacked", "sacked", "lost", "retrans_out", "total_retrans",
    "reordering", "bytes_sent", "bytes_acked", "bytes_retrans", "bytes_received", "segs_out", "segs_in",
    "data_segs_out", "data_segs_in", "delivery_rate_bps", "pacing_rate_bps", "delivered", "app_limited_text",
    "busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "notsent_bytes", "send_q_bytes", "snd_wnd", "rcv_space",
    "lastsnd_ms", "lastrcv_ms", "lastack_ms", "bbr_fragment",
)
_CONN_COLUMNS = (
    "ts_ms", "host_fragment", "sock_hash", "peer_prefix", "local_port", "duration_ms", "rtt_us", "rttvar_us",
    "min_rtt_us", "rto_ms", "mss", "cwnd", "ssthresh_text", "unacked", "sacked", "lost", "retrans_out",
    "total_retrans", "reordering", "bytes_sent", "bytes_acked", "bytes_retrans", "bytes_received", "segs_out",
    "segs_in", "data_segs_out", "data_segs_in", "delivery_rate_bps", "pacing_rate_bps", "delivered",
    "app_limited_text", "busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "notsent_bytes", "snd_wnd", "rcv_space",
)
_HTTP_COLUMNS = (
    "ts_ms", "host_fragment", "peer_prefix", "conn_serial", "conn_requests", "method", "status", "bytes_sent",
    "body_bytes_sent", "request_time_ms", "tcpinfo_fragment",
)


def _format(template: str, columns: tuple[str, ...], cols: dict[str, object], order: list[int] | None,
            sample_rate: float) -> list[bytes]:
    n = len(cols["ts_ms"])  # type: ignore[arg-type]
    idx = list(range(n)) if order is None else order
    rate = repr(float(sample_rate))
    out: list[bytes] = []
    for lo in range(0, n, SLICE_ROWS):
        rows = idx[lo:lo + SLICE_ROWS]
        lists = []
        for name in columns:
            v = cols[name]
            if isinstance(v, np.ndarray):
                lists.append(v[rows].tolist())
            else:
                lists.append([v[k] for k in rows])  # type: ignore[index]
        lists.append([rate] * len(rows))
        out.append("\n".join(map(template.__mod__, zip(*lists))).encode())
    return out


def tcp_sample_lines(cols: dict[str, object], sample_rate: float, order: list[int] | None = None) -> list[bytes]:
    """``tcp_sample/1`` JSON lines, one per row in ``order`` (default: as given), as UTF-8 blobs of
    up to :data:`SLICE_ROWS` newline-separated lines. ``cols`` holds
    equal-length arrays or lists named like the contract fields, plus ``host_fragment``,
    ``sock_hash`` (uint64), ``ssthresh_text``, ``bbr_fragment`` and ``app_limited_text``."""
    return _format(_TCP_TEMPLATE, _TCP_COLUMNS, cols, order, sample_rate)


def tcp_conn_lines(cols: dict[str, object], sample_rate: float, order: list[int] | None = None) -> list[bytes]:
    """One ``tcp_conn/1`` JSON line per row (see :func:`tcp_sample_lines`; ``duration_ms`` added)."""
    return _format(_CONN_TEMPLATE, _CONN_COLUMNS, cols, order, sample_rate)


def http_request_lines(cols: dict[str, object], sample_rate: float, order: list[int] | None = None) -> list[bytes]:
    """One ``http_request/1`` JSON line per row (see :func:`tcp_sample_lines`; here
    ``tcpinfo_fragment`` and ``method`` are per-row strings)."""
    return _format(_HTTP_TEMPLATE, _HTTP_COLUMNS, cols, order, sample_rate)
