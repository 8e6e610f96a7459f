"""A compiled model's program read from its ``model.mil`` (:mod:`verifylib.numerics.mil_compiled`).

Faithfulness, op by op: every case of tests/unit/test_mil_ops.py (58 operation types, the
``constexpr_*`` ones in their iOS 16 attribute form and iOS 18 input form, iOS 18's bare
scalars) is saved as a package by coremltools, written as ``model.mil`` by the simulated
coremlc's writer (tests/simmac/coremlc.py, which follows the grammar of real coremlc
outputs, docs/facts.md) beside the package's own ``weights/weight.bin``, and read back. The
program must be the one :func:`~verifylib.numerics.mil_exec.load_program` reads from the
package's protobuf: the same operations, bindings, outputs and constants bit for bit, and
the same outputs when executed.

Strictness: weights are read only as the blob file stores them (checked against
coremltools' own ``BlobReader``), literals only when exact in their type, and anything the
reader or the executor cannot take is refused with the reason.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.compiled_models import compiled_folder, same_program
from tests.unit.test_mil_ops import CASES, Case, _constexpr_cases, build_program, f32
from verifylib.canonical import sha256_file
from verifylib.numerics.mil_compiled import CompiledProgramError, load_compiled_program
from verifylib.numerics.mil_exec import execute, load_program

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def ct():
    import coremltools
    return coremltools


def _check_case(ct, tmp_path: Path, case: Case) -> None:
    package_program, _ = build_program(ct, tmp_path, case)
    package = tmp_path / f"{case.op}.mlpackage"
    folder = compiled_folder(package, tmp_path / f"{case.op}.mlmodelc")
    program, source = load_compiled_program(folder)
    same_program(package_program, program)
    assert source.model_mil_sha256 == sha256_file(folder / "model.mil")
    for compute in ("float32", "float64"):
        want = execute(package_program, case.inputs, compute=compute).outputs
        got = execute(program, case.inputs, compute=compute).outputs
        assert list(got) == list(want)
        for k in want:
            assert got[k].tobytes() == want[k].tobytes(), (case.id, compute, k)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_op_reads_from_text_as_from_the_package(ct, tmp_path, case):
    _check_case(ct, tmp_path, case)


SUB_BYTE_LITERAL = re.compile(r"tensor<u?int[1-6], \[[^\]]*\]>\(\[")


def test_every_compressed_constant_reads_from_text_as_from_the_package(ct, tmp_path):
    """Sub-byte values written inline (not in the weight file) are refused: no real
    compiled model seen shows how coremlc spells them, so none is guessed at."""
    opsets, refused, read = set(), [], []
    for i, case in enumerate(_constexpr_cases()):
        case.id = case.id or case.op
        sub = tmp_path / str(i)
        sub.mkdir()
        build_program(ct, sub, case)
        folder = compiled_folder(sub / f"{case.op}.mlpackage", sub / "c.mlmodelc")
        if SUB_BYTE_LITERAL.search((folder / "model.mil").read_text()):
            with pytest.raises(CompiledProgramError, match=r"an inline u?int\d literal"):
                load_compiled_program(folder)
            refused.append(case.id)
            continue
        shutil.rmtree(sub)
        sub.mkdir()
        _check_case(ct, sub, case)
        opsets.add(case.opset)
        read.append(case.op)
    assert {"iOS16", "iOS18"} <= opsets  # attributes (iOS 16) and inputs (iOS 18)
    assert len(read) > len(refused)
    assert set(read) == {c.op for c in _constexpr_cases()}


# ----------------------------------------------------------------------------- weights

def _blob_file(ct, path: Path) -> dict:
    """A weight file written by coremltools' own blob writer; the offsets it gave."""
    from coremltools.libmilstoragepython import _BlobStorageWriter

    path.parent.mkdir(parents=True, exist_ok=True)
    w = _BlobStorageWriter(str(path))
    offsets = {"f32": w.write_float_data(np.arange(6, dtype=np.float32) / 7),
               "f16": w.write_fp16_data(np.frombuffer(
                   (np.arange(4, dtype=np.float16) - 1.5).tobytes(), np.uint16)),
               "i8": w.write_int8_data(np.array([-3, 4, 5], dtype=np.int8))}
    del w
    return offsets


S = "tensor<string, []>"
PATH = f'path = {S}("@model_path/weights/weight.bin")'


def _mil(statements: list[str], outputs: str, params: str = "tensor<fp32, [2, 3]> x") -> str:
    lines = ["program(1.0)", f'[buildInfo = dict<{S}, {S}>({{{{"coremlc-version", "3500.32.1"}}}})]',
             "{", f"    func main<ios16>({params}) {{"]
    lines += [f"            {s};" for s in statements]
    lines += [f"        }} -> ({outputs});", "}"]
    return "\n".join(lines) + "\n"


def _const(decl: str, name: str, val: str) -> str:
    return f'{decl} {name} = const()[name = {S}("op_{name}"), val = {val}]'


