# trimmed from hiyouga/LLaMA-Factory src/llamafactory/model/model_utils/longlora.py at ff6d4d12eeb0: only the lines the project scan reads
        LlamaAttention,
    attn_output = torch.nn.functional.scaled_dot_product_attention(
        query_states,
        key_states,
        value_states,
        attn_mask=causal_mask,
