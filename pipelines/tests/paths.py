"""The one locator of test data: every test finds the repository and its fixtures here."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "contracts" / "vectors"          # the contract test vectors (Go tests read the same files)
PLANS = REPO / "rollout" / "plans"
SCENARIOS = REPO / "scenarios"
REFERENCE = REPO / "docs" / "reference"          # ss/nginx samples and format notes
