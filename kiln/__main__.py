"""`python -m kiln ...`: the same command line as the `kiln` console script."""

import sys

from kiln.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
