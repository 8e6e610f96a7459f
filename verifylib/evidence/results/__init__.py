"""Typed results of the stages, handed from a stage's ``run`` to its view and its notebook.

A stage's gate records and evidence are the audit; these dataclasses are what a reader
(or a researcher in the notebook) looks at next to them: the A/B outcome counts, each
parity candidate's measurements and drift, each clip's transcripts and WER, each compute
plan. They are built from the same values the stage wrote as evidence, never re-measured.
Stages 01 and 02 have no nested results: their ``StageReport.facts`` is a
:class:`BuildFacts` / :class:`ExportFacts` with named fields, whose ``rows()`` give the
labelled table the views show.

One module per stage (:mod:`.canary`, :mod:`.parity`, :mod:`.wer`, :mod:`.placement`, and
:mod:`.facts` for stages 01 and 02). One code path: each stage builds its result (or facts)
with its module's ``*_from_evidence`` function from the evidence files its gates cite,
right after writing them, and :func:`verifylib.open_run` calls the same function on a
published run; every file is digest-checked on the way
(:func:`verifylib.evidence.results.common.judged_evidence`). These modules stay light (no
torch, coremltools or matplotlib): views and notebooks import them.
"""
