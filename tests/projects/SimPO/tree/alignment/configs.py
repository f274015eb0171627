# trimmed from princeton-nlp/SimPO alignment/configs.py at 1b3e8f3528a2: only the lines the project scan reads
                "Which attention implementation to use; you can use --attn_implementation=flash_attention_2, in which case you must install this manually by running `pip install flash-attn --no-build-isolation`"
