import sys

from verifylib.cli.main import main

sys.exit(main())
