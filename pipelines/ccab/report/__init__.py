"""The canary report: one self-contained folder (``index.html`` + PNGs) per rollout.

``ccab report --rollout ID`` (:mod:`ccab.cli.report`) → :func:`build_report`
(:mod:`ccab.report.build`) reads the judge's newest window (:mod:`ccab.report.data`) and renders
it with the reusable page helpers of :mod:`ccab.report.html` (also used by the lab's report).
Default folder: ``$CCAB_DATA_DIR/reports/<rollout_id>/`` — the judge's alerts link there.
"""

from ccab.report.build import ReportResult, build_report, default_out_dir

__all__ = ["build_report", "default_out_dir", "ReportResult"]
