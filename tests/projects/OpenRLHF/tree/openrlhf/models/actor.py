# trimmed from OpenRLHF/OpenRLHF openrlhf/models/actor.py at 3c3be6234e0c: only the lines the project scan reads
        attn_implementation="flash_attention_2",
            # Use `model.generate(use_cache=True)` instead.`
