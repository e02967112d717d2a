"""`python -m simreport.cli …`: the `simreport` command."""

import sys

from .main import main

sys.exit(main())
