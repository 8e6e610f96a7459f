"""Model files: obtaining a source model, the ggml writer, the Core ML export, its compute plan."""
