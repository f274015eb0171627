"""Whole-cluster check: every rank's facts and findings in one report, with the drift between ranks.

``member``: what one rank (or one node's ``probe --json`` file) contributes; ``gather``: moving
members to rank 0 through torch.distributed's TCP store; ``merge``: findings per rule with the
ranks they affect, and every fact that differs between ranks.
"""
