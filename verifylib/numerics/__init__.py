"""Numbers: the ML-program executor, the Hugging Face reference, parity, drift and WER scoring."""
