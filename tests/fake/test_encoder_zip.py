"""A hostile ``….mlmodelc.zip`` named by ``encoder.path`` stops ``verifylib run`` at
validation: exit 2, one line naming the parameter file and the key, no reports folder, in
well under 5 s (a child ``python -m verifylib`` for the real exit code and stderr; the
command line's own ``main`` in this process for every hostile archive, timed without the
interpreter's start-up)."""

import subprocess
import sys
import time

import pytest
import yaml

from tests.helpers import ROOT
from tests.helpers.zips import TOP, hostile_archives
from verifylib.cli.main import main


def _parameters(tmp_path, archive: bytes):
    zp = tmp_path / f"{TOP}.zip"
    zp.write_bytes(archive)
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data["fixtures"] = data["fixtures"][:1]
    data.pop("export")
    data["encoder"] = {"path": zp.name}  # relative to the parameter file
    f = tmp_path / "downloaded.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def test_cli_exits_2_with_one_line_for_a_zip_slip_archive(tmp_path):
    f = _parameters(tmp_path, hostile_archives()["zip-slip"])
    reports = tmp_path / "reports"
    res = subprocess.run([sys.executable, "-m", "verifylib", "run", str(f), "--reports",
                          str(reports)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert f"{f}: key encoder.path: " in lines[0] and "entry '../x'" in lines[0]
    assert not reports.exists()


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """One refusal for another key first: what is timed below is the archive's check, not
    the first import of the validation modules (seconds on a busy two-core host)."""
    f = _parameters(tmp_path_factory.mktemp("warm"), hostile_archives()["symlink"])
    f.write_text(f.read_text().replace("pin: v1.8.5", "pin: v0.0.0"))
    assert main(["run", str(f), "--reports", str(f.parent / "reports")]) == 2


@pytest.mark.parametrize("name", sorted(hostile_archives()))
def test_every_hostile_archive_exits_2_in_under_5_s(tmp_path, capsys, warm, name):
    f = _parameters(tmp_path, hostile_archives()[name])
    reports = tmp_path / "reports"
    t0 = time.perf_counter()
    code = main(["run", str(f), "--reports", str(reports)])
    took = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert took < 5, took
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"{f}: key encoder.path: {tmp_path / (TOP + '.zip')}" \
        in lines[0], err
    assert not reports.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["downloaded.yaml", f"{TOP}.zip"]
