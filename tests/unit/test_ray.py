"""`verifylib run --executor ray` without a cluster: capabilities as resource names, the
resources a task asks for, ``ray-node-resources``, and the exit without Ray. The batches on
a local cluster are in tests/notebooks/test_ray.py."""

from __future__ import annotations

import dataclasses
import sys

from verifylib.runtime import capabilities
from verifylib.cli import main as cli
from verifylib.batch import ray as ray_executor
from verifylib.runtime.capabilities import HostCapabilities
from verifylib.params import load

from tests.helpers.batches import tiny_en_params

LINUX = HostCapabilities("Linux", "x86_64", None, None)
MAC = HostCapabilities("Darwin", "arm64", (14, 5), "/Applications/Xcode.app/Contents/x/coremlc")


# ----------------------------------------------------------------------------- no cluster

def test_capabilities_become_resource_names():
    assert [ray_executor.capability_resource(c) for c in capabilities.Capability
            if c is not capabilities.Capability.ANY] == ["macos", "macos_xcode", "macos_14_4"]
    assert ray_executor.node_resources(LINUX) == {}
    assert ray_executor.node_resources(MAC) == {"macos": 1.0, "macos_xcode": 1.0,
                                                "macos_14_4": 1.0}
    older = HostCapabilities("Darwin", "arm64", (14, 1), None)
    assert ray_executor.node_resources(older) == {"macos": 1.0}


def test_task_resources_follow_the_required_gates(tmp_path):
    share = ray_executor.TASK_SHARE
    p = load(tiny_en_params(tmp_path, "m"))
    assert ray_executor.task_resources(p, require_admissible=False) == {}
    assert ray_executor.task_resources(p, require_admissible=True) == {
        "macos": share, "macos_xcode": share, "macos_14_4": share}
    # Stage 01's one Mac gate is build.coreml (full Xcode).
    assert ray_executor.task_resources(p, require_admissible=True, stages=("01_build",)) == {
        "macos_xcode": share}
    # Switched-off gates need nothing: without the canaries, stage 03 asks for no Mac.
    off = load(tiny_en_params(tmp_path, "off", **{"canary.enabled": False}))
    assert ray_executor.task_resources(off, require_admissible=True,
                                       stages=("03_canary",)) == {}
    assert ray_executor.task_resources(p, require_admissible=True,
                                       stages=("03_canary",)) == {"macos": share}


def test_ray_node_resources_command(capsys):
    assert cli.main(["ray-node-resources"]) == 0
    assert capsys.readouterr().out == "{}\n"  # this Linux host runs no Core ML gate
    capabilities.simulate(dataclasses.replace(MAC, simulated=True))
    try:
        assert cli.main(["ray-node-resources"]) == 0
    finally:
        capabilities.simulate(None)
    assert capsys.readouterr().out == \
        '{"macos": 1.0, "macos_14_4": 1.0, "macos_xcode": 1.0}\n'


def test_missing_ray_exits_2_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    reports = tmp_path / "reports"
    code = cli.main(["run", str(tiny_en_params(tmp_path, "m")), "--executor", "ray",
                     "--reports", str(reports)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--executor ray needs the ray package: pip install 'verifylib[ray]'" in err
    assert not list(reports.rglob("*.json")) if reports.exists() else True
