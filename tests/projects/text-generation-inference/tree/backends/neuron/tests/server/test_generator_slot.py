# trimmed from huggingface/text-generation-inference backends/neuron/tests/server/test_generator_slot.py at db931fcf42da: only the lines the project scan reads
TOKENIZERS = ["NousResearch/Llama-2-7b-hf", "gpt2"]
    t.padding_side = "left"
