"""Published runs side by side: the typed comparison (:mod:`verifylib.compare.model`).

``compare_runs`` is re-exported here because the comparison notebook and scripts call it as
``verifylib.compare.compare_runs``.
"""

from verifylib.compare.model import compare_runs

__all__ = ["compare_runs"]
