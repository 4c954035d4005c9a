"""Figures of the cohort rollups: ``data`` reads the analysts' views, ``render`` draws (pure),
``cli`` is ``ccab plot``."""
