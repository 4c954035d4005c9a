"""``python -m ccab.cli``: the ``ccab`` command."""

import sys

from ccab.cli import main

sys.exit(main())
