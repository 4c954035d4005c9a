"""The soak test's table (``scripts/soak.sh``, issue 28): pure functions from what the soak
counted to the printed rows and their goals. No processes, no I/O: the fast tests call these.

A row is ``(what, measured, goal, ok)``; :func:`render` prints them as one aligned table and
:func:`all_met` is the exit status's source (any missed goal: non-zero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Row = tuple[str, str, str, bool]


@dataclass
class Records:
    """One topic: what Kafka holds (end - begin offsets, hostile records included) against what the
    warehouse holds for it (raw table rows and dead letters, by their ``_partition/_offset``)."""

    topic: str
    produced: int
    stored_rows: int  # rows in the raw table from this topic (duplicates counted)
    stored_distinct: int  # distinct (_partition, _offset) in the raw table
    dead_letters: int  # distinct (_partition, _offset) dead-lettered

    @property
    def lost(self) -> int:
        return max(0, self.produced - self.stored_distinct - self.dead_letters)

    @property
    def duplicated(self) -> int:
        return self.stored_rows - self.stored_distinct


def records_row(recs: list[Records]) -> Row:
    produced = sum(r.produced for r in recs)
    stored = sum(r.stored_distinct for r in recs)
    dead = sum(r.dead_letters for r in recs)
    lost = sum(r.lost for r in recs)
    dup = sum(r.duplicated for r in recs)
    return ("records produced vs stored", f"{produced} produced, {stored} stored + {dead} dead-lettered; "
            f"lost {lost}, duplicated {dup}", "lost 0, duplicated 0", produced > 0 and lost == 0 and dup == 0)


def breaker_slots(checks_ms: list[int], failed_ms: list[int], start_ms: int, end_ms: int,
                  limit_s: float) -> tuple[int, int, int, int]:
    """Circuit-breaker evaluations of one rollout while it ran, [start_ms, end_ms]: (due, on time,
    skipped, failed attempts). The controller evaluates the breakers at most once a minute; one is
    due ``limit_s`` (a minute plus the loop's slack) after the previous successful one at the
    latest. Each gap between successful evaluations (and from the start, and to the end) longer
    than the limit skips ``ceil(gap / limit) - 1`` of them; an evaluation is on time when its gap
    was within the limit. A failed attempt (``breaker_failed``: the warehouse did not answer)
    decides nothing: it is counted, and only a successful evaluation in time fills the slot."""
    limit_ms = limit_s * 1000
    ok = sorted(t for t in checks_ms if start_ms <= t <= end_ms)
    failed = sum(1 for t in failed_ms if start_ms <= t <= end_ms)
    due = on_time = skipped = 0
    prev = start_ms
    for t in ok:
        gap = t - prev
        missed = max(0, math.ceil(gap / limit_ms) - 1)
        due += 1 + missed
        skipped += missed
        on_time += gap <= limit_ms
        prev = t
    tail = max(0, math.ceil((end_ms - prev) / limit_ms) - 1)  # still running after the last one
    return due + tail, on_time, skipped + tail, failed


def late_breakers(checks_ms: list[int], start_ms: int, end_ms: int, limit_s: float) -> list[tuple[int, int]]:
    """The gaps of :func:`breaker_slots` longer than the limit, (previous, next) in ms: the late or
    skipped evaluations, for the run's log to name."""
    ok = sorted(t for t in checks_ms if start_ms <= t <= end_ms)
    return [(a, b) for a, b in zip([start_ms] + ok, ok + [end_ms]) if b - a > limit_s * 1000]


def breakers_row(due: int, on_time: int, skipped: int, failed: int = 0) -> Row:
    pct = 100.0 * on_time / due if due else 0.0
    return ("breaker evaluations due vs done on time", f"{due} due, {on_time} on time ({pct:.1f} %), "
            f"{skipped} skipped; {failed} failed attempt(s)", "100 %, none skipped",
            due > 0 and on_time == due and skipped == 0)


def look_slots(applied_ms: int | None, look_ms: list[int], failed_ms: list[int], end_ms: int,
               every_ms: int, limit_s: float) -> tuple[int, int]:
    """Looks of one stage while its rollout ran: (due, done on time). The first look is due
    ``every_ms`` after the first whole minute after the stage's hosts applied (the controller's
    look window starts there: ``Controller.look_window``), the next ``every_ms`` after each look; a
    look is on time when it ran within ``limit_s`` of its due time; a failed look (``look_failed``)
    is not done; a due time passed by more than the limit before the end with no look is a look
    missed."""
    if applied_ms is None:
        return 0, 0
    due = done = 0
    nxt = -(-applied_ms // 60_000) * 60_000 + every_ms
    for t, ok in sorted([(t, True) for t in look_ms] + [(t, False) for t in failed_ms]):
        if t < nxt - 60_000:  # a manual or early look: not one that was due
            continue
        due += 1
        if ok and t <= nxt + limit_s * 1000:
            done += 1
        nxt = t + every_ms if ok else t + 60_000
    if nxt + limit_s * 1000 < end_ms:
        due += 1
    return due, done


def looks_row(due: int, done: int) -> Row:
    return ("looks due vs done", f"{due} due, {done} done on time", "all due looks done",
            due > 0 and done == due)


def analyst_row(counts: dict[str, int]) -> Row:
    """``counts``: run, answered, lock (a lock error), down (the warehouse service did not answer),
    other."""
    run, ok = counts.get("run", 0), counts.get("answered", 0)
    pct = 100.0 * ok / run if run else 0.0
    return ("analyst commands run vs answered", f"{run} run, {ok} answered ({pct:.1f} %); lock errors "
            f"{counts.get('lock', 0)}, service down {counts.get('down', 0)}, other {counts.get('other', 0)}",
            "100 %, no lock errors", run > 0 and ok == run and counts.get("lock", 0) == 0)


def hosts_row(read: dict[str, str], believed: dict[str, str]) -> Row:
    """Each host's congestion control read from its namespace vs what the controller's state says."""
    differ = sorted(h for h in believed if read.get(h) != believed[h])
    measured = f"{len(believed) - len(differ)}/{len(believed)} equal"
    if differ:
        measured += "; differ: " + ", ".join(f"{h} reads {read.get(h)} believed {believed[h]}" for h in differ)
    return ("host cc (namespace) vs controller", measured, "all equal", bool(believed) and not differ)


def rollback_row(minutes: float | None, breaker_minutes: int) -> Row:
    goal = breaker_minutes + 2
    return ("fault onset to rollback (min)", "not rolled back" if minutes is None else f"{minutes:.2f}",
            f"<= {goal} (breaker {breaker_minutes} min)", minutes is not None and minutes <= goal)


def page_row(states: list[str]) -> Row:
    """What the webhook receiver behind the real Alertmanager got for the faulty rollout, in order."""
    got = " -> ".join(states) if states else "nothing"
    ok = "firing" in states and "resolved" in states[states.index("firing"):] if "firing" in states else False
    return ("page at the receiver (Alertmanager)", got, "firing, then resolved", ok)


def promoted_row(promoted: str | None, hosts_on: dict[str, str], treatment: str) -> Row:
    on = sum(1 for cc in hosts_on.values() if cc == treatment)
    measured = f"promoted {promoted or '-'}; {on}/{len(hosts_on)} hosts run {treatment}"
    return ("clean rollout promoted", measured, f"{treatment} promoted, every host on it",
            promoted == treatment and bool(hosts_on) and on == len(hosts_on))


def check_row(what: str, measured: str, goal: str, ok: bool) -> Row:
    return (what, measured, goal, ok)


def render(rows: list[Row]) -> str:
    head = ("what", "measured", "goal", "ok")
    cells = [head] + [(w, m, g, "yes" if ok else "MISSED") for w, m, g, ok in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    out = []
    for i, (w, m, g, ok) in enumerate(cells):
        out.append(f"{w:<{widths[0]}}  {m:<{widths[1]}}  {g:<{widths[2]}}  {ok}")
        if i == 0:
            out.append("  ".join("-" * n for n in widths) + "  ------")
    return "\n".join(out)


def all_met(rows: list[Row]) -> bool:
    return bool(rows) and all(ok for *_x, ok in rows)
