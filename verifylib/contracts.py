"""The whisper.cpp runtime contract: the single home of every marker string it relies on.

Log markers, flags and in-tree file names that the gates match against are defined here
and nowhere else, so the rules and the validator cannot drift apart.
"""

SYSTEM_INFO_PREFIX = "system_info:"
"""Start of whisper-cli's capability line (printed once the model and audio are loaded)."""

COREML_FLAG = "COREML = "
"""Field of the system_info line saying whether Core ML support was compiled in."""

COREML_OFF = COREML_FLAG + "0"
"""Substring of the system_info line of a build without Core ML."""

COREML_ON = COREML_FLAG + "1"
"""Substring of the system_info line of a Core ML build."""

TEST_MODEL_IN_TREE = "models/for-tests-ggml-tiny.en.bin"
"""Small model shipped in the whisper.cpp tree; it loads, so system_info gets printed."""

TEST_AUDIO_IN_TREE = "samples/jfk.wav"
"""Public-domain 16 kHz mono sample shipped in the whisper.cpp tree."""
