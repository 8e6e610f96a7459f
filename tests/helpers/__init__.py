"""Plain helpers shared by the test tiers (no fixtures: those live in the conftest.py files).

``ROOT`` is the repository root, for tests that read its files (parameters, notebooks,
docs, patches) wherever the test module sits.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
