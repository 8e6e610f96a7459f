"""Stage 06_placement: where Core ML plans to run the published encoder.

``placement.plan`` loads ``MLComputePlan`` for the published fp32 ``.mlmodelc`` (and the
fp16 one when present) with ``ComputeUnit.ALL``, the compute units whisper.cpp requests.
It needs macOS 14.4+; elsewhere it is NOT_RUN(platform). Claims about the Neural Engine
are worded from the plan only.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from ..canonical import tree_digest
from ..params import Params
from ..placement import analyze_plan, load_plan, placement_evidence
from ..stage import StageContext, StageReport

STAGE = "06_placement"


def published_mlmodelc(ctx: StageContext, variant: str) -> Path | None:
    """The ``.mlmodelc`` that ``export.compile`` published for a variant, if any."""
    path = ctx.run_dir / variant / "ggml-model-encoder.mlmodelc"
    return path if path.is_dir() else None


def run(params: Params, run_dir: str | os.PathLike, plan_loader=load_plan) -> StageReport:
    """Run stage 06_placement.

    Parameters
    ----------
    params : Params
        Validated parameters.
    run_dir : path-like
        The run directory.
    plan_loader : callable
        Loads a plan from an ``.mlmodelc`` path (coremltools' ``MLComputePlan`` by default).

    Returns
    -------
    StageReport
    """
    ctx = StageContext(STAGE, params, run_dir)
    g = ctx.begin("placement.plan")
    if g:
        with g:
            refs, ids = [], {}
            for variant in ("fp32", "fp16"):
                path = published_mlmodelc(ctx, variant)
                if path is None:
                    if variant == "fp32":
                        raise FileNotFoundError("export.compile passed but no fp32 .mlmodelc "
                                                "is published in the run directory")
                    continue
                digest = tree_digest(path)
                ev = placement_evidence(analyze_plan(plan_loader(path)), variant, digest)
                refs.append(ctx.write_json(f"plan_{variant}", ev))
                ids[f"artifact.{variant}.mlmodelc.tree_digest"] = digest
                ctx.facts[variant] = ev
            g.judge(refs, ids)
    return ctx.finish()


def show(report: StageReport):
    """Show cost share per device (chart), the claim, and the top operations by cost."""
    from IPython.display import HTML, display
    if not report.facts:
        return HTML("<p>No compute plan: <code>placement.plan</code> did not run (see the "
                    "table above). A Neural Engine claim needs MLComputePlan on macOS 14.4+; "
                    "it is never inferred from speed.</p>")
    import matplotlib.pyplot as plt
    e = html.escape
    variants = list(report.facts)
    fig, ax = plt.subplots(figsize=(6, 1 + 0.6 * len(variants)))
    for i, v in enumerate(variants):
        left = 0.0
        total = report.facts[v]["cost_sum"] or 1.0
        for dev, share in sorted(report.facts[v]["cost_by_device"].items()):
            ax.barh(i, share / total, left=left, label=f"{dev}" if i == 0 else None)
            left += share / total
    ax.set_yticks(range(len(variants)), variants)
    ax.set_xlabel("share of estimated cost (preferred device)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    plt.show()
    for v in variants:
        ev = report.facts[v]
        top = sorted([o for o in ev["ops"] if o["cost"] is not None], key=lambda o: -o["cost"])[:10]
        rows = "".join(f"<tr><td>{e(o['operator'])}</td><td>{e(', '.join(o['outputs']))}</td>"
                       f"<td>{e(str(o['preferred']))}</td><td>{e(', '.join(o['supported']))}</td>"
                       f"<td>{100 * o['cost']:.2f}%</td></tr>" for o in top)
        display(HTML(f"<h4>{e(v)}</h4><p>{e(ev['claim'])}</p><table class='vl'><tr><th>op</th>"
                     f"<th>outputs</th><th>preferred</th><th>supported</th><th>cost</th></tr>"
                     f"{rows}</table>"))
    return None
