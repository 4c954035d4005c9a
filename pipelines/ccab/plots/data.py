"""What the figures show: rows of the analysts' views (``sql/views/``) for one selection."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ccab.base.chtime import sql_time, utc_hour
from ccab.base.vocabulary import PAIRS, get
from ccab.base.warehouse import Warehouse


@dataclass(frozen=True)
class Selection:
    """Which rollup rows a figure pools.

    Parameters
    ----------
    t_from, t_to : datetime
        UTC hour boundaries, ``[t_from, t_to)``.
    pop, rollout_id : str
        ``""`` means every PoP / rollout.
    segment : str
        One segment ('all', 'bulk', 'rtt:20-50ms', ...).
    """

    t_from: datetime
    t_to: datetime
    pop: str = ""
    rollout_id: str = ""
    segment: str = "all"

    def params(self) -> dict:
        return {"pop": self.pop, "rollout_id": self.rollout_id, "segment": self.segment,
                "t_from": sql_time(utc_hour(self.t_from)), "t_to": sql_time(utc_hour(self.t_to))}

    def label(self) -> str:
        where = " ".join(x for x in (self.pop, self.rollout_id) if x) or "all PoPs"
        return (f"{where}, {self.t_from:%Y-%m-%d %H:%M}–{self.t_to:%Y-%m-%d %H:%M} UTC, "
                f"segment {self.segment}")


_VIEW_ARGS = ("pop = {pop:String}, rollout_id = {rollout_id:String}, segment = {segment:String}, "
              "t_from = {t_from:DateTime('UTC')}, t_to = {t_to:DateTime('UTC')}")


def heatmap_rows(wh: Warehouse, sel: Selection, pair: str, bins_per_octave: int = 4) -> list[dict]:
    """Rows of ``cohort_heatmap`` (one per arm x cell)."""
    if pair not in PAIRS:
        raise ValueError(f"unknown pair {pair!r}; known: {', '.join(PAIRS)}")
    return wh.query(f"SELECT * FROM cohort_heatmap({_VIEW_ARGS}, pair = {{pair:String}}, "
                    "bins_per_octave = {k:UInt8})", params={**sel.params(), "pair": pair, "k": bins_per_octave}).dicts()


def pdf_rows(wh: Warehouse, sel: Selection, metric: str, bins_per_octave: int = 8) -> list[dict]:
    """Rows of ``cohort_pdf`` (one per arm x bin, plus the zeros)."""
    get(metric)
    return wh.query(f"SELECT * FROM cohort_pdf({_VIEW_ARGS}, metric = {{metric:String}}, "
                    "bins_per_octave = {k:UInt8})", params={**sel.params(), "metric": metric, "k": bins_per_octave}).dicts()


def cdf_rows(wh: Warehouse, sel: Selection, metric: str, bins_per_octave: int = 32) -> list[dict]:
    """Rows of ``cohort_cdf`` (one per arm x bin, zeros first)."""
    get(metric)
    return wh.query(f"SELECT * FROM cohort_cdf({_VIEW_ARGS}, metric = {{metric:String}}, "
                    "bins_per_octave = {k:UInt8})", params={**sel.params(), "metric": metric, "k": bins_per_octave}).dicts()


def quantile_rows(wh: Warehouse, sel: Selection, metric: str) -> list[dict]:
    """Rows of ``cohort_quantiles`` for the selection's segment (one per arm)."""
    get(metric)
    return wh.query(f"SELECT * FROM cohort_quantiles({_VIEW_ARGS}, metric = {{metric:String}})",
                    params={**sel.params(), "metric": metric}).dicts()


def speed_rows(wh: Warehouse, sel: Selection, pre_from: datetime, pre_to: datetime) -> list[dict]:
    """Rows of ``cohort_goodput_by_client_speed`` (one per client-speed band x arm): prefixes
    banded by their goodput in ``[pre_from, pre_to)`` (the pre-period), goodput of the window."""
    return wh.query("SELECT * FROM cohort_goodput_by_client_speed(pop = {pop:String}, rollout_id = {rollout_id:String}, "
                    "pre_from = {pre_from:DateTime('UTC')}, pre_to = {pre_to:DateTime('UTC')}, "
                    "t_from = {t_from:DateTime('UTC')}, t_to = {t_to:DateTime('UTC')})",
                    params={**sel.params(), "pre_from": sql_time(utc_hour(pre_from)),
                            "pre_to": sql_time(utc_hour(pre_to))}).dicts()
