# trimmed from Lightning-AI/litgpt litgpt/config.py at 26857050fe3f: only the lines the project scan reads
    # https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
    # https://huggingface.co/google/gemma-2b/blob/main/config.json
    # https://huggingface.co/google/gemma-2-2b/blob/main/config.json
gemma3 = [
    # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
    # https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
    # https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json
    # https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json
    # https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
