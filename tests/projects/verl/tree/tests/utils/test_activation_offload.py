# trimmed from volcengine/verl tests/utils/test_activation_offload.py at b178a3cd56f5: only the lines the project scan reads
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config
        from flash_attn.bert_padding import unpad_input
    model_name = os.path.expanduser("~/models/Qwen/Qwen2.5-0.5B-Instruct")
            config=config, torch_dtype=torch.bfloat16, attn_implementation="flash_attention_2"
    loss1.backward()
