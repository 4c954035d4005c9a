"""ccab: congestion-control A/B rollouts and analytics for edge fleets."""

__version__ = "0.1.0"
