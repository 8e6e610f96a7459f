"""``python -m verifylib``: the ``verifylib`` command line (:func:`verifylib.cli.main.main`)."""

import sys

from verifylib.cli.main import main

sys.exit(main())
