"""Regenerate the six thin stage notebooks (and the comparison notebook, 07_compare) from
one description.

Run ``python scripts/make_notebooks.py`` after changing the parameter schema or a stage's
cells; tests/unit/test_notebooks_static.py fails when the committed notebooks drift from this
output.

Each notebook is: the parameters cell, ``vnb.setup``, the stage's one audit call
(``vnb.audit``: the stage runs, or a published run is read back through
``verifylib.open_run``), its view, then an *Explore* section: the typed result in named
variables and a few short cells a researcher edits. Explore cells carry the tag
``verifylib-explore``; they run in the audit too, so each must work whatever the gates
did (a gate that did not run leaves its variable None).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verifylib.params import PARAMETER_KEYS  # noqa: E402
from verifylib.views.report import EXPLORE_TAG  # noqa: E402  (the report leaves these cells out)


@dataclass(frozen=True)
class Md:
    """A markdown cell among a notebook's explore cells."""

    text: str


@dataclass(frozen=True)
class Notebook:
    """One stage notebook: its stage module, heading, what it does, and explore cells.

    ``explore`` holds code cells (str) and markdown cells (:class:`Md`); each must run on
    any outcome of the stage (a gate that did not run leaves its variables None).
    """

    module: str
    title: str
    what: str
    explore: list = field(default_factory=list)


PARITY_EXPLORE: list = [
    "# Op-level attribution of the fp16 program, as stored (AttributionEvidence): the ops that\n"
    "# lose the most precision, worst first (try fp32, or .top for conversion drift)\n"
    "att = fp16.attribution if fp16 else None\n"
    "table([(o.name, o.type, o.module or o.scope, o.precision_delta_snr_db)\n"
    "       for o in att.precision_top] if att else None,\n"
    "      (\"op\", \"type\", \"module\", \"precision ΔSNR dB\"))",
    "# Zoom on one block: SNR of every op's output along the program, ops 20 to 50\n"
    "# (edit the range; view.program_snr_plot(att) draws them all); fig is the figure, to edit\n"
    "fig = view.program_snr_plot(att, start=20, stop=50) if att else None",
    "# SNR per encoder frame at chosen residual-stream points, from the stored arrays\n"
    "# (edit the labels: \"embeddings\", \"block 0\" ... \"output\"); fig is the figure\n"
    "fig = view.layer_frames_plot(fp16, layers=[\"block 0\", \"block 2\", \"output\"]) if fp16 else None",
    "# The stored outputs themselves (loaded on first use, digest-checked): the reference\n"
    "# and the fp16 program on the fixture; e.g. the frames where they differ most\n"
    "import numpy as np\n"
    "if fp16 and fp16.outputs is not None:\n"
    "    err = np.abs(fp16.outputs[\"fixture\"] - result.reference_outputs[\"fixture\"])\n"
    "    worst = np.argsort(err.max(axis=-1)[0])[::-1][:10]\n"
    "    print(\"frames where the fp16 program differs most (worst first):\",\n"
    "          \", \".join(str(int(f)) for f in worst))",
    "# Attribute the fp16 package on another fixture of the parameters, live (touches no\n"
    "# run; about ten seconds for tiny.en): uncomment and edit the fixture id\n"
    "# from verifylib.cli.drift import attribute_package\n"
    "# other = attribute_package(run_dir / \"fp16\" / \"ggml-model-encoder.mlpackage\", params,\n"
    "#                           fixture=\"numbers\").attribution\n"
    "# fig = view.worst_ops_plot(other)",
]

