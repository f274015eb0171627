# trimmed from huggingface/text-generation-inference load_tests/benchmarks.py at db931fcf42da: only the lines the project scan reads
        ("meta-llama/Llama-3.1-8B-Instruct", 1),
        # ('mistralai/Mixtral-8x7B-Instruct-v0.1', 2),
