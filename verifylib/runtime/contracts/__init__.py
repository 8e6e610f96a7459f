"""The whisper.cpp runtime contract: the single home of every marker string it relies on.

Log markers, flags and in-tree file names that the gates match against are defined here
and nowhere else, so the rules and the validator cannot drift apart.

Signals are decoded with a fixed table per OS (:data:`SIGNAL_TABLES`, written out from
Linux's and macOS's headers), never with the running Python's ``signal`` module, because
the host that verifies a run need not be the one that made it. The rule: the runner
decodes a child's return code with the table of the OS the child ran on (its own
process's, :func:`host_signal_table`) and records that table's name in the run record
(``signal_table``); the verifier decodes with the table the record names
(:func:`termination`). A record without the key predates it and was made on Linux
(:data:`LEGACY_SIGNAL_TABLE`); a record naming an unknown table is refused. The host
record is not consulted: under the simulated Mac it says Darwin while the children are
Linux processes, and the record's own table is what the child's numbers mean.

One package by concern, and still the one home of the contract: :mod:`.markers` (log
markers, exit codes, stderr readers), :mod:`.signals` (the per-OS signal tables),
:mod:`.argv` (the command lines launched), :mod:`.paths` (the ``.mlmodelc`` path rule) and
:mod:`.classify` (the classifiers of a recorded run). Every public name is re-exported
here, so ``contracts.X`` reads the same wherever it is used.
"""

from __future__ import annotations

from verifylib.runtime.contracts.argv import (  # noqa: F401
    DETECT_LANGUAGE_FLAG,
    DETECTED_LANGUAGE_MARKER,
    DTW_FLAG,
    FORBIDDEN_FLAGS,
    GREEDY_PIN,
    LIFECYCLE_DTW_PRESET,
    NO_FLASH_ATTN_FLAG,
    PROCESSOR_FLAGS,
    check_cli_argv,
    coreml_argv,
    decoding_args,
    detect_language_args,
    greedy_decoding_args,
    has_lifecycle_trigger,
    lifecycle_argv,
    lifecycle_trigger_args,
    parse_detected_language,
)
from verifylib.runtime.contracts.classify import (  # noqa: F401
    CLEAN_LIFECYCLE,
    CLEAN_NEGATIVE,
    CLEAN_POSITIVE,
    Classification,
    classify_ggml_positive,
    classify_lifecycle,
    classify_negative,
    classify_positive,
    record_problems,
    recorded_signal_table,
    system_info_coreml,
    termination,
    warmup_problems,
)
from verifylib.runtime.contracts.markers import (  # noqa: F401
    ACCELERATE_FEATURE,
    AHEADS_FAILURE_MARKER,
    BACKEND_ACCEL_INIT_PREFIX,
    BACKEND_CPU,
    BACKEND_GPU_INIT_PREFIX,
    BACKEND_METAL,
    BACKEND_NO_GPU_MARKER,
    BACKEND_NOT_REPORTED,
    BACKEND_PATH_VARIABLE,
    BATCH_MEMBER_PATCHED,
    BATCH_MEMBER_UNINITIALIZED,
    COREML_ENABLED_MARKER,
    COREML_FIRST_RUN_LINE,
    COREML_FLAG,
    COREML_INPUT_NAME,
    COREML_IO_DTYPE,
    COREML_LOAD_FAILURE_MARKER,
    COREML_LOAD_FAILURE_PREFIX,
    COREML_LOAD_MARKER,
    COREML_LOADING_PREFIX,
    COREML_OFF,
    COREML_ON,
    COREML_OUTPUT_NAME,
    DTW_DISABLED_BY_FLASH_ATTN,
    ENCODE_TIME_LABEL,
    EXIT_BAD_ARGUMENTS,
    EXIT_CODES,
    EXIT_GRAMMAR,
    EXIT_INIT_FAILURE,
    EXIT_NO_INPUT,
    EXIT_OK,
    EXIT_PROCESSING_FAILED,
    GGML_BACKENDS,
    INIT_FAILURE_MARKER,
    INIT_STATE_PREFIX,
    METAL_DEVICE_PREFIX,
    MODEL_LOAD_FAILURE,
    MODEL_LOAD_HPARAMS,
    MODEL_LOAD_PREFIX,
    SYSTEM_INFO_PREFIX,
    TEST_AUDIO_IN_TREE,
    TEST_MODEL_IN_TREE,
    launch_backend,
    parse_encode_time,
    parse_loaded_hparams,
    system_info_registries,
)
from verifylib.runtime.contracts.paths import (  # noqa: F401
    COREML_ENCODER_SUFFIX,
    coreml_encoder_path,
    model_arg_of,
)
from verifylib.runtime.contracts.signals import (  # noqa: F401
    DARWIN_SIGNALS,
    LEGACY_SIGNAL_TABLE,
    LINUX_SIGNALS,
    SIGNAL_TABLE_KEY,
    SIGNAL_TABLES,
    SignalTable,
    UnknownSignalTable,
    decode_signal,
    host_signal_table,
    signal_table,
)
