"""`python -m yunque.cli`: the same as the `yunque` command."""

import sys

from yunque.cli.main import main

sys.exit(main())
