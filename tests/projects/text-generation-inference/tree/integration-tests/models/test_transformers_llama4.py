# trimmed from huggingface/text-generation-inference integration-tests/models/test_transformers_llama4.py at db931fcf42da: only the lines the project scan reads
#     with launcher("ll-re/Llama-4-Scout-17B-16E-Instruct", num_shard=8) as handle:
#     response = await flash_llama4.generate(
