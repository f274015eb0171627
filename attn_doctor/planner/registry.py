"""The planners `attn-doctor wheel` can ask, by package (interface.PLANNED names them)."""

from __future__ import annotations

from attn_doctor.planner.fla import FlaPlanner
from attn_doctor.planner.flash_attn import FlashAttnPlanner
from attn_doctor.planner.flash_attn_3 import FlashAttn3Planner
from attn_doctor.planner.interface import Planner
from attn_doctor.planner.torch import TorchPlanner
from attn_doctor.planner.triton import TritonPlanner
from attn_doctor.planner.xformers import XformersPlanner

PLANNERS: dict[str, Planner] = {
    planner.package: planner
    for planner in (
        TorchPlanner(),
        TritonPlanner(),
        FlashAttnPlanner(),
        FlashAttn3Planner(),
        XformersPlanner(),
        FlaPlanner(),
    )
}
