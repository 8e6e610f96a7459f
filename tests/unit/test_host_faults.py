"""Host faults told apart from harness bugs, and the disk check's figures (no disk touched
but a temporary folder)."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT
from verifylib import params
from verifylib.batch import disk
from verifylib.errors import HostFault
from verifylib.runtime.host_faults import fault_of_cell, host_fault


def _chain(err: OSError) -> BaseException:
    try:
        try:
            raise err
        except OSError as inner:
            raise RuntimeError("converting the model failed") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS])
def test_a_full_read_only_or_failing_disk_is_a_host_fault_anywhere_in_the_chain(code):
    fault = host_fault(_chain(OSError(code, "x", "/reports/run/fp32/ggml-model.bin")))
    assert isinstance(fault, HostFault) and isinstance(fault, OSError)
    assert fault.errno == code
    assert fault.strerror.endswith(f"({errno.errorcode[code]}): /reports/run/fp32/ggml-model.bin")


@pytest.mark.parametrize("exc", [OSError(errno.ENOENT, "gone", "/x"), RuntimeError("bug"),
                                 PermissionError(errno.EACCES, "denied", "/x"), None])
def test_anything_else_is_not(exc):
    assert host_fault(exc) is None


def test_an_error_without_a_file_names_where_it_was_writing():
    fault = host_fault(OSError(errno.ENOSPC, "No space left on device"), "/reports/.staging/r")
    assert fault.strerror == ("No space left on device (ENOSPC): writing under "
                              "/reports/.staging/r")


def test_a_cells_error_is_read_back():
    fault = host_fault(OSError(errno.ENOSPC, "No space left on device", "/a/b"))
    back = fault_of_cell("HostFault", str(fault))
    assert (back.errno, back.strerror) == (fault.errno, fault.strerror)
    raw = fault_of_cell("OSError", "[Errno 28] No space left on device: '/a/b'")
    assert raw.errno == errno.ENOSPC and raw.strerror.endswith(": /a/b")
    assert fault_of_cell("OSError", "[Errno 2] No such file or directory: '/a'") is None
    assert fault_of_cell("ValueError", "[Errno 28] no") is None


def _params(tmp_path: Path, **changes) -> params.Params:
    data = yaml.safe_load((ROOT / "parameters" / "tiny-en.yaml").read_text())
    data.update(changes)
    return params.validate(data, "test", params.PARAMETERS_DIR)


def test_the_estimate_follows_the_size_the_model_names(tmp_path):
    tiny = disk.estimate_space(_params(tmp_path))
    base = disk.estimate_space(_params(tmp_path, name="base-en"))
    unnamed = disk.estimate_space(_params(tmp_path, name="my-model", description="x"))
    assert (tiny.size, base.size, unnamed.size) == ("tiny", "base", "large")
    assert tiny.run_bytes < base.run_bytes < unnamed.run_bytes
    # tiny.en's measured run: 153 MB with the fp32 variant; the estimate covers it, and fp16.
    assert 153 * 2**20 < tiny.run_bytes < 300 * 2**20
    assert disk.estimate_space(_params(tmp_path), macos=True).run_bytes > tiny.run_bytes


def test_a_folder_without_room_is_named_with_its_figures(tmp_path, monkeypatch):
    est = disk.estimate_space(_params(tmp_path))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(disk.shutil, "disk_usage",
                        lambda p: usage._replace(free=60 * 2**20))
    reports, cache = disk.check_folders([est], tmp_path / "reports", tmp_path / "cache")
    assert reports.problem.startswith(f"the reports folder {tmp_path / 'reports'}: 60 MiB free")
    assert "share this file system" in reports.problem
    assert not (tmp_path / "reports").exists()
    assert disk.problems([reports, cache]) == [reports.problem, cache.problem]


def test_enough_room_is_no_problem(tmp_path, monkeypatch):
    est = disk.estimate_space(_params(tmp_path))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda p: usage._replace(free=100 * 2**30))
    checks = disk.check_folders([est], tmp_path / "reports", tmp_path / "cache")
    assert disk.problems(checks) == []
    assert [c.need_bytes for c in checks] == [est.run_bytes + est.cache_bytes] * 2


def test_verify_names_jupyter_when_only_notebooks_changed_or_checkpoints_appeared():
    from verifylib.evidence.receipt import JUPYTER_CAUSE, jupyter_cause
    saved = ["notebooks/04_parity.ipynb: changed (SHA-256 differs from the receipt)",
             "notebooks/05_wer.ipynb: changed (SHA-256 differs from the receipt)",
             "notebooks/.ipynb_checkpoints/05_wer-checkpoint.ipynb: present but not listed "
             "in the receipt"]
    assert jupyter_cause(saved) == JUPYTER_CAUSE
    assert "verifylib lab RUN" in JUPYTER_CAUSE
    # Anything else among the problems, or none: no guess.
    assert jupyter_cause([*saved, "evidence/05_wer/wer.json: changed (SHA-256 differs from "
                                  "the receipt)"]) is None
    assert jupyter_cause(["evidence/x.ipynb: changed (SHA-256 differs from the receipt)"]) \
        is None
    assert jupyter_cause([]) is None
