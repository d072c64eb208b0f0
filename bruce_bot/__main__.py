"""`python -m bruce_bot` is the same entry point as the `bruce` command."""

import sys

from bruce_bot.cli import main

sys.exit(main())
