import sys

from serbench import instructions

if instructions.launched():
    instructions.align_arenas()  # before the imports below allocate (docs/instructions.md)

from serbench.commands import main

sys.exit(main())