def _blob(dtype: str, shape: str, offset: int) -> str:
    return f"tensor<{dtype}, [{shape}]>(BLOBFILE({PATH}, offset = tensor<uint64, []>({offset})))"


@pytest.fixture
def weights(ct, tmp_path):
    folder = tmp_path / "enc.mlmodelc"
    return folder, _blob_file(ct, folder / "weights/weight.bin")


def test_weights_read_as_coremltools_reads_them(ct, weights):
    from coremltools.libmilstoragepython import _BlobStorageReader

    folder, off = weights
    (folder / "model.mil").write_text(_mil([
        _const("tensor<fp32, [2, 3]>", "w", _blob("fp32", "2, 3", off["f32"])),
        _const("tensor<fp16, [4]>", "h", _blob("fp16", "4", off["f16"])),
        _const("tensor<int8, [3]>", "q", _blob("int8", "3", off["i8"])),
        f'tensor<fp32, [2, 3]> y = add(x = x, y = w)[name = {S}("op_y")]'], "y"))
    program, source = load_compiled_program(folder)
    reader = _BlobStorageReader(str(folder / "weights/weight.bin"))
    np.testing.assert_array_equal(program.consts["w"].reshape(-1), reader.read_float_data(off["f32"]))
    assert program.consts["h"].tobytes() == reader.read_fp16_data(off["f16"]).tobytes()
    np.testing.assert_array_equal(program.consts["q"], reader.read_int8_data(off["i8"]))
    assert source.weight_bin_sha256 == sha256_file(folder / "weights/weight.bin")
    assert source.coremlc_version == "3500.32.1" and source.opset == "ios16"
    x = f32(2, 3)
    got = execute(program, {"x": x}, compute="float64").outputs["y"]
    np.testing.assert_array_equal(got, x.astype(np.float64) + program.consts["w"])


@pytest.mark.parametrize("val, why", [
    (lambda off: _blob("fp16", "2, 3", off["f32"]), "not stored as the declared fp16"),
    (lambda off: _blob("fp32", "3, 3", off["f32"]), "the program declares fp32"),
    (lambda off: _blob("fp32", "2, 3", 10_000_000), "past the end"),
    (lambda off: _blob("fp32", "2, 3", 0), "no blob metadata"),
    (lambda off: _blob("fp32", "2, 3", off["f32"]).replace("weights/weight.bin",
                                                            "weights/../weight.bin"),
     "not a file of the model's weights/ folder"),
    (lambda off: _blob("fp32", "2, 3", off["f32"]).replace("@model_path/weights/", "/etc/"),
     "not a file of the model's weights/ folder"),
    (lambda off: _blob("fp32", "2, 3", off["f32"]).replace("weight.bin", "other.bin"),
     "not a regular file"),
])
def test_a_weight_not_stored_as_declared_is_refused(weights, val, why):
    folder, off = weights
    (folder / "model.mil").write_text(_mil([
        _const("tensor<fp32, [2, 3]>", "w", val(off)),
        f'tensor<fp32, [2, 3]> y = add(x = x, y = w)[name = {S}("op_y")]'], "y"))
    with pytest.raises(CompiledProgramError, match=why):
        load_compiled_program(folder)


def test_a_symlinked_weight_file_is_refused(weights, tmp_path):
    folder, off = weights
    real = tmp_path / "elsewhere.bin"
    (folder / "weights/weight.bin").rename(real)
    (folder / "weights/weight.bin").symlink_to(real)
    (folder / "model.mil").write_text(_mil([
        _const("tensor<fp32, [2, 3]>", "w", _blob("fp32", "2, 3", off["f32"])),
        f'tensor<fp32, [2, 3]> y = add(x = x, y = w)[name = {S}("op_y")]'], "y"))
    with pytest.raises(CompiledProgramError, match="not a regular file"):
        load_compiled_program(folder)


# ----------------------------------------------------------------------------- literals and names

@pytest.mark.parametrize("statements, why", [
    ([_const("tensor<fp16, []>", "c", "tensor<fp16, []>(0x1.0000000001p+0)")],
     "not exact as fp16"),
    ([_const("tensor<fp32, []>", "c", "tensor<fp32, []>(0.1)")], "not exact as fp32"),
    ([_const("tensor<int8, []>", "c", "tensor<int8, []>(300)")], "does not fit int8"),
    ([_const("tensor<int32, [3]>", "c", "tensor<int32, [3]>([1, 2])")], "2 values for shape"),
    ([_const("tensor<int32, []>", "c", "tensor<int32, []>(1.5)")], "not a int32 value"),
    ([_const("tensor<fp32, [2]>", "c", "tensor<fp32, [3]>([0x0p+0, 0x0p+0, 0x0p+0])")],
     "its value has shape"),
    ([_const("tensor<fp16, []>", "c", "tensor<fp32, []>(0x1p+0)")], "its value is fp32"),
    ([f'tensor<fp32, [2, 3]> c = add(x = x, y = later)[name = {S}("c")]'],
     "used before it is defined"),
    ([f'tensor<fp32, [2, 3]> c = silu_but_not(x = x)[name = {S}("c")]'],
     "'silu_but_not' .* is not supported"),
    ([f'tensor<fp32, [2, 3]> c = relu(x = x)[name = {S}("c"), mode = {S}("fast")]'],
     r"attribute\(s\) \['mode'\] of an operation are not read"),
    ([f'tensor<fp32, [2, 3]> c = relu(x = x)[name = {S}("c")]',
      f'tensor<fp32, [2, 3]> c = relu(x = x)[name = {S}("d")]'], "defined twice"),
])
def test_what_the_executor_cannot_take_exactly_is_refused(tmp_path, statements, why):
    folder = tmp_path / "m.mlmodelc"
    folder.mkdir()
    (folder / "model.mil").write_text(_mil(statements, "x"))
    with pytest.raises(CompiledProgramError, match=why):
        load_compiled_program(folder)


