"""The node engines of this process: one per database directory and settings, shared by
every ``turbdb.open`` with them, and made again in a forked child, which has none of its
parent's engine threads (its scheduler would never answer)."""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from pathlib import Path
from typing import Any

from . import _core

__all__ = ["HoldsEngine", "shared_engine", "in_this_process", "settings_of"]

#: The engines in use, by database directory and settings.
_ENGINES: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()
#: Each engine's key and the fork generation it was made in.
_ORIGIN: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], int]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_generation = 0


def _after_fork_in_child() -> None:
    global _generation, _LOCK
    _generation += 1
    _LOCK = threading.Lock()  # another thread may have held it at the fork
    # The parent's engines are never freed here: freeing one waits for its scheduler
    # thread, which the child does not have (the last reference dropped hung the child).
    for engine in list(_ORIGIN.keys()):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(engine))
    _ENGINES.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def shared_engine(path: Path, **settings: Any) -> Any:
    """The process's node engine for the database at ``path`` with these settings, made on
    first use: every ``turbdb.open`` of one database with the same engine options shares
    one engine (one cache, one scheduler), from any thread. Other settings get an engine of
    their own, so that configurations can be compared side by side."""
    return _engine_for((os.path.realpath(path), *sorted(settings.items())))


def in_this_process(engine: Any) -> Any:
    """``engine``, or where it was made before this process forked, the child's own engine
    of the same database and settings (None stays None)."""
    if engine is None:
        return None
    key, generation = _ORIGIN.get(engine, (None, _generation))
    if generation == _generation or key is None:
        return engine
    return _engine_for(key)


def settings_of(engine: Any) -> dict[str, Any] | None:
    """The settings ``engine`` was made with (those of :func:`shared_engine`), or None for no
    engine: what a pickled database or dataset carries to open the same kind elsewhere."""
    if engine is None:
        return None
    key, _ = _ORIGIN[engine]
    return dict(key[1:])


def _engine_for(key: tuple[Any, ...]) -> Any:
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = _core.Engine(**dict(key[1:]))
            _ORIGIN[engine] = (key, _generation)
        return engine


class HoldsEngine:
    """What holds a node engine (a database, a dataset): ``engine`` is always one of this
    process's, and a shallow copy shares what is open."""

    _engine: Any

    @property
    def engine(self) -> Any:
        """The node engine (``turbdb._core.Engine``) queries share, or None: queries alone.
        In a process forked after this was opened, that process's own."""
        if getattr(self, "_engine_generation", 0) != _generation:  # forked since: checked once
            self._engine = in_this_process(self._engine)
            self._engine_generation = _generation
        return self._engine

    def __copy__(self) -> Any:
        # A shallow copy shares what is open (the service copies a dataset per request);
        # only pickling opens anew (the holders' __reduce__, which copy.copy would use).
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone
