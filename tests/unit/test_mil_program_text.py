"""The strict reader of a compiled model's ``model.mil`` (:mod:`verifylib.models.mil_program_text`).

Every text here is written by this test in the style real coremlc outputs show
(docs/facts.md, "The compiled model's model.mil"): ``program(1.0)`` with a ``buildInfo``
dict, ``func main<ios16>(…)``, statements indented by twelve spaces, constants as
``const()[name = …, val = …]`` with floats in C's hexadecimal notation, an operation's
``name`` attribute that differs from its output's name, weights as ``BLOBFILE`` references,
and ``} -> (outputs);``; and the iOS 18 spelling of scalars (``string("x")``,
``uint64(64)``, ``fp16(0x1p-3)``).
"""

from __future__ import annotations

import math

import pytest

from verifylib.models.mil_program_text import (
    BlobRef,
    Literal,
    MilType,
    read_program_text,
)
from verifylib.models.mil_text import MilTextError, parse_mil_text

pytestmark = pytest.mark.unit

S = "tensor<string, []>"


def _statement(lhs: str, op: str, args: str, attrs: str) -> str:
    return f"            {lhs} = {op}({args})[{attrs}];"


def coremlc_style(statements: list[str], params: str, outputs: str, *, opset: str = "ios16",
                  version: str = "1.0", build: str | None = None) -> str:
    """A ``model.mil`` laid out as coremlc lays it out."""
    info = build if build is not None else (
        f'dict<{S}, {S}>({{{{"coremlc-component-MIL", "3510.2.1"}}, '
        '{"coremlc-version", "3500.32.1"}, {"coremltools-version", "9.0"}})')
    return "\n".join([f"program({version})", f"[buildInfo = {info}]", "{",
                      f"    func main<{opset}>({params}) {{", *statements,
                      f"        }} -> ({outputs});", "}"])


IOS16 = coremlc_style([
    _statement("tensor<fp16, []> var_3_to_fp16", "const", "",
               f'name = {S}("op_3_to_fp16"), val = tensor<fp16, []>(0x1p+1)'),
    _statement("tensor<fp32, []> var_5", "const", "",
               f'name = {S}("op_5"), val = tensor<fp32, []>(0x1.5798eep-27)'),
    _statement("tensor<fp16, [4, 2]> w_to_fp16", "const", "",
               f'name = {S}("w_to_fp16"), val = tensor<fp16, [4, 2]>(BLOBFILE(path = '
               f'{S}("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(64)))'),
    _statement("tensor<int32, [2, 2]> perm", "const", "",
               f'name = {S}("perm"), val = tensor<int32, [2, 2]>([[0, -1], [2, 3]])'),
    _statement(f"{S} to16", "const", "",
               f'name = {S}("to16"), val = {S}("fp16")'),
    _statement("tensor<fp16, [1, 4]> x_to_fp16", "cast", "dtype = to16, x = x",
               f'name = {S}("cast_3")'),
    _statement("tensor<fp16, [1, 4]> var_4_cast_fp16", "mul", "x = x_to_fp16, y = var_3_to_fp16",
               f'name = {S}("op_4_cast_fp16")'),
    _statement("tensor<fp16, [1, 2]> y", "matmul",
               "transpose_x = tensor<bool, []>(false), transpose_y = tensor<bool, []>(false), "
               "x = var_4_cast_fp16, y = w_to_fp16", f'name = {S}("op_7_cast_fp16")'),
], "tensor<fp32, [1, 4]> x, tensor<int32, [1, 2]> n", "var_4_cast_fp16, y")


def test_a_coremlc_style_program_reads_whole():
    prog = read_program_text(IOS16)
    assert prog.version == "1.0"
    assert prog.build_info == {"coremlc-component-MIL": "3510.2.1",
                               "coremlc-version": "3500.32.1", "coremltools-version": "9.0"}
    fn = prog.functions["main"]
    assert fn.opset == "ios16"
    assert fn.inputs == (("x", MilType("tensor", "fp32", (1, 4))),
                         ("n", MilType("tensor", "int32", (1, 2))))
    assert fn.outputs == ("var_4_cast_fp16", "y")
    assert [s.op for s in fn.statements] == ["const"] * 5 + ["cast", "mul", "matmul"]
    assert [s.line for s in fn.statements] == list(range(5, 13))


