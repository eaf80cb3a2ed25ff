"""``python -m streams.cli``: the ``pwevent`` command."""

import sys

from streams.cli.main import main

sys.exit(main())
