# trimmed from OpenRLHF/OpenRLHF openrlhf/models/ring_attn_utils.py at 3c3be6234e0c: only the lines the project scan reads
from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input
