"""Whether a progress bar is drawn: on a terminal only (in a redirected log a bar is a run of
carriage returns), and never with ``--quiet`` or ``$TQDM_DISABLE``."""

from __future__ import annotations

import os


def bar_disabled(quiet: bool = False) -> bool | None:
    """tqdm's ``disable``: True for ``quiet`` or ``$TQDM_DISABLE``; else None, tqdm's "only
    when its stream is a terminal". (tqdm reads ``$TQDM_DISABLE`` only where ``disable`` is
    not passed, and False drew bars into logs.)"""
    if quiet or os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no"):
        return True
    return None
