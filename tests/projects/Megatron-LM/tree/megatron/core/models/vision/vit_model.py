# trimmed from NVIDIA/Megatron-LM megatron/core/models/vision/vit_model.py at d98e8a64ddf3: only the lines the project scan reads
    Matches Mistral-Large-3's `pre_mm_projector_norm` + `patch_merger.merging_layer`.
