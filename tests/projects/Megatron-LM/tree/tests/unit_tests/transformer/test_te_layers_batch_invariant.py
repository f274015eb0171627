# trimmed from NVIDIA/Megatron-LM tests/unit_tests/transformer/test_te_layers_batch_invariant.py at d98e8a64ddf3: only the lines the project scan reads
    import flash_attn_3
    from flash_attn.cute import flash_attn_varlen_func as _fa4_varlen_func  # noqa: F401
    out_bik.backward(grad_output)
