"""attn-doctor: a doctor for the PyTorch attention stack."""

__version__ = "0.1.0"
