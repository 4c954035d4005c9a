"""Figures of the cohort rollups: ``data`` reads the analysts' views, ``render`` draws (pure),
``ccab plot`` is :mod:`ccab.cli.plot`."""
