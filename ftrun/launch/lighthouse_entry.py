"""Run torchft's lighthouse (``torchft_lighthouse``) from this Python; run by path, not -m.

torchft's ``lighthouse_main`` parses the process's real argv minus argv[0], so this file must be
the interpreter's first argument for the flags to be read correctly. torchft's native extension
is loaded alone (``torchft_compat.native_module``): the process never imports torch.
"""

import sys

from ftrun.torchft_compat import lighthouse_main

if __name__ == "__main__":
    sys.exit(lighthouse_main())
