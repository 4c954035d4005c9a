"""``python -m ccab.warehouse_service serve``: the service in the foreground (``ccab warehouse serve``)."""

import sys

from ccab.warehouse_service.daemon import main

sys.exit(main())
