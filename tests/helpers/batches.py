"""Parameter files and published run folders for the batch tests (``--jobs``,
``--executor ray``): tests/unit/test_ray.py, tests/notebooks/test_ray.py and test_jobs.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers import ROOT


def tiny_en_params(folder: Path, name: str, **changes) -> Path:
    """Write ``folder/<name>.yaml``: tiny-en.yaml, jfk only, with ``section.leaf`` changes."""
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["name"] = name
    data["fixtures"] = data["fixtures"][:1]
    for key, value in changes.items():
        section, _, leaf = key.partition(".")
        data[section][leaf] = value
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def published_dirs(reports: Path, name: str) -> list[Path]:
    """The run folders published under ``reports/<name>`` (none if it does not exist)."""
    area = reports / name
    return [p for p in area.iterdir() if not p.name.startswith(".")] if area.exists() else []
