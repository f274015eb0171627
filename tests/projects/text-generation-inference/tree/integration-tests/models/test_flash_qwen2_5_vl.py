# trimmed from huggingface/text-generation-inference integration-tests/models/test_flash_qwen2_5_vl.py at db931fcf42da: only the lines the project scan reads
    with launcher("Qwen/Qwen2.5-VL-3B-Instruct") as handle:
