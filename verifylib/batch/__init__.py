"""Batches of audits: how ``verifylib run`` executes the stage notebooks and publishes runs.

One model's audit is :func:`verifylib.batch.audit.run_one` (kernels in :mod:`.kernel`,
interrupts in :mod:`.signals`, staging folders in :mod:`.staging`). A batch of models runs
through the executor registry (:mod:`.executors`): one model after another or ``--jobs N``
worker processes (:mod:`.local`), or Ray tasks (:mod:`.ray`), whose runs come back as
archives (:mod:`.archive`). A model that publishes no run gets a failure record
(:mod:`.failures`).
"""
