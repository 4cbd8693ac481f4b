import sys

from serbench.cli import main

sys.exit(main())
