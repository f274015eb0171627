# trimmed from volcengine/verl verl/models/mcore/registry.py at b178a3cd56f5: only the lines the project scan reads
    QWEN2_5_VL = "Qwen2_5_VLForConditionalGeneration"
    MixtralModel,
    LLAMA = "LlamaForCausalLM"  # tested
    QWEN2 = "Qwen2ForCausalLM"  # tested
    QWEN2_MOE = "Qwen2MoeForCausalLM"  # pending
    LLAMA4 = "Llama4ForConditionalGeneration"  # not tested
    QWEN3 = "Qwen3ForCausalLM"  # tested
    QWEN3_MOE = "Qwen3MoeForCausalLM"  # tested
