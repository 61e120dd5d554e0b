"""``python -m tierstore.bench`` (the same as ``tierstore bench``)."""

import os
import sys

# `python -m` puts the working directory first on sys.path. From the repository
# root that makes our kernels/ (installed as tierstore.kernels) importable as a
# top-level "kernels", which shadows the PyPI package of that name that
# transformers imports when it finds one: the sentence model of suites g and h
# then fails to load. The installed package does not need that entry.
if sys.path and os.path.isfile(os.path.join(sys.path[0] or ".", "kernels", "_cache.py")):
    del sys.path[0]

from tierstore.bench import main  # noqa: E402

sys.exit(main())