STAGES = {
    "01_build": Notebook(
        "build", "Build",
        "Obtain the pinned whisper.cpp source, prove its git tree id, apply and verify the "
        "exact compatibility patch, build a static `whisper-cli` outside the source tree, "
        "hash it and read its `system_info` line from a real run.",
        ["# The build facts above, typed (facts.rows() is the table), and each gate's record (status, reason,\n"
         "# evidence files, identities) by gate id\n"
         "facts = report.facts\n"
         "records = {r.id: r for r in report.records}",
         "# The files each gate's status rests on (paths inside the run directory)\n"
         "table({gate_id: [e.path for e in r.evidence] for gate_id, r in records.items()},\n"
         "      (\"gate\", \"evidence files\"))"]),
    "02_export": Notebook(
        "export", "Export",
        "Model intake, `ggml-model.bin`, conversion of the encoder to an fp32 mlprogram (and "
        "the fp16 variant), IO-contract validation of the saved package before placement, "
        "build facts, and (macOS + Xcode) compilation to `.mlmodelc` placed beside the model.",
        ["# The export facts above, typed (facts.rows() is the table), and each gate's record by gate id\n"
         "facts = report.facts\n"
         "records = {r.id: r for r in report.records}",
         "# The identities this stage bound: model digests, package and compiled-model trees\n"
         "table(report.identities, (\"identity\", \"value\"))"]),
    "03_canary": Notebook(
        "canary", "Canaries",
        "The batch-lifecycle A/B (unpatched vs patched static GGML `whisper-cli`, N runs each "
        "with the `-nfa -dtw` trigger: outcome table and chart), the same trigger on both "
        "AddressSanitizer builds (informational: what ASan reports), the fail-closed Core ML "
        "negative control (first run only) and the four-condition positive gate (one warm-up, "
        "one measured run); then the same controls on whisper.cpp's own Core ML path through "
        "verifylib's seam (informational, any OS: never a Core ML result).",
        ["# The typed result (verifylib.evidence.canary.result.CanaryResult); None where a gate did not run\n"
         "result = report.result\n"
         "lifecycle, sanitizer = result.lifecycle, result.sanitizer\n"
         "negative, positive = result.negative, result.positive\n"
         "seam_negative, seam_positive = result.seam_negative, result.seam_positive",
         "# The A/B outcome counts: build side -> run outcome -> runs\n"
         "table(lifecycle.outcome_counts() if lifecycle else None, (\"build\", \"outcomes\"))",
         "# What AddressSanitizer reported on the unpatched build: its kind and top frames\n"
         "unpatched = sanitizer.sides[\"unpatched\"] if sanitizer else None\n"
         "(unpatched.kind, unpatched.frames[:8]) if unpatched else None"]),
    "04_parity": Notebook(
        "parity", "Parity",
        "The same real log-mel through the Hugging Face reference and each candidate, judged "
        "by the frozen SNR + cosine policy: the saved ML program executed op by op "
        "(conversion drift, any OS) and the compiled `.mlmodelc` under `ComputeUnit.ALL` "
        "(runtime drift, macOS); error histogram, SNR along time frames and SNR per layer.",
        ["# The typed result (verifylib.evidence.parity.result.ParityResult): one candidate per parity gate\n"
         "# that ran; fp32 / fp16 are the ML programs (None when their gate did not run)\n"
         "result = report.result\n"
         "candidates = result.candidates if result else {}\n"
         "fp32 = candidates.get(\"parity.program\")\n"
         "fp16 = candidates.get(\"parity.program_fp16\")",
         "# Each candidate's gated metrics (fixture input): SNR dB, cosine, max abs error ...\n"
         "table({gid: [m.metrics for m in c.measurements if m.input == \"fixture\"]\n"
         "       for gid, c in candidates.items()}, (\"gate\", \"metrics\"))",
         "# SNR (dB) along the residual stream of the fp32 program executed in float32\n"
         "# (try fp16, or the \"float64\" execution)\n"
         "table({p[\"label\"]: p[\"snr_db\"] for p in fp32.drift.layers.get(\"float32\", [])}\n"
         "      if fp32 else None, (\"point\", \"SNR dB\"))",
         *PARITY_EXPLORE]),
    "05_wer": Notebook(
        "wer", "WER",
        "Hugging Face, GGML and hybrid transcripts under identical greedy decoding, "
        "normalized WER and its deltas; the seam's transcripts (the encoder program through "
        "whisper.cpp's own decoder, informational) beside GGML's.",
        ["# The typed result (verifylib.evidence.wer.result.WerResult; None when wer.ggml_vs_source did\n"
         "# not run): one ClipResult per fixture, and the corpus WER of each side\n"
         "result = report.result\n"
         "clips = result.clips if result else []\n"
         "corpus = result.corpus if result else None",
         "# Per-clip WER, worst first (try \"wer_source\", \"wer_hybrid\" or \"wer_pairwise\")\n"
         "table([(clip.id, clip.language, clip.unit, clip.wer_ggml)\n"
         "       for clip in result.ranked(\"wer_ggml\")] if result else [],\n"
         "      (\"clip\", \"language\", \"unit\", \"GGML rate\"))",
         "# wer.seam: each fixture through whisper.cpp's own decoder with the encoder program\n"
         "# (fp32, fp16) executed by verifylib's seam, beside GGML; cause \"encoder\" where they differ\n"
         "seam = result.seam if result else []\n"
         "table([(c.id, c.variant, c.rate, c.rate_ggml, c.rate_vs_ggml, c.cause) for c in seam],\n"
         "      (\"clip\", \"variant\", \"seam rate\", \"GGML rate\", \"seam vs GGML\", \"cause\"))"]),
    "06_placement": Notebook(
        "placement", "Placement",
        "`MLComputePlan` per-operation preferred devices and cost shares for the published "
        "`.mlmodelc`.",
        ["# The typed result (verifylib.evidence.placement.result.PlacementResult; None when placement.plan did\n"
         "# not run): variant -> its plan (ops, cost_by_device, cost_sum, claim)\n"
         "result = report.result\n"
         "plans = result.plans if result else {}",
         "# Share of the estimated cost per preferred device, one variant (try \"fp16\")\n"
         "table(result.device_share(\"fp32\") if \"fp32\" in plans else None,\n"
         "      (\"device\", \"cost share\"))"]),
}

