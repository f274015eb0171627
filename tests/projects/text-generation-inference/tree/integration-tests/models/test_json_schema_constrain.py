# trimmed from huggingface/text-generation-inference integration-tests/models/test_json_schema_constrain.py at db931fcf42da: only the lines the project scan reads
        "google/gemma-3-4b-it",
