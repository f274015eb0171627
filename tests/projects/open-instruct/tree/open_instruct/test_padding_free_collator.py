# trimmed from allenai/open-instruct open_instruct/test_padding_free_collator.py at e6c3044aa620: only the lines the project scan reads
    LlamaConfig,
    TensorDataCollatorWithFlattening,
        loss.backward()