def test_hex_floats_are_read_exactly():
    fn = read_program_text(IOS16).functions["main"]
    two, eps = fn.statements[0].attrs["val"], fn.statements[1].attrs["val"]
    assert two == Literal(MilType("tensor", "fp16", ()), 2.0)
    assert eps.value == float.fromhex("0x1.5798eep-27") and abs(eps.value - 1e-8) < 1e-15


def test_the_name_attribute_is_the_ops_not_the_values():
    s = read_program_text(IOS16).functions["main"].statements[0]
    assert s.outputs[0][0] == "var_3_to_fp16"
    assert s.attrs["name"].value == "op_3_to_fp16"


def test_weights_are_blob_references_with_their_offset():
    s = read_program_text(IOS16).functions["main"].statements[2]
    val = s.attrs["val"]
    assert val.type == MilType("tensor", "fp16", (4, 2))
    assert val.value == BlobRef("@model_path/weights/weight.bin", 64)


def test_arguments_are_names_or_inline_literals():
    fn = read_program_text(IOS16).functions["main"]
    cast, mm = fn.statements[5], fn.statements[7]
    assert cast.args == {"dtype": "to16", "x": "x"}
    assert mm.args["x"] == "var_4_cast_fp16"
    assert mm.args["transpose_x"] == Literal(MilType("tensor", "bool", ()), False)
    assert fn.statements[3].attrs["val"].value == [[0, -1], [2, 3]]
    assert fn.statements[4].attrs["val"].value == "fp16"


IOS18 = coremlc_style([
    _statement("fp16 eps", "const", "", 'name = string("eps"), val = fp16(0x1p-3)'),
    _statement("tensor<fp16, [3]> w", "const", "",
               'name = string("w"), val = tensor<fp16, [3]>(BLOBFILE(path = '
               'string("@model_path/weights/weight.bin"), offset = uint64(128)))'),
    _statement("tensor<fp16, [3]> y", "add", "x = x, y = w", 'name = string("y")'),
    _statement("tensor<fp16, [3]> z", "mul", "x = y, y = eps", 'name = string("z")'),
], "tensor<fp16, [3]> x", "z", opset="ios18", version="1.3",
    build='dict<string, string>({{"coremlc-version", "3505.4.1"}})')


def test_the_ios18_spelling_of_scalars():
    prog = read_program_text(IOS18)
    assert prog.version == "1.3" and prog.build_info == {"coremlc-version": "3505.4.1"}
    fn = prog.functions["main"]
    assert fn.statements[0].outputs == (("eps", MilType("scalar", "fp16", ())),)
    assert fn.statements[0].attrs["val"] == Literal(MilType("scalar", "fp16", ()), 0.125)
    assert fn.statements[1].attrs["val"].value == BlobRef("@model_path/weights/weight.bin", 128)
    assert fn.statements[1].attrs["name"] == Literal(MilType("scalar", "string", ()), "w")


def _one(stmt: str, params: str = "tensor<fp16, [2, 4]> x", outputs: str = "a") -> str:
    return coremlc_style([stmt], params, outputs)


@pytest.mark.parametrize("lhs", [
    "tensor<fp16, [2, 2]> a, tensor<fp16, [2, 2]> b",
    "(tensor<fp16, [2, 2]> a, tensor<fp16, [2, 2]> b)"])
def test_several_outputs_with_or_without_parentheses(lhs):
    text = _one(_statement(lhs, "split", "axis = tensor<int32, []>(1), num_splits = "
                           "tensor<int32, []>(2), x = x", f'name = {S}("split_0")'))
    s = read_program_text(text).functions["main"].statements[0]
    assert [n for n, _ in s.outputs] == ["a", "b"]
    assert s.args["num_splits"].value == 2


