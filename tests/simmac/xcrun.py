#!/usr/bin/env python3
"""The simulated Mac's ``xcrun``: ``--find coremlc`` and ``coremlc compile``.

Usage: ``xcrun.py SCENARIO_JSON <xcrun arguments>``. The scenario's ``coremlc`` key says
which developer tools the simulated Mac has and how the compiler behaves:

``xcode`` (full Xcode: the compiler resolves inside ``Xcode.app``), ``clt`` (Command Line
Tools only: ``xcrun --find`` resolves outside ``Xcode.app``), ``fail`` (the compiler exits
1), ``misname`` (the output folder is not named after the input), ``other-os`` (the
output is compiled for another platform and will not load on this one).

``coremlc compile X.mlpackage OUT`` writes ``OUT/X.mlmodelc`` with the parts a compiled ML
program has: ``model.mil`` (the program as text), ``coremldata.bin`` (here: the model
specification the program came from), ``weights/weight.bin``, ``metadata.json`` and
``analytics/coremldata.bin``.
"""

import json
import os
import shutil
import sys


def find(scenario: dict) -> int:
    kind = scenario.get("coremlc", "xcode")
    if kind == "clt":
        print("/Library/Developer/CommandLineTools/usr/bin/coremlc")
        return 0
    print(os.path.join(scenario["state_dir"], "Xcode.app", "Contents", "Developer", "usr",
                       "bin", "coremlc"))
    return 0


def compile_package(scenario: dict, package: str, out: str) -> int:
    kind = scenario.get("coremlc", "xcode")
    if kind == "fail":
        sys.stderr.write(f"coremlc: error: compiler error while compiling {package}\n")
        return 1
    with open(os.path.join(package, "Manifest.json")) as fh:
        manifest = json.load(fh)
    items = manifest["itemInfoEntries"]
    root = manifest["rootModelIdentifier"]
    data = os.path.join(package, "Data")
    model_rel = items[root]["path"]
    model_file = os.path.join(data, model_rel)
    from coremltools.proto import Model_pb2
    from google.protobuf import text_format

    spec = Model_pb2.Model()
    with open(model_file, "rb") as fh:
        raw = fh.read()
    spec.ParseFromString(raw)
    name = os.path.basename(package.rstrip("/"))
    name = (name[:-len(".mlpackage")] if name.endswith(".mlpackage") else name) + ".mlmodelc"
    if kind == "misname":
        name = "model.mlmodelc"
    dest = os.path.join(out, name)
    os.makedirs(os.path.join(dest, "weights"), exist_ok=True)
    os.makedirs(os.path.join(dest, "analytics"), exist_ok=True)
    with open(os.path.join(dest, "model.mil"), "w") as fh:
        fh.write(text_format.MessageToString(spec.mlProgram))
    with open(os.path.join(dest, "coremldata.bin"), "wb") as fh:
        fh.write(raw)
    weights = os.path.join(os.path.dirname(model_file), "weights", "weight.bin")
    if os.path.isfile(weights):
        shutil.copyfile(weights, os.path.join(dest, "weights", "weight.bin"))
    desc = spec.description
    meta = {"platform": "iOS" if kind == "other-os" else "macOS",
            "specificationVersion": spec.specificationVersion,
            "inputs": [i.name for i in desc.input], "outputs": [o.name for o in desc.output],
            "compiler": "verifylib simulated coremlc"}
    with open(os.path.join(dest, "metadata.json"), "w") as fh:
        json.dump(meta, fh, indent=1, sort_keys=True)
    with open(os.path.join(dest, "analytics", "coremldata.bin"), "wb") as fh:
        fh.write(b"")
    return 0


def main() -> int:
    with open(sys.argv[1]) as fh:
        scenario = json.load(fh)
    args = sys.argv[2:]
    if args[:2] == ["--find", "coremlc"]:
        return find(scenario)
    if args[:2] == ["coremlc", "compile"] and len(args) == 4:
        return compile_package(scenario, args[2], args[3])
    sys.stderr.write(f"xcrun: error: unsupported invocation {args}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
