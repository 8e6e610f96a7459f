"""The default model's parameter section and the expected jfk transcript, for the tests
that use the registry model (tests/physical/conftest.py holds its fixtures)."""

from __future__ import annotations

import re

import yaml

from tests.helpers import ROOT

JFK_TEXT = ("and so my fellow americans ask not what your country can do for you "
            "ask what you can do for your country")


def normalize(text: str) -> str:
    """Lower-case, drop punctuation, collapse whitespace."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def default_model_spec() -> dict:
    """The ``model`` section of the embedded default parameter file."""
    return yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())["model"]
