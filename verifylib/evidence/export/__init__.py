"""Evidence of stage 02_export, side by side.

Its typed documents (:mod:`.schema`), the rules that judge its gates (:mod:`.rules`) and the
facts a reader sees (:mod:`.facts`).
"""
