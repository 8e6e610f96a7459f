"""whispercpp."""
