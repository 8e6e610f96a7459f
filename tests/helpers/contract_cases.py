"""The `.mlmodelc` path cases of docs/runtime-contract.md §4.1, shared by the unit and physical tiers."""

GUIDE_TABLE = [  # the table of docs/runtime-contract.md §4.1
    ("models/ggml-base.en.bin", "models/ggml-base.en-encoder.mlmodelc"),
    ("/m/ggml-model.bin", "/m/ggml-model-encoder.mlmodelc"),
    ("/m/ggml-base.en-q5_0.bin", "/m/ggml-base.en-encoder.mlmodelc"),
    ("/m/ggml-model-q8_0.bin", "/m/ggml-model-encoder.mlmodelc"),
    ("/m/ggml-tune-q1_5.bin", "/m/ggml-tune-encoder.mlmodelc"),
    ("/data/v1.4/ggml-model", "/data/v1-encoder.mlmodelc"),
]
"""Model argument -> the `.mlmodelc` path whisper.cpp derives from it."""
