"""``python -m turbdb.jhtdb URL SCRIPT [ARGS…]``: runs a JHTDB (givernylocal) script unmodified
with its requests sent to the turbdb server at URL.

  URL     the server's address, http://host:port (https://…, or with the path a proxy
          serves it under), as turbdb.connect takes it
  SCRIPT  the Python script that uses givernylocal, run as `python SCRIPT ARGS…` runs it
  ARGS    the script's own arguments

Exit status: the script's own; 2 for a usage error (a missing argument, a script that is
not there, an address that is not one)."""

import os
import runpy
import sys

from ..exceptions import InvalidRequestError
from .redirect import redirect

USAGE = "usage: python -m turbdb.jhtdb URL SCRIPT [ARGS…]"


def _usage_error(message: str) -> None:
    print(f"{USAGE}\npython -m turbdb.jhtdb: error: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(sys.argv) < 3:
        _usage_error("the server's URL and the script to run are required" if len(sys.argv) < 2
                     else "the script to run is required")
    url, script = sys.argv[1], sys.argv[2]
    # A file, or as `python DIR` runs it, a directory (or zip) with a __main__.py.
    if not (os.path.isfile(script) or os.path.isfile(os.path.join(script, "__main__.py"))):
        _usage_error(f"no script at {script!r}" + (" (a directory without __main__.py)" if os.path.isdir(script) else ""))
    try:
        redirect(url)
    except InvalidRequestError as e:
        _usage_error(str(e))
    sys.argv = [script, *sys.argv[3:]]
    # As `python script.py` does: the modules beside the script are importable.
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
