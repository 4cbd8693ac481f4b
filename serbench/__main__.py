import sys

from serbench.commands import main

sys.exit(main())
