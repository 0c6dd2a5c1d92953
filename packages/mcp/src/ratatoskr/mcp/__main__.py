"""``python -m ratatoskr.mcp``: ``ratatoskr mcp`` without the provider's CLI."""

import sys

from ratatoskr.mcp.cli import main

sys.exit(main())
