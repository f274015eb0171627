# trimmed from huggingface/text-generation-inference integration-tests/models/test_grammar_llama.py at db931fcf42da: only the lines the project scan reads
    response = await non_flash_llama_grammar.generate(
