# trimmed from volcengine/verl verl/models/mcore/config_converter.py at b178a3cd56f5: only the lines the project scan reads
    # for LlamaForCausalLM or Qwen2ForCausalLM
    # Qwen2_5_VLForConditionalGeneration
    # Llama4ForConditionalGeneration
