# trimmed from allenai/open-instruct open_instruct/finetune.py at e6c3044aa620: only the lines the project scan reads
from open_instruct.padding_free_collator import TensorDataCollatorWithFlattening
                accelerator.backward(loss)
