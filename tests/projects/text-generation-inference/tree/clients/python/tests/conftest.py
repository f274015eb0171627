# trimmed from huggingface/text-generation-inference clients/python/tests/conftest.py at db931fcf42da: only the lines the project scan reads
    return "meta-llama/Llama-2-7b-chat-hf"
