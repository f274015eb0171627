# trimmed from Lightning-AI/litgpt litgpt/prompts.py at 26857050fe3f: only the lines the project scan reads
        # Mistral does not: https://huggingface.co/mistralai/Mistral-7B-Instruct-v0.1#instruction-format
    if re.search("Llama-2-7b-chat-hf-function-calling-v2", model_name):
