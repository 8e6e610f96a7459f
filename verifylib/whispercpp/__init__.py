"""The pinned whisper.cpp: sources (:mod:`.source`), builds (:mod:`.build`) and pin-check."""
