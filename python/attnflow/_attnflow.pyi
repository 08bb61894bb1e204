# _attnflow.pyi — the compiled core (python/src/module.cc) is private: the
# public, typed API is the attnflow package (__init__.pyi and the annotated
# modules). Its attributes are Any to type checkers.
from typing import Any

def __getattr__(name: str) -> Any: ...
