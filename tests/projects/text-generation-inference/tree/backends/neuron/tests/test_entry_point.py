# trimmed from huggingface/text-generation-inference backends/neuron/tests/test_entry_point.py at db931fcf42da: only the lines the project scan reads
@pytest.mark.parametrize("model_id", ["unsloth/Llama-3.2-1B-Instruct"])
