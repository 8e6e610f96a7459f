"""One module per notebook stage; the stages stand side by side and never import each other.

Each stage module runs its gates (``run``) and nothing else: what an earlier stage
published is read through :mod:`verifylib.stages.artifacts`, pass rules live in
:mod:`verifylib.evidence.registry`, display in :mod:`verifylib.views`. Importing
this package imports no stage, so a notebook kernel loads only the stage it runs.
"""
