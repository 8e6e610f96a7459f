"""Two parameter files in one `verifylib run`: two reports, one index, one shared build."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verifylib import canonical

from tests.helpers import ROOT

pytestmark = [pytest.mark.physical, pytest.mark.notebook]


def _params(folder: Path, name: str) -> Path:
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["name"] = name
    data["fixtures"] = data["fixtures"][:1]  # jfk only: this test is about the batch
    data["canary"]["runs"] = 3
    data["export"]["fp16"] = False  # one variant: the fp16 path is the default audit's test
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_batch_of_two_models_with_require_admissible(tmp_path, v185_ggml_build):
    params_dir = tmp_path / "params"
    params_dir.mkdir()
    _params(params_dir, "model-a")
    _params(params_dir, "model-b")
    reports = tmp_path / "reports"
    res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(params_dir),
                          "--reports", str(reports), "--no-progress", "--require", "admissible"],
                         capture_output=True, text=True)
    # INCOMPLETE is exit 0 normally; --require admissible makes it 1, reports still written.
    assert res.returncode == 1, res.stdout + res.stderr[-3000:]
    assert "worst verdict: INCOMPLETE" in res.stdout
    runs = {}
    for name in ("model-a", "model-b"):
        (run_dir,) = [p for p in (reports / name).iterdir() if not p.name.startswith(".")]
        assert (run_dir / "report.html").is_file()
        runs[name] = run_dir
    binaries = set()
    for run_dir in runs.values():
        build = canonical.read_json(run_dir / "evidence" / "01_build" / "build.json")
        assert build["cached"] is True  # the session's build, shared by both models
        binaries.add(build["sha256"])
    assert len(binaries) == 1
    index = (reports / "index.html").read_text()
    assert "<script" not in index.lower()
    for name, run_dir in runs.items():
        assert name in index
        assert f"{run_dir.relative_to(reports).as_posix()}/report.html" in index
    assert index.count("INCOMPLETE") >= 3

