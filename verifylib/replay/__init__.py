"""Replay: an auditor re-derives on this host every physical claim a run's receipt makes.

``verifylib verify RUN --replay`` first does all that ``verify`` does, then re-executes the
run's Linux-physical work from its recorded parameters and compares each result with what
the run recorded (:mod:`verifylib.replay.engine`). Each claim ends REPRODUCED, DIFFERS or
NOT_REPLAYABLE (:mod:`verifylib.replay.claims`). Replay never writes into the run.
"""

from verifylib.replay.engine import replay

__all__ = ["replay"]
