"""The ggml backend pins and the backend lines, checked against the v1.8.5 text of the pinned
tree (the cached source, read at test time; nothing is built): what ggml's CMake turns on by
default on APPLE, that every other GPU backend defaults OFF, and the lines
``whisper_init_state`` logs choosing its backends, which :func:`launch_backend` reads."""

from __future__ import annotations

import re

import pytest

from verifylib.runtime import contracts
from verifylib.whispercpp import build_options


def _block(text: str, signature: str) -> str:
    """The brace-balanced body that follows the first match of ``signature`` (a regex)."""
    m = re.search(signature, text)
    assert m, f"signature {signature!r} not found in the pinned source"
    start = text.index("{", m.end() - 1)
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[m.start():i + 1]
    raise AssertionError("unbalanced braces")


@pytest.fixture(scope="module")
def tree(v185_source):
    return v185_source.path


def _options(cmake: str) -> dict[str, str]:
    """``option(NAME "help" DEFAULT)`` of a CMakeLists.txt: name -> default as written."""
    return dict(re.findall(r'^\s*option\((\w+)\s+"[^"]*"\s+(\S+?)\)', cmake, re.M))


def test_apple_turns_metal_and_accelerate_on_and_the_pins_name_real_options(tree):
    cmake = (tree / "ggml" / "CMakeLists.txt").read_text()
    apple = re.search(r"\nif \(APPLE\)\n(.*?)\nelse\(\)", cmake, re.S).group(1)
    assert "set(GGML_METAL_DEFAULT ON)" in apple and "set(GGML_BLAS_DEFAULT ON)" in apple
    opts = _options(cmake)
    assert opts["GGML_METAL"] == "${GGML_METAL_DEFAULT}"
    assert opts["GGML_METAL_EMBED_LIBRARY"] == "${GGML_METAL}"
    assert opts["GGML_BLAS"] == "${GGML_BLAS_DEFAULT}"
    assert opts["GGML_ACCELERATE"] == "ON"
    assert set(build_options.backend_pin_names()) <= set(opts)
    # Every other backend that runs kernels off the CPU defaults OFF on every OS, so only
    # the four pinned ones could be on without being asked for.
    others = [k for k in opts if re.fullmatch(
        r"GGML_(CUDA|HIP|MUSA|VULKAN|SYCL|OPENCL|WEBGPU|RPC|ZDNN|VIRTGPU|VIRTGPU_BACKEND|"
        r"OPENVINO|HEXAGON|ZENDNN|CANN|KOMPUTE)", k)]
    assert len(others) >= 10, others
    assert {k: opts[k] for k in others} == {k: "OFF" for k in others}
    # GGML_ACCELERATE is read on APPLE only: pinning it OFF changes nothing on Linux.
    uses = [p for p in tree.rglob("CMakeLists.txt") if "GGML_ACCELERATE" in p.read_text()]
    assert sorted(str(p.relative_to(tree)) for p in uses) == [
        "ggml/CMakeLists.txt", "ggml/src/ggml-cpu/CMakeLists.txt"]
    cpu = (tree / "ggml" / "src" / "ggml-cpu" / "CMakeLists.txt").read_text()
    assert re.findall(r".*GGML_ACCELERATE.*", cpu) == ["    if (APPLE AND GGML_ACCELERATE)"]


def test_the_backend_lines_are_the_ones_whisper_init_state_logs(tree):
    src = (tree / "src" / "whisper.cpp").read_text()
    gpu = _block(src, r"\nstatic ggml_backend_t whisper_backend_init_gpu\(")
    init = _block(src, r"\nstatic std::vector<ggml_backend_t> whisper_backend_init\(")
    state = _block(src, r"\nstruct whisper_state \* whisper_init_state\(")
    prefix = contracts.BACKEND_GPU_INIT_PREFIX
    assert prefix == "whisper_backend_init_gpu: "
    assert contracts.BACKEND_ACCEL_INIT_PREFIX == "whisper_backend_init: "
    no_gpu = contracts.BACKEND_NO_GPU_MARKER[len(prefix):]
    # "no GPU found" whenever no GPU device was taken (use_gpu off, or none registered);
    # else the device taken; only devices of GPU type are candidates.
    assert re.search(r"if \(dev == nullptr\) \{\s*WHISPER_LOG_INFO\(\"%s: " + no_gpu
                     + r"\\n\", __func__\);\s*return nullptr;", gpu)
    assert 'WHISPER_LOG_INFO("%s: using %s backend\\n", __func__, ggml_backend_dev_name(dev));' \
        in gpu
    assert "GGML_BACKEND_DEVICE_TYPE_GPU || dev_type == GGML_BACKEND_DEVICE_TYPE_IGPU" in gpu
    # ACCEL devices (BLAS) each get a line; the CPU backend is appended without one.
    assert "GGML_BACKEND_DEVICE_TYPE_ACCEL" in init and \
        'WHISPER_LOG_INFO("%s: using %s backend\\n", __func__, ggml_backend_dev_name(dev));' \
        in init
    assert "ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU" in init
    # The choice is the first thing a state does: before the Core ML load and the lifecycle
    # trigger's alignment heads, so every launch that gets a state logs it.
    first = state.index("whisper_backend_init(ctx->params)")
    assert first < state.index("aheads_masks_init") and first < state.index("loading Core ML")
    # whisper-cli keeps the GPU on unless -ng: a build without a GPU backend still runs on
    # the CPU, so the cpu backend needs no extra flag.
    cli = (tree / "examples" / "cli" / "cli.cpp").read_text()
    assert re.search(r"bool use_gpu\s*= true;", cli)
    assert "ggml_backend_load_all();" in cli


def test_metal_and_accelerate_names_as_the_contract_reads_them(tree):
    ggml = tree / "ggml" / "src"
    device = (ggml / "ggml-metal" / "ggml-metal-device.m").read_text()
    assert 'snprintf(dev->props.name, sizeof(dev->props.name), "%s%d", "' \
        + contracts.METAL_DEVICE_PREFIX + '", device);' in device
    metal = (ggml / "ggml-metal" / "ggml-metal.cpp").read_text()
    assert f'#define GGML_METAL_NAME "{contracts.METAL_DEVICE_PREFIX}"' in metal
    assert '{ "EMBED_LIBRARY", "1" }' in metal and "ggml_backend_get_features" in metal
    cpu = (ggml / "ggml-cpu" / "ggml-cpu.cpp").read_text()
    name, value = contracts.ACCELERATE_FEATURE.split(" = ")
    assert re.search(r"#ifdef GGML_USE_ACCELERATE\s*features\.push_back\(\{ \"" + name
                     + r"\", \"" + value + r"\" \}\);", cpu)
    blas = (ggml / "ggml-blas" / "ggml-blas.cpp").read_text()
    assert "return GGML_BACKEND_DEVICE_TYPE_ACCEL;" in blas and 'return "BLAS";' in blas
    # system_info: "<registry> : <feature> = <value> | ..." for every registry with features.
    src = (tree / "src" / "whisper.cpp").read_text()
    info = _block(src, r"\nconst char \* whisper_print_system_info\(void\)")
    assert 's += ggml_backend_reg_name(reg);\n            s += " : ";' in info
