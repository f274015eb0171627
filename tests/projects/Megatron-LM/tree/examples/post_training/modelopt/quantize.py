# trimmed from NVIDIA/Megatron-LM examples/post_training/modelopt/quantize.py at d98e8a64ddf3: only the lines the project scan reads
        loss.mean().backward()
        tokenizer.padding_side = "left"  # better for calibration
