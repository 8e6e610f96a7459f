"""verifylib: physical verification that whisper.cpp ran a Core ML encoder.

The package backs six papermill notebooks (build, export, canary, parity, WER,
placement). Each stage gathers evidence from physical runs, judges its gates with
the rules in :mod:`verifylib.gates`, and writes canonical JSON sidecars that
``verifylib verify`` can re-judge without trusting the recorded statuses.
"""

__version__ = "0.1.0"
