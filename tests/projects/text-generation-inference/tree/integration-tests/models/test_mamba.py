# trimmed from huggingface/text-generation-inference integration-tests/models/test_mamba.py at db931fcf42da: only the lines the project scan reads
    response = await fused_kernel_mamba.generate(
