# trimmed from huggingface/text-generation-inference load_tests/long_prompt2.py at db931fcf42da: only the lines the project scan reads
    model="meta-llama/Llama-3.1-8B-Instruct", messages=messages, max_tokens=2
