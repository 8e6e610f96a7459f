"""The ``verifylib`` command line: :mod:`.main` parses and dispatches; :mod:`.drift` is drift."""
