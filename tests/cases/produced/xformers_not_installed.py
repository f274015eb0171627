"""Code that uses xformers' memory-efficient attention where xformers is not installed."""

import xformers.ops  # noqa: F401
