"""Pinned whisper.cpp sources: obtain, identify by git tree id, patch, and prove the patch.

Why this is hand-written: no package answers "is this folder the pinned upstream tree,
carrying exactly the declared patch bytes and nothing else (ignored files included)".
The identity is git's own (``git add -A -f && git write-tree``), so it holds whether the
source came from a git clone, a release archive or a PyPI sdist; the checks are thin
wrappers around ``git`` run through :func:`verifylib.runtime.runner.run`, with every setting that
could change a tree id or a diff's bytes pinned on the command line or in the child
environment (no system or user git config, no autocrlf, fixed commit identity and dates).

The package is split by concern:

:mod:`verifylib.whispercpp.source.pins`
    The pin manifest (:class:`Pin`, :func:`load_pins`), a manifest the user brings
    (:func:`load_user_pins`, :func:`available_pins`), what a build records of its pin
    (:func:`pin_fields`).
:mod:`verifylib.whispercpp.source.fetch`
    Obtaining and safely extracting a pinned source (:class:`SourceSpec`,
    :func:`obtain_source`), the git plumbing, and :func:`git_tree_id`.
:mod:`verifylib.whispercpp.source.patch`
    Applying the exact compatibility patch (:func:`prepare_patched_tree`), checking a work
    tree against its pin (:func:`check_patch_exact`).

The judges of this evidence (source identity, exact patch) live with every other pass
rule in :mod:`verifylib.evidence.build.rules`; they take plain JSON-able dicts, so
``verifylib verify`` can re-judge the stored evidence later without the source tree.

The package re-exports the names below, so a caller can write
``from verifylib.whispercpp import source; source.git_tree_id(...)``.
"""

from verifylib.whispercpp.source.fetch import (
                                               PYWHISPERCPP_V185,
                                               SourceError,
                                               SourceSpec,
                                               SourceTree,
                                               git_tree_id,
                                               obtain_source,
                                               source_evidence,
)
from verifylib.whispercpp.source.patch import (
                                               PatchCheck,
                                               PatchedTree,
                                               PatchError,
                                               check_patch_exact,
                                               patch_evidence,
                                               prepare_patched_tree,
)
from verifylib.whispercpp.source.pins import (
                                              Pin,
                                              available_pins,
                                              load_pins,
                                              load_user_pins,
                                              patch_rel_path,
                                              pin_fields,
)

__all__ = [
    "PYWHISPERCPP_V185", "PatchCheck", "PatchError", "PatchedTree", "Pin", "SourceError",
    "SourceSpec", "SourceTree", "available_pins", "check_patch_exact", "git_tree_id",
    "load_pins", "load_user_pins", "obtain_source", "patch_evidence", "patch_rel_path",
    "pin_fields",
    "prepare_patched_tree", "source_evidence",
]
