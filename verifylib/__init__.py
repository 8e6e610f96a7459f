"""verifylib: physical verification that whisper.cpp ran a Core ML encoder.

The package backs six papermill notebooks (build, export, canary, parity, WER,
placement). Each stage gathers evidence from physical runs, judges its gates with
the rules in :mod:`verifylib.evidence.gates`, and writes canonical JSON sidecars that
``verifylib verify`` can re-judge without trusting the recorded statuses.
"""

__version__ = "0.1.0"

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


def _quiet_native_proxy_warnings() -> None:
    # Off macOS, importing coremltools logs one "Failed to load _ML...Proxy" warning per
    # native class. The capability check already reports the missing platform once, as
    # each affected gate's NOT_RUN reason, so these lines would only clutter the reports.
    import logging
    import platform

    if platform.system() == "Darwin":
        return

    class _DropProxyNoise(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            msg = record.getMessage()
            return not (msg.startswith("Failed to load _ML") and "libcoremlpython" in msg)

    logging.getLogger("coremltools").addFilter(_DropProxyNoise())


_quiet_native_proxy_warnings()
