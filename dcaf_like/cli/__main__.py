"""``python -m dcaf_like.cli``: the same as the ``dcaf-like`` command."""

import sys

from dcaf_like.cli.main import main

sys.exit(main())
