# trimmed from huggingface/text-generation-inference clients/python/text_generation/client.py at db931fcf42da: only the lines the project scan reads
     >>> client.generate("Why is the sky blue?").generated_text
