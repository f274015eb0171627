"""Code that imports flash_attn directly where it is not installed."""

from flash_attn import flash_attn_func  # noqa: F401
