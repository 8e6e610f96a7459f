"""Start an IPython kernel on the simulated Mac (the stage kernels of a simulated audit).

Usage: ``kernel.py SCENARIO_JSON -f CONNECTION_FILE``; launched by
``SimulatedMac.kernel_manager()`` only.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.simmac import SimulatedMac

    SimulatedMac.from_file(sys.argv[1]).activate()
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
