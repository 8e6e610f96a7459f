"""The whisper-cli command-line rules refuse forbidden flags before launch; the ``.mlmodelc``
path derivation, exit-status decoding and log parsers on literal input. The same rules
against the pinned v1.8.5 source are in tests/physical/test_contracts.py."""

import pytest

from verifylib.runtime import contracts
from verifylib.errors import ContractBroken
from verifylib.runtime.contracts import check_cli_argv

BASE = ["whisper-cli", "-m", "m.bin", "-f", "a.wav"]


@pytest.mark.parametrize("extra", [["-np"], ["--no-prints"], ["-ac", "750"],
                                   ["--audio-ctx=750"], ["-p", "2"], ["--processors", "4"],
                                   ["-p=3"], ["-p"]])
def test_forbidden_arguments_are_refused(extra):
    with pytest.raises(ContractBroken):
        check_cli_argv(BASE + extra)


def test_pinned_decoding_passes_and_is_greedy():
    args = contracts.greedy_decoding_args("en")
    check_cli_argv(BASE + args)
    assert args[args.index("-bs") + 1] == "1" and args[args.index("-bo") + 1] == "1"
    assert args[args.index("-p") + 1] == "1"
    assert "-nt" in args and args[args.index("-l") + 1] == "en"


def test_loaded_hparams_parse():
    err = ("whisper_model_load: n_vocab       = 51864\n"
           "whisper_model_load: n_audio_ctx   = 1500\n"
           "whisper_model_load: ftype         = 1\nother: n_mels = 80\n")
    assert contracts.parse_loaded_hparams(err) == {"n_vocab": 51864, "n_audio_ctx": 1500,
                                                   "ftype": 1}


# ----------------------------------------------------------------------------- against the pinned source
#
# Every marker, exit code and flag the gates rely on is checked against the v1.8.5 text of
# src/whisper.cpp and examples/cli/cli.cpp (cached source, read at test time).


from verifylib.runtime.contracts import coreml_encoder_path
from tests.helpers.contract_cases import GUIDE_TABLE


# ----------------------------------------------------------------------------- coreml_encoder_path



def test_coreml_encoder_path_reproduces_the_guide_table():
    for arg, want in GUIDE_TABLE:
        assert coreml_encoder_path(arg) == want, arg


def test_model_arg_of():
    assert contracts.model_arg_of(["w", "-f", "a", "-m", "x.bin"]) == "x.bin"
    assert contracts.model_arg_of(["w", "--model", "y.bin"]) == "y.bin"
    assert contracts.model_arg_of(["w", "--model=z.bin"]) == "z.bin"
    assert contracts.model_arg_of(["w", "-m"]) is None and contracts.model_arg_of(["w"]) is None


@pytest.mark.parametrize("rc,name", [(-6, "SIGABRT"), (134, "SIGABRT"), (-11, "SIGSEGV"),
                                     (139, "SIGSEGV"), (-9, "SIGKILL"), (137, "SIGKILL"),
                                     (0, None), (3, None), (10, None), (128, None), (None, None)])
def test_decode_signal(rc, name):
    # These numbers mean the same on Linux and macOS.
    assert contracts.decode_signal(rc, "Linux") == name
    assert contracts.decode_signal(rc, "Darwin") == name
