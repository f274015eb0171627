# trimmed from allenai/open-instruct open_instruct/padding_free_collator.py at e6c3044aa620: only the lines the project scan reads
class TensorDataCollatorWithFlattening(DefaultDataCollator):
    LlamaForCausalLM and BambaForCausalLM.
