# trimmed from NVIDIA/Megatron-LM megatron/core/models/vision/encoder_registry.py at d98e8a64ddf3: only the lines the project scan reads
    # Pixtral-Large (Mistral-Large-3-675B): 48L/1664h/8192ffn + 2×2 patch merger
