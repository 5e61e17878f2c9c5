"""``python -m turbdb.jhtdb URL SCRIPT [ARGS…]``: runs a JHTDB (givernylocal) script unmodified
with its requests sent to the turbdb server at URL."""

import os
import runpy
import sys

from .redirect import redirect


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    url, script = sys.argv[1], sys.argv[2]
    redirect(url)
    sys.argv = [script, *sys.argv[3:]]
    # As `python script.py` does: the modules beside the script are importable.
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
