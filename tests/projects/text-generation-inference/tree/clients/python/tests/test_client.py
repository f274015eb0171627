# trimmed from huggingface/text-generation-inference clients/python/tests/test_client.py at db931fcf42da: only the lines the project scan reads
    response = client.generate("test", max_new_tokens=1, decoder_input_details=True)
