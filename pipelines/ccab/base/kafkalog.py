"""librdkafka's own log, summarised: every Kafka client of ccab passes :func:`librdkafka_logger`
as its ``logger``, so a broker that is down gives one warning line per distinct problem (through
Python logging, e.g. ``kafka: connection refused to 127.0.0.1:19092 (repeats are not shown)``),
never the hundreds of raw ``FAIL`` lines librdkafka prints to stderr by default.

The first occurrence of each distinct message is logged at WARNING on ``ccab.kafka.client``
(shown where the application configured logging, silent otherwise); repeats are counted in
:attr:`SummarisingLogger.repeats` and dropped."""

from __future__ import annotations

import logging
import re

# the parts of a librdkafka message that change from one retry to the next
_VOLATILE = re.compile(r"\d+ms|\(after \d+ms[^)]*\)|\d+ms in state \w+|: \d+/\d+ brokers are down")


class SummarisingLogger(logging.Logger):
    """A logger librdkafka can write to that passes each distinct message once."""

    def __init__(self, name: str):
        super().__init__(name, logging.DEBUG)
        self.seen: set[str] = set()
        self.repeats = 0
        self.first: list[str] = []
        self._out = logging.getLogger("ccab.kafka.client")

    def log(self, level, msg, *args, **kwargs):  # librdkafka calls log(level, fmt, fac, name, text)
        text = (msg % args) if args else str(msg)
        if level < logging.WARNING:
            return
        key = _VOLATILE.sub("", text.split("] ", 1)[-1])
        if key in self.seen:
            self.repeats += 1
            return
        self.seen.add(key)
        if len(self.first) < 5:
            self.first.append(text)
        self._out.log(logging.WARNING, "kafka: %s (repeats are not shown)", text)


def librdkafka_logger(name: str = "librdkafka") -> SummarisingLogger:
    """A fresh summarising logger for one Kafka client."""
    return SummarisingLogger(f"ccab.kafka.{name}")
