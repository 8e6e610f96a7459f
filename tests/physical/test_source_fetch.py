"""verifylib.whispercpp.source.fetch on real v1.8.5: the sdist's tree id is upstream's."""

from __future__ import annotations

import pytest

from tests.helpers.source_synth import V185_SDIST_SHA256, V185_TREE
from verifylib.evidence.gates import Status
from verifylib.evidence.build.rules import judge_source_identity
from verifylib.whispercpp.source.fetch import git_tree_id, source_evidence


@pytest.mark.physical
def test_real_sdist_tree_id_is_upstream_v185(v185_source, v185_pin):
    assert v185_source.origin["sdist_sha256"] == V185_SDIST_SHA256
    assert v185_source.origin["package"] == "pywhispercpp==1.5.1"
    assert not (v185_source.path / ".git").exists()
    assert git_tree_id(v185_source.path) == V185_TREE == v185_source.tree_id
    j = judge_source_identity(source_evidence(v185_pin, None, v185_source))
    assert j.status is Status.PASS, j.detail
