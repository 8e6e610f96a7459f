"""Stage 04_parity: HF reference vs MIL-program executor and Core ML runtime.

None of this stage's gates is implemented yet: :func:`run` records each of them as
NOT_RUN(not-implemented) (naming any platform capability it would also need), so the
report and receipt show the gap instead of hiding it.
"""

from __future__ import annotations

import os

from ..params import Params
from ..stage import StageContext, StageReport

STAGE = "04_parity"


def run(params: Params, run_dir: str | os.PathLike) -> StageReport:
    """Run stage 04_parity for ``params`` inside ``run_dir``.

    Parameters
    ----------
    params : Params
        Validated parameters.
    run_dir : path-like
        The run directory shared by all stages.

    Returns
    -------
    StageReport
        One record per gate of the stage.
    """
    ctx = StageContext(STAGE, params, run_dir)
    return ctx.finish()
