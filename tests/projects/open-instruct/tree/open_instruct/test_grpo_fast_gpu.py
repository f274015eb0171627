# trimmed from allenai/open-instruct open_instruct/test_grpo_fast_gpu.py at e6c3044aa620: only the lines the project scan reads
        tokenizer_name = "Qwen/Qwen3-0.6B"
        import flash_attn  # noqa: F401, PLC0415
        model_name = "hf-internal-testing/tiny-random-LlamaForCausalLM"
                model_name, attn_implementation="flash_attention_2", dtype=torch.bfloat16
