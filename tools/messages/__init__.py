"""The message catalogue's generator: what each release of the stack can raise, warn or log.

``python -m tools.messages.build --cache DIR`` reads every source in ``sources/`` (one module per
upstream) and writes ``attn_doctor/releases/snapshot/messages.zip``. See docs/release-facts.md.
"""
