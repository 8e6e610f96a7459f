"""Regenerate the six thin stage notebooks from one description.

Run ``python scripts/make_notebooks.py`` after changing the parameter schema or a stage's
cells; tests/test_notebooks.py fails when the committed notebooks drift from this output.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from verifylib.params import PARAMETER_KEYS  # noqa: E402

STAGES = {
    "01_build": ("build", "Build",
                 "Obtain the pinned whisper.cpp source, prove its git tree id, apply and verify "
                 "the exact compatibility patch, build a static `whisper-cli` outside the source "
                 "tree, hash it and read its `system_info` line from a real run.",
                 ["view.show(report)"]),
    "02_export": ("export", "Export",
                  "Model intake, `ggml-model.bin`, conversion of the encoder to an fp32 "
                  "mlprogram (and the fp16 variant), IO-contract validation of the saved "
                  "package before placement, build facts, and (macOS + Xcode) compilation to "
                  "`.mlmodelc` placed beside the model.", ["view.show(report)"]),
    "03_canary": ("canary", "Canaries",
                  "The batch-lifecycle A/B (unpatched vs patched static GGML `whisper-cli`, "
                  "N runs each with the `-nfa -dtw` trigger: outcome table and chart), the "
                  "same trigger on both AddressSanitizer builds (informational: what ASan "
                  "reports), the fail-closed Core ML negative control (first run only) and the "
                  "four-condition positive gate (one warm-up, one measured run).",
                  ["view.show(report)"]),
    "04_parity": ("parity", "Parity",
                  "The same real log-mel through the Hugging Face reference and each candidate, "
                  "judged by the frozen SNR + cosine policy: the saved ML program executed op "
                  "by op (conversion drift, any OS) and the compiled `.mlmodelc` under "
                  "`ComputeUnit.ALL` (runtime drift, macOS); error histogram, SNR along time "
                  "frames and SNR per layer.", ["view.show(report)"]),
    "05_wer": ("wer", "WER",
               "Hugging Face, GGML and hybrid transcripts under identical greedy decoding, "
               "normalized WER and its deltas.", ["view.show(report)"]),
    "06_placement": ("placement", "Placement",
                     "`MLComputePlan` per-operation preferred devices and cost shares for the "
                     "published `.mlmodelc`.", ["view.show(report)"]),
}


def make(stage: str) -> nbformat.NotebookNode:
    mod, title, what, extra = STAGES[stage]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"## {stage}: {title}\n\n{what}\n\nEvery cell calls one documented `verifylib` "
        f"function; the gate statuses come from the rules in `verifylib.gates`."))
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
        f"from verifylib.views import {mod} as view\n\n"
        f"params, run_dir = vnb.setup(globals(), {stage!r})"))
    nb.cells.append(nbformat.v4.new_code_cell("report = stage.run(params, run_dir)\nreport"))
    for src in extra:
        nb.cells.append(nbformat.v4.new_code_cell(src))
    for i, c in enumerate(nb.cells):
        c["id"] = f"{stage}-{i}"
    return nb


def main() -> None:
    out = ROOT / "notebooks"
    out.mkdir(exist_ok=True)
    for stage in STAGES:
        nbformat.write(make(stage), out / f"{stage}.ipynb")
        print(out / f"{stage}.ipynb")


if __name__ == "__main__":
    main()
