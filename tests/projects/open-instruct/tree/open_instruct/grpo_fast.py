# trimmed from allenai/open-instruct open_instruct/grpo_fast.py at e6c3044aa620: only the lines the project scan reads
                    self.model.backward(loss)
            # corner case for tie_word_embeddings, such as Qwen2-0.5B