def test_values_that_are_exact_are_taken_with_their_type(tmp_path):
    folder = tmp_path / "m.mlmodelc"
    folder.mkdir()
    (folder / "model.mil").write_text(_mil([
        _const("tensor<fp16, []>", "e", "tensor<fp16, []>(0x1.5p-17)"),
        _const("tensor<fp32, []>", "f", "tensor<fp32, []>(0x1.4f8b58p-17)"),
        _const("tensor<int32, [2, 2]>", "p", "tensor<int32, [2, 2]>([[1, 0], [0, 1]])"),
        _const("tensor<bool, []>", "b", "tensor<bool, []>(true)"),
        _const(f"{S}", "s", f'{S}("EXACT")')], "x"))
    program, source = load_compiled_program(folder)
    c = program.consts
    assert c["e"] == np.float16(1e-5) and type(c["e"]) is np.float16
    assert c["f"] == np.float32(1e-5) and type(c["f"]) is np.float32
    assert c["p"].dtype == np.int32 and c["p"].tolist() == [[1, 0], [0, 1]]
    assert c["b"] is np.True_ or c["b"] == np.bool_(True)
    assert c["s"] == "EXACT"
    assert source.weight_bin_sha256 is None


def test_a_folder_without_model_mil_or_with_an_unknown_function_is_refused(tmp_path):
    folder = tmp_path / "m.mlmodelc"
    folder.mkdir()
    with pytest.raises(CompiledProgramError, match="has no model.mil"):
        load_compiled_program(folder)
    (folder / "model.mil").write_text(_mil([], "x"))
    with pytest.raises(CompiledProgramError, match="no function 'encode'"):
        load_compiled_program(folder, function="encode")
    (folder / "model.mil").write_text(_mil([], "x").replace("program(1.0)", "program(1.0"))
    with pytest.raises(CompiledProgramError, match=r"line 2, column 1: expected .\)."):
        load_compiled_program(folder)


def test_the_package_and_its_text_execute_alike_in_a_real_shaped_program(ct, tmp_path):
    """A small encoder-shaped program (conv, gelu, layer_norm, attention) in fp16."""
    from coremltools.converters.mil import Builder as mb

    def body(mb, x):
        w = np.linspace(-1, 1, 8 * 4 * 3).reshape(8, 4, 3).astype(np.float32)
        h = mb.conv(x=x, weight=w, pad_type="same")
        h = mb.gelu(x=h)
        h = mb.transpose(x=h, perm=[0, 2, 1])
        h = mb.layer_norm(x=h, axes=[-1], epsilon=1e-5)
        s = mb.matmul(x=h, y=h, transpose_y=True)
        return mb.matmul(x=mb.softmax(x=s, axis=-1), y=h)

    case = Case("encoder-like", {"x": f32(1, 4, 6)}, body, id="encoder-like")
    _check_case(ct, tmp_path, case)
    assert mb is not None


def test_a_real_package_of_ours_reads_back_from_its_compiled_text(ct, tmp_path):
    """The executor's package loader and the text loader agree on a converted torch model."""
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
            self.norm = torch.nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(torch.nn.functional.gelu(self.conv(x)).transpose(1, 2))

    torch.manual_seed(0)
    traced = torch.jit.trace(Tiny().eval(), torch.zeros(1, 4, 10))
    for precision in (ct.precision.FLOAT32, ct.precision.FLOAT16):
        model = ct.convert(traced, convert_to="mlprogram", compute_precision=precision,
                           inputs=[ct.TensorType("x", (1, 4, 10), np.float32)],
                           skip_model_load=True)
        pkg = tmp_path / f"{precision.value}.mlpackage"
        model.save(str(pkg))
        folder = compiled_folder(pkg, tmp_path / f"{precision.value}.mlmodelc")
        text_program, _ = load_compiled_program(folder)
        package_program = load_program(pkg)
        same_program(package_program, text_program)
        x = {"x": f32(1, 4, 10)}
        a = execute(package_program, x).outputs
        b = execute(text_program, x).outputs
        assert all(a[k].tobytes() == b[k].tobytes() for k in a)
