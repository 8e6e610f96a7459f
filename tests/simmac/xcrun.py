#!/usr/bin/env python3
"""The simulated Mac's ``xcrun`` (``--find coremlc``, ``coremlc compile``) and ``xcode-select -p``.

Usage: ``xcrun.py SCENARIO_JSON <xcrun arguments>``, or ``xcrun.py SCENARIO_JSON xcode-select
-p``. The scenario's ``coremlc`` key says which developer tools the simulated Mac has and how
the compiler behaves:

``xcode`` (full Xcode selected: the compiler resolves inside ``Xcode.app``), ``clt``
(Command Line Tools only: they are the developer directory, and ``xcrun --find coremlc``
exits 72 as Apple's does for a tool it cannot find), ``clt-selected`` (Xcode is installed,
but the Command Line Tools are selected: the same answers as ``clt``), ``license`` (full
Xcode selected, its license not accepted: every ``xcrun`` call exits 69 with Apple's message
on stderr), ``fail`` (the compiler exits 1), ``misname`` (the output folder is not named
after the input), ``other-os`` (the output is compiled for another platform and will not
load on this one). Whether an ``Xcode.app`` is installed is the simulated host's folder
(:meth:`tests.simmac.SimulatedMac.host`), not an answer of these tools.

``coremlc compile X.mlpackage OUT`` writes ``OUT/X.mlmodelc`` with the file set Apple's
compiler writes for an ML program (``model.mil`` as MIL text, ``coremldata.bin``,
``metadata.json`` as a list of one object, ``weights/weight.bin``,
``analytics/coremldata.bin``) and remembers the compile in the simulated framework's memory
(``coremlc.py``, ``framework_memory.py``).
"""

import json
import os
import sys


CLT_DIR = "/Library/Developer/CommandLineTools"
CLT_KINDS = ("clt", "clt-selected")
LICENSE_EXIT = 69  # xcrun while the Xcode license is not accepted (EX_UNAVAILABLE)
NOT_FOUND_EXIT = 72  # xcrun for a tool the developer directory does not have


def developer_dir(scenario: dict) -> str:
    """The active developer directory of the scenario (what ``xcode-select -p`` prints)."""
    if scenario.get("coremlc", "xcode") in CLT_KINDS:
        return CLT_DIR
    return os.path.join(scenario["state_dir"], "Xcode.app", "Contents", "Developer")


def select(scenario: dict, args: list) -> int:
    if args != ["-p"]:
        sys.stderr.write(f"xcode-select: error: unsupported invocation {args}\n")
        return 1
    print(developer_dir(scenario))
    return 0


def find(scenario: dict) -> int:
    if scenario.get("coremlc", "xcode") in CLT_KINDS:
        sys.stderr.write('xcrun: error: unable to find utility "coremlc", not a developer '
                         'tool or in PATH\n')
        return NOT_FOUND_EXIT
    print(os.path.join(developer_dir(scenario), "usr", "bin", "coremlc"))
    return 0


def compile_package(scenario: dict, package: str, out: str) -> int:
    """``coremlc compile PACKAGE OUT`` as the scenario's compiler does it (``coremlc.py``)."""
    import coremlc
    import framework_memory

    kind = scenario.get("coremlc", "xcode")
    if kind == "fail":
        sys.stderr.write(f"coremlc: error: compiler error while compiling {package}\n")
        return 1
    coremlc.compile_package(package, out, memory=framework_memory.framework_dir(scenario),
                            platform="iOS" if kind == "other-os" else "macOS",
                            name="model.mlmodelc" if kind == "misname" else None)
    return 0


def main() -> int:
    with open(sys.argv[1]) as fh:
        scenario = json.load(fh)
    args = sys.argv[2:]
    if args[:1] == ["xcode-select"]:
        return select(scenario, args[1:])
    if scenario.get("coremlc") == "license":
        sys.stderr.write("You have not agreed to the Xcode license agreements, please run "
                         "'sudo xcodebuild -license' from within a Terminal window to review "
                         "and agree to the Xcode license agreements.\n")
        return LICENSE_EXIT
    if args[:2] == ["--find", "coremlc"]:
        return find(scenario)
    if args[:2] == ["coremlc", "compile"] and len(args) == 4:
        return compile_package(scenario, args[2], args[3])
    sys.stderr.write(f"xcrun: error: unsupported invocation {args}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