EXPLORE_INTRO = (
    "### Explore\n\n"
    "The stage's typed result in named variables; edit and re-run these cells. Pointed at a "
    "published run (`run_dir` holding `receipt.json`), this notebook reads the run through "
    "`verifylib.open_run` (every file digest-checked) and writes nothing into it: papermill's "
    "output notebook goes wherever you name it, outside the run.")


def make(stage: str) -> nbformat.NotebookNode:
    spec = STAGES[stage]
    mod, title, what = spec.module, spec.title, spec.what
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"## {stage}: {title}\n\n{what}\n\nEvery cell up to *Explore* calls one documented "
        f"`verifylib` function; the gate statuses come from the rules in `verifylib.evidence.gates`."))
    params = ["# Parameters: papermill's `-f parameters/<model>.yaml` overrides these.",
              "# With `name = None` the default parameter file is used."]
    params += [f"{k} = None" for k in PARAMETER_KEYS]
    params += ["run_dir = None  # the run directory shared by the six stages"]
    cell = nbformat.v4.new_code_cell("\n".join(params))
    cell.metadata["tags"] = ["parameters"]
    nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_code_cell(
        # Imported as `stage` and `view`: a module named like a parameter (export, canary)
        # would shadow that parameter in the notebook's namespace.
        f"import verifylib.notebook as vnb\nfrom verifylib.stages import {mod} as stage\n"
        f"from verifylib.views import {mod} as view\n"
        f"from verifylib.views.tables import table\n\n"
        f"params, run_dir = vnb.setup(globals(), {stage!r})"))
    nb.cells.append(nbformat.v4.new_code_cell(
        "report = vnb.audit(stage, params, run_dir)\nreport"))
    nb.cells.append(nbformat.v4.new_code_cell("view.show(report)"))
    explore = [nbformat.v4.new_markdown_cell(EXPLORE_INTRO)]
    for src in spec.explore:
        explore.append(nbformat.v4.new_markdown_cell(src.text) if isinstance(src, Md)
                       else nbformat.v4.new_code_cell(src))
    for c in explore:
        c.metadata["tags"] = [EXPLORE_TAG]
    nb.cells.extend(explore)
    for i, c in enumerate(nb.cells):
        c["id"] = f"{stage}-{i}"
    return nb


COMPARE = "07_compare"
"""The comparison notebook: not an audit stage (``verifylib run`` executes only
:data:`STAGES`); it reads published runs and writes nothing into them."""

