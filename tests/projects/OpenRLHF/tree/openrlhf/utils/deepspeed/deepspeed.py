# trimmed from OpenRLHF/OpenRLHF openrlhf/utils/deepspeed/deepspeed.py at 3c3be6234e0c: only the lines the project scan reads
        model.backward(loss)
            # corner case for tie_word_embeddings, such as Qwen2-0.5B
