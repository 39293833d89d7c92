"""What every kiln command-line tool does around its ``main``: exit codes and errors.

A ``KilnError`` is a user error: one line, exit 1.  Any other exception is a
kiln bug: one line saying so, exit 70, and the traceback only with
``KILN_DEBUG=1``.  No tool shows a user a Python traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ..errors import KilnError


def run_tool(prog: str, main: Callable[[], int]) -> None:
    """Run ``main`` as the console script ``prog`` and exit with its status."""
    try:
        status = main()
    except KeyboardInterrupt:
        sys.exit(130)
    except KilnError as e:
        sys.stderr.write(f"{prog}: error: {e}\n")
        sys.exit(1)
    except Exception as e:  # a kiln bug: one line, not a traceback
        sys.stderr.write(
            f"{prog}: internal error: {type(e).__name__}: {e}\n"
            "(this is a bug in kiln; set KILN_DEBUG=1 for the traceback)\n"
        )
        if os.environ.get("KILN_DEBUG"):
            raise
        sys.exit(70)
    sys.exit(status)
