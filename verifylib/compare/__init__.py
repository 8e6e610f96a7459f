"""Published runs side by side.

- :mod:`verifylib.compare.model`: the typed comparison
  (:class:`~verifylib.compare.model.Comparison` and its parts), dataclasses only;
- :mod:`verifylib.compare.runs`: :func:`~verifylib.compare.runs.compare_runs`, which reads
  the runs and builds it, and where ``verifylib compare`` may write;
- :mod:`verifylib.compare.summary`: the *what changed* sentences.

The numbers in those sentences are formatted by :mod:`verifylib.views.formats`, as on the
page of :mod:`verifylib.views.compare`. ``compare_runs`` is re-exported here because the
comparison notebook and scripts call it as ``verifylib.compare.compare_runs``.
"""

from verifylib.compare.runs import compare_runs

__all__ = ["compare_runs"]
