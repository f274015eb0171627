"""Facts about an environment: probed from this machine or declared for a target."""

from attn_doctor.facts.model import Environment, Gpu, Package, TorchBuild

__all__ = ["Environment", "Gpu", "Package", "TorchBuild"]
