"""``python -m tierstore.bench`` (the same as ``tierstore bench``)."""

import sys

from . import main

sys.exit(main())
