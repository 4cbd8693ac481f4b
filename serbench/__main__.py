import os
import sys

from serbench import instructions

if instructions.launched():
    instructions.align_arenas()  # before the imports below allocate (docs/instructions.md)

from serbench.commands import main

code = main()
if instructions.launched():  # everything is written; tearing torch down under valgrind takes seconds
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
