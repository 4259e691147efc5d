"""``python -m fuel.cli``: the ``fuel`` command."""

import sys

from fuel.cli import main

sys.exit(main())
