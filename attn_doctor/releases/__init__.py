"""Dated release facts of the attention stack (registry metadata, flash-attn wheel matrices): snapshot/."""
