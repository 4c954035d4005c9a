"""Raw collector inputs: ``ss -tinHOe state established`` lines and nginx ``ccab`` log lines.

The token order and hiding rules follow iproute2 6.1 ``misc/ss.c`` (``tcp_stats_print``,
``tcp_timer_print``, ``sock_details_print``) as in ``contracts/vectors``: most tokens are
printed only when non-zero, ``ssthresh`` is hidden when infinite, ``reordering`` when 3, rates are
raw ``bps`` (``-n``). BBRv2 sockets carry Google's extended ``bbr:(...,version:2,...)`` block.
The nginx lines use the ``ccab`` JSON log_format of ``docs/reference/nginx.md``, key for key.
"""

from __future__ import annotations

PHASE_NAMES = {1: "STARTUP", 2: "DRAIN", 3: "PROBE_RTT", 4: "PROBE_BW_UP", 5: "PROBE_BW_DOWN",
               6: "PROBE_BW_CRUISE", 7: "PROBE_BW_REFILL"}
UNSET_U32 = 0xFFFFFFFF


def ms_timer(timeout_ms: int) -> str:
    """iproute2 ``print_ms_timer``: ``368ms``, ``020ms``, ``1.208ms`` (sic), ``12sec``, ``1min``."""
    secs, msecs = divmod(int(timeout_ms), 1000)
    minutes, secs = divmod(secs, 60)
    out = ""
    if minutes:
        msecs = 0
        out = f"{minutes}min"
        if minutes > 9:
            secs = 0
    if secs:
        if secs > 9:
            msecs = 0
        out += f"{secs}{'.' if msecs else 'sec'}"
    if msecs:
        out += f"{msecs:03d}ms"
    return out


