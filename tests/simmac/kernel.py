"""Start an IPython kernel on the simulated Mac (the stage kernels of a simulated audit).

Usage: ``kernel.py SCENARIO_JSON [--keep-reports FOLDER] -f CONNECTION_FILE``; launched by
``SimulatedMac.kernel_manager()`` only. With ``--keep-reports`` the notebook's audit call
(``verifylib.notebook.audit``) also pickles the report it returns to
``FOLDER/<stage>.pickle``: the stage's own result, as the kernel holds it.
"""

import pickle
import sys
from pathlib import Path


def _keep_reports(folder: Path) -> None:
    import verifylib.notebook as vnb

    audit = vnb.audit

    def keeping(stage_module, params, run_dir, **kwargs):
        report = audit(stage_module, params, run_dir, **kwargs)
        (folder / f"{stage_module.STAGE}.pickle").write_bytes(pickle.dumps(report))
        return report

    vnb.audit = keeping


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.simmac import SimulatedMac

    SimulatedMac.from_file(sys.argv[1]).activate()
    rest = sys.argv[2:]
    if rest[:1] == ["--keep-reports"]:
        _keep_reports(Path(rest[1]))
        rest = rest[2:]
    sys.argv = [sys.argv[0], *rest]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
