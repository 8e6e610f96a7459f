"""Evidence of stage 05_wer, side by side.

Its typed documents (:mod:`.schema`), the rules that judge its gates (:mod:`.rules`) and the
result a reader sees (:mod:`.result`).
"""
