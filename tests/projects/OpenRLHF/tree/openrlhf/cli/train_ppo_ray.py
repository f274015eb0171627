# trimmed from OpenRLHF/OpenRLHF openrlhf/cli/train_ppo_ray.py at 3c3be6234e0c: only the lines the project scan reads
            args.ds.attn_implementation = "flash_attention_2"
