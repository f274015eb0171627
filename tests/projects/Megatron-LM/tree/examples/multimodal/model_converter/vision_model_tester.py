# trimmed from NVIDIA/Megatron-LM examples/multimodal/model_converter/vision_model_tester.py at d98e8a64ddf3: only the lines the project scan reads
        "--tokenizer-model=mistralai/Mistral-7B-Instruct-v0.3",