COMPARE_EXPLORE: list = [
    "# The typed comparison (verifylib.compare.model.Comparison): the gate matrix as gate ->\n"
    "# status per run, the identities that differ, and what could not be compared\n"
    "matrix = {row.gate: [c.status for c in row.cells] for row in comparison.gates}\n"
    "diffs = {row.key: row.values for row in comparison.identity_diffs}\n"
    "notes = [(n.topic, n.text) for n in comparison.notes]\n"
    "diffs",
    "# Zoom the per-layer overlay on a few points (edit the labels; modes=[\"float64\"] for\n"
    "# the float64 execution, \"parity.program_fp16\" for the fp16 program)\n"
    "view.show_figure(view.layer_plot(comparison, \"parity.program\",\n"
    "                                 labels=[\"block 1\", \"block 2\", \"block 3\"]))",
    "# SNR along the program of every run, ops 40 to 80 (edit the range)\n"
    "view.show_figure(view.op_plot(comparison, \"parity.program\", start=40, stop=80))",
    "# Ops whose SNR differs between runs (matched by name and type), the first ten\n"
    "fp32 = comparison.candidate(\"parity.program\")\n"
    "[(o.index, o.name, o.type, o.where, o.snr_db, o.precision_snr_db)\n"
    " for o in fp32.ops if o.differs][:10]",
    "# Per-clip GGML WER of each run (try wer_hybrid or wer_source)\n"
    "{row.id: row.wer_ggml for row in comparison.wer.clips} if comparison.wer else None",
    "# Write the page `verifylib compare` writes (uncomment; a folder outside the runs)\n"
    "# view.write(comparison, \"compare-out\")",
]


def make_compare() -> nbformat.NotebookNode:
    """The comparison notebook: a ``runs`` parameter, one comparison call, its view, and
    explore cells."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"## {COMPARE}: Compare runs\n\n"
        "Published runs side by side: the gate matrix, the identities that differ (model, "
        "pin, binaries, policies, packages, parameters), the per-layer and per-op drift of "
        "every run on one plot, the worst ops side by side and the WER per clip, with a "
        "computed *what changed* summary against the first run (the baseline). Each run is "
        "read through `verifylib.open_run` and re-verified; a run that does not verify is "
        "flagged, not hidden. Nothing is written into a run.\n\n"
        "This is not an audit stage: `verifylib run` never executes it. With papermill:\n\n"
        "```bash\n"
        ".venv/bin/papermill notebooks/07_compare.ipynb /tmp/compare.ipynb \\\n"
        "    -y '{runs: [reports/tiny-en/RUN-1, reports/tiny-en/RUN-2]}'\n"
        "```\n\n"
        "`verifylib compare RUN RUN ...` writes the same comparison as one HTML page."))
    cell = nbformat.v4.new_code_cell(
        "# Parameters: papermill's `-p`/`-y` override these.\n"
        "runs = []  # two or more published run directories; the first is the baseline\n"
        "verify = True  # re-verify each run (one that does not verify is flagged, not hidden)\n"
        "allow_simulated = False  # verify runs of the test suite's simulated Mac (tests only)")
    cell.metadata["tags"] = ["parameters"]
    nb.cells.append(cell)
    nb.cells.append(nbformat.v4.new_code_cell(
        "from verifylib.compare import compare_runs\n"
        "from verifylib.views import compare as view\n\n"
        "comparison = compare_runs(runs, verify=verify, allow_simulated=allow_simulated)\n"
        "comparison.summary"))
    nb.cells.append(nbformat.v4.new_code_cell("view.show(comparison)"))
    explore = [nbformat.v4.new_markdown_cell(
        "### Explore\n\nThe comparison's typed parts in named variables; edit and re-run "
        "these cells. Every figure is drawn from the comparison in memory: nothing is read "
        "from or written into a run here.")]
    explore += [nbformat.v4.new_code_cell(src) for src in COMPARE_EXPLORE]
    for c in explore:
        c.metadata["tags"] = [EXPLORE_TAG]
    nb.cells.extend(explore)
    for i, c in enumerate(nb.cells):
        c["id"] = f"{COMPARE}-{i}"
    return nb


def main() -> None:
    out = ROOT / "notebooks"
    out.mkdir(exist_ok=True)
    for stage in STAGES:
        nbformat.write(make(stage), out / f"{stage}.ipynb")
        print(out / f"{stage}.ipynb")
    nbformat.write(make_compare(), out / f"{COMPARE}.ipynb")
    print(out / f"{COMPARE}.ipynb")


if __name__ == "__main__":
    main()
