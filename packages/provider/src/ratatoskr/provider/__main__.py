"""``python -m ratatoskr.provider`` runs the ``ratatoskr`` command."""

import sys

from ratatoskr.provider.cli import main

sys.exit(main())
