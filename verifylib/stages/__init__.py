"""One module per notebook stage; importing this package registers every gate rule."""

from . import build, canary, export, parity, placement, wer  # noqa: F401

STAGE_MODULES = {
    "01_build": build,
    "02_export": export,
    "03_canary": canary,
    "04_parity": parity,
    "05_wer": wer,
    "06_placement": placement,
}
