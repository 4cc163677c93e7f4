"""JSON written by a student (a notebook file, a message from the notebook's process), read so that no
content can crash the grader later.

Python's ``json`` raises ``RecursionError`` (not ``ValueError``) on arrays nested a few thousand
deep, and what it does accept can still break whoever handles it next: a structure hundreds of
levels deep makes ``nbformat.write`` and nbconvert recurse past Python's limit, a lone surrogate
(``"\\ud800"``) cannot be written as UTF-8, and ``NaN``/``Infinity`` are not JSON at all. Here every
one of these is either refused with ``ValueError`` (too deep) or made harmless (surrogates become
U+FFFD, the non-standard constants become ``null``), in one place.
"""

from __future__ import annotations

import json

MAX_DEPTH = 100  # nested arrays and objects; a notebook saved by Jupyter needs about 10


def loads(data: str | bytes, max_depth: int = MAX_DEPTH):
    """``data`` parsed and checked; ValueError (with the reason) for anything that is not usable JSON."""
    try:
        value = json.loads(data, parse_constant=lambda name: None)
    except RecursionError:
        raise ValueError(f"nested more than {max_depth} levels deep") from None
    return _checked(value, max_depth)


def _checked(value, max_depth: int):
    """``value`` with its strings made writable as UTF-8; ValueError if nested deeper than ``max_depth``."""
    if not isinstance(value, (list, dict)):
        return _text(value) if isinstance(value, str) else value
    stack = [(value, 1)]
    while stack:  # iterative: the depth that is being checked must not be needed to check it
        container, depth = stack.pop()
        if depth > max_depth:
            raise ValueError(f"nested more than {max_depth} levels deep")
        for key in range(len(container)) if isinstance(container, list) else list(container):
            item = container[key]
            if isinstance(item, str):
                fixed = _text(item)
                if fixed is not item:
                    container[key] = fixed
            elif isinstance(item, (list, dict)):
                stack.append((item, depth + 1))
            if isinstance(key, str):  # an object's key (a list's are its indices)
                fixed = _text(key)
                if fixed is not key:
                    container[fixed] = container.pop(key)
    return value


def _text(text: str) -> str:
    """``text`` itself, or a copy with its lone surrogates replaced (they cannot be written as UTF-8)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
