# trimmed from huggingface/text-generation-inference integration-tests/models/test_chat_stream_options.py at db931fcf42da: only the lines the project scan reads
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
