"""The whisper-cli command-line rules refuse forbidden flags before launch."""

import pytest

from verifylib import contracts
from verifylib.contracts import ContractError, check_cli_argv

BASE = ["whisper-cli", "-m", "m.bin", "-f", "a.wav"]


@pytest.mark.parametrize("extra", [["-np"], ["--no-prints"], ["-ac", "750"],
                                   ["--audio-ctx=750"], ["-p", "2"], ["--processors", "4"],
                                   ["-p=3"], ["-p"]])
def test_forbidden_arguments_are_refused(extra):
    with pytest.raises(ContractError):
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
