"""tomllib is in the standard library from Python 3.11; tomli is the same parser before that."""

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["tomllib"]
