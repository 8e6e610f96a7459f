"""verifylib: physical verification that whisper.cpp ran a Core ML encoder.

The package backs six papermill notebooks (build, export, canary, parity, WER,
placement). Each stage gathers evidence from physical runs, judges its gates with
the rules in :mod:`verifylib.evidence.gates`, and writes canonical JSON sidecars that
``verifylib verify`` can re-judge without trusting the recorded statuses.
"""

# Semantic versioning from 0.2.0: the minor version moves whenever the gate table
# (evidence.gates.GATE_TABLE), a policy (policies/) or the receipt format changes, so a run
# says which rules it was judged under; older tables and policies stay, as data.
__version__ = "0.2.0"

__all__ = ["__version__", "open_run", "Run"]


def __getattr__(name: str):
    # ``verifylib.open_run`` is loaded on first use: importing the package stays as light
    # as before for the CLI and every notebook kernel, which never read a published run.
    # The package root is the front door (the driver layer of docs/architecture.md), so this
    # lazy import points down; ``from verifylib import canonical`` loads only the root's
    # module-level code, never this function.
    if name in ("open_run", "Run"):
        from verifylib.evidence import runs
        return getattr(runs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _quiet_coremltools_import() -> None:
    # What coremltools logs while it is imported says nothing about the input at hand:
    # - off macOS, one "Failed to load _ML...Proxy" warning per native class. The capability
    #   check already reports the missing platform once, as each affected gate's NOT_RUN
    #   reason, so these lines would only clutter the reports;
    # - above the newest torch it was tested with, "Torch version ... has not been tested
    #   with coremltools". Printed at import, it came before the one line of a refusal that
    #   merely read an encoder's protobuf (``verifylib run`` with a bad encoder). Stage 02
    #   records it as a build fact (``torch_version_warning``, through coremltools' own
    #   check, called again outside the import), so the printed copy is dropped.
    import logging
    import platform
    import sys

    off_macos = platform.system() != "Darwin"

    def importing(module: str) -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == module:
                return True
            frame = frame.f_back
        return False

    class _DropImportNoise(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            msg = record.getMessage()
            if off_macos and msg.startswith("Failed to load _ML") and "libcoremlpython" in msg:
                return False
            return not ("has not been tested with coremltools" in msg
                        and importing("coremltools._deps"))

    logging.getLogger("coremltools").addFilter(_DropImportNoise())


_quiet_coremltools_import()