def ss_line(r: dict) -> str:
    """One socket as ``ss -tinHOe state established`` prints it (iproute2 6.1, kernel >= 5.4).

    ``r`` holds the snapshot fields (contract names) plus ``local``, ``peer`` (``addr:port``,
    IPv6 in brackets), ``cc``, ``cc_version``, ``snd_wscale``, ``rcv_wscale``, ``advmss``,
    ``ino``, ``cookie``, ``timer_ms``, ``bbr_mode``/``bbr_phase`` (v2) and BBR fields.
    """
    t = [f"{r['recv_q_bytes']:<6} {r['send_q_bytes']:<6} {r['local']} {r['peer']}"]
    if r["timer_ms"]:
        t.append(f"timer:(on,{ms_timer(r['timer_ms'])},0)")
    t.append(f"uid:33 ino:{r['ino']} sk:{r['cookie']:x} cgroup:/system.slice/nginx.service <->")
    t.append(f"ts sack {r['cc']} wscale:{r['snd_wscale']},{r['rcv_wscale']}")
    t.append(f"rto:{r['rto_ms']:g}")
    t.append(f"rtt:{r['rtt_us'] / 1000:g}/{r['rttvar_us'] / 1000:g}")
    t.append(f"mss:{r['mss']} pmtu:1500 rcvmss:536 advmss:{r['advmss']} cwnd:{r['cwnd']}")
    if r["ssthresh"] is not None:
        t.append(f"ssthresh:{r['ssthresh']}")
    t.append(f"bytes_sent:{r['bytes_sent']}")
    if r["bytes_retrans"]:
        t.append(f"bytes_retrans:{r['bytes_retrans']}")
    t.append(f"bytes_acked:{r['bytes_acked']}")
    if r["bytes_received"]:
        t.append(f"bytes_received:{r['bytes_received']}")
    t.append(f"segs_out:{r['segs_out']} segs_in:{r['segs_in']} data_segs_out:{r['data_segs_out']}")
    if r["data_segs_in"]:
        t.append(f"data_segs_in:{r['data_segs_in']}")
    if r["bbr_bw_bps"] is not None:
        blk = (f"bbr:(bw:{r['bbr_bw_bps']}bps,mrtt:{r['bbr_min_rtt_us'] / 1000:g},"
               f"pacing_gain:{r['bbr_pacing_gain_text']},cwnd_gain:{r['bbr_cwnd_gain_text']}")
        if r["cc_version"] in (2, 3):  # Google's extended block (v2alpha, v3)
            blk += (f",version:{r['cc_version']},bw_hi:{r['bbr_bw_hi_bps']}bps,bw_lo:{r['bbr_bw_lo_bps']}bps,"
                    f"inflight_hi:{r['bbr_inflight_hi']},inflight_lo:{r['bbr_inflight_lo']},"
                    f"extra_acked:{r['bbr_extra_acked']},mode:{r['bbr_mode']},"
                    f"phase:{PHASE_NAMES[r['bbr_phase']]}")
        t.append(blk + ")")
    t.append(f"send {r['cwnd'] * r['mss'] * 8000000.0 / r['rtt_us']:.0f}bps")
    for k in ("lastsnd_ms", "lastrcv_ms", "lastack_ms"):
        if r[k]:
            t.append(f"{k[:-3]}:{r[k]}")
    t.append(f"pacing_rate {r['pacing_rate_bps']}bps")
    if r["delivery_rate_bps"]:
        t.append(f"delivery_rate {r['delivery_rate_bps']}bps")
    if r["delivered"]:
        t.append(f"delivered:{r['delivered']}")
    if r["app_limited"]:
        t.append("app_limited")
    if r["busy_ms"]:
        t.append(f"busy:{r['busy_ms']}ms")
        if r["rwnd_limited_ms"]:
            t.append(f"rwnd_limited:{r['rwnd_limited_ms']}ms({100.0 * r['rwnd_limited_ms'] / r['busy_ms']:.1f}%)")
        if r["sndbuf_limited_ms"]:
            t.append(f"sndbuf_limited:{r['sndbuf_limited_ms']}ms({100.0 * r['sndbuf_limited_ms'] / r['busy_ms']:.1f}%)")
    if r["unacked"]:
        t.append(f"unacked:{r['unacked']}")
    if r["retrans_out"] or r["total_retrans"]:
        t.append(f"retrans:{r['retrans_out']}/{r['total_retrans']}")
    if r["lost"]:
        t.append(f"lost:{r['lost']}")
    if r["sacked"]:
        t.append(f"sacked:{r['sacked']}")
    if r["reordering"] != 3:
        t.append(f"reordering:{r['reordering']}")
    t.append(f"rcv_space:{r['rcv_space']} rcv_ssthresh:64088")
    if r["notsent_bytes"]:
        t.append(f"notsent:{r['notsent_bytes']}")
    t.append(f"minrtt:{r['min_rtt_us'] / 1000:g}")
    if r["snd_wnd"]:
        t.append(f"snd_wnd:{r['snd_wnd']}")
    return " ".join(t)


_NGINX_TEMPLATE = (
    '{"msec":%d.%03d,"remote_addr":"%s","connection":%d,"connection_requests":%d,'
    '"request_method":"%s","status":%d,"bytes_sent":%d,"body_bytes_sent":%d,"request_time":%d.%03d,'
    '"tcpinfo_rtt":"%s","tcpinfo_rttvar":"%s","tcpinfo_snd_cwnd":"%s","tcpinfo_rcv_space":"%s"}'
)


def nginx_line(*, ts_ms: int, remote_addr: str, connection: int, connection_requests: int, method: str,
               status: int, bytes_sent: int, body_bytes_sent: int, request_time_ms: int,
               tcpinfo: tuple[int, int, int, int] | None) -> str:
    """One access-log line in the ``ccab`` JSON log_format (``escape=json``: empty ``$tcpinfo_*``
    when getsockopt failed)."""
    ti = ("", "", "", "") if tcpinfo is None else tuple(str(v) for v in tcpinfo)
    return _NGINX_TEMPLATE % (ts_ms // 1000, ts_ms % 1000, remote_addr, connection, connection_requests,
                              method, status, bytes_sent, body_bytes_sent, request_time_ms // 1000,
                              request_time_ms % 1000, *ti)