def test_a_tuple_argument():
    text = _one(_statement("tensor<fp16, [4, 4]> a", "concat",
                           "axis = tensor<int32, []>(0), interleave = tensor<bool, []>(false), "
                           "values = (x, x)", f'name = {S}("concat_0")'))
    s = read_program_text(text).functions["main"].statements[0]
    assert s.args["values"] == ("x", "x")


def test_constexpr_parameters_in_the_attribute_bracket():
    text = _one(_statement("tensor<fp16, [4, 4]> a", "constexpr_lut_to_dense", "",
                           "indices = tensor<uint8, [8]>(BLOBFILE(path = "
                           f'{S}("@model_path/weights/weight.bin"), offset = '
                           "tensor<uint64, []>(64))), lut = tensor<fp16, [4]>([0x0p+0, 0x1p+0, "
                           f"-0x1p+0, 0x1.8p+1]), name = {S}(\"w\"), "
                           "shape = tensor<uint32, [2]>([4, 4])"))
    s = read_program_text(text).functions["main"].statements[0]
    assert sorted(s.attrs) == ["indices", "lut", "name", "shape"]
    assert s.attrs["lut"].value == [0.0, 1.0, -1.0, 3.0]
    assert s.attrs["indices"].type == MilType("tensor", "uint8", (8,))


def test_special_floats_and_string_escapes():
    text = _one(_statement("tensor<fp32, [3]> a", "const", "",
                           f'name = {S}("a \\"quoted\\" \\\\ name"), '
                           "val = tensor<fp32, [3]>([-inf, inf, nan])"))
    s = read_program_text(text).functions["main"].statements[0]
    assert s.attrs["name"].value == 'a "quoted" \\ name'
    low, high, nan = s.attrs["val"].value
    assert low == -math.inf and high == math.inf and math.isnan(nan)


def test_an_empty_build_info_and_no_functions_besides_main():
    text = coremlc_style([], "tensor<fp16, [2]> x", "x", build=f"dict<{S}, {S}>({{}})")
    prog = read_program_text(text)
    assert prog.build_info == {} and list(prog.functions) == ["main"]


@pytest.mark.parametrize("broken, where", [
    (IOS16.replace("op_4_cast_fp16\")];", "op_4_cast_fp16\")]"), "line 12, column 13"),
    (IOS16.replace("tensor<fp16, [1, 2]> y", "tensor<fp17, [1, 2]> y"), "unknown element type"),
    (IOS16.replace("0x1p+1", "0x1p+1 @"), "line 5"),
    (IOS16 + "\ntrailing", "expected the end of the text"),
    (IOS16.replace("} -> (var_4_cast_fp16, y);", "}"), "expected '->'"),
    (IOS16.replace('name = tensor<string, []>("cast_3")',
                   'name = tensor<string, []>("cast_3"), name = tensor<string, []>("c")'),
     "one 'name' attribute"),
    (IOS16.replace("offset = tensor<uint64, []>(64)", "offset = tensor<uint64, []>(-64)"),
     "non-negative integer offset"),
])
def test_what_departs_from_the_grammar_is_refused_where_it_departs(broken, where):
    with pytest.raises(MilTextError, match="model.mil") as exc:
        read_program_text(broken)
    assert where in str(exc.value)


def test_a_nested_block_is_refused():
    text = _one("            tensor<fp16, [2, 4]> a = cond(pred = p)[name = "
                f'{S}("c")] {{ }};')
    with pytest.raises(MilTextError, match="nested block"):
        read_program_text(text)


def test_the_cards_reader_agrees_on_the_types():
    opset, inputs, ops, outputs = parse_mil_text(IOS16)
    fn = read_program_text(IOS16).functions["main"]
    assert opset == fn.opset
    assert [n for n, _ in inputs] == [n for n, _ in fn.inputs]
    assert [op.type for op in ops] == [s.op for s in fn.statements]
    assert [n for n, _ in outputs] == list(fn.outputs)
