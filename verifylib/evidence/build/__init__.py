"""Evidence of stage 01_build, side by side.

Its typed documents (:mod:`.schema`), the rules that judge its gates (:mod:`.rules`) and the
facts a reader sees (:mod:`.facts`).
"""
