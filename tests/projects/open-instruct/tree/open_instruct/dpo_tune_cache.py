# trimmed from allenai/open-instruct open_instruct/dpo_tune_cache.py at e6c3044aa620: only the lines the project scan reads
from open_instruct.padding_free_collator import TensorDataCollatorWithFlatteningDPO
                accelerator.backward(loss)
