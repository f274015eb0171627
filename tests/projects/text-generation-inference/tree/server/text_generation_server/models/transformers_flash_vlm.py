# trimmed from huggingface/text-generation-inference server/text_generation_server/models/transformers_flash_vlm.py at db931fcf42da: only the lines the project scan reads
            attn_output = F.scaled_dot_product_attention(
                padded_query,
                padded_key,
                padded_value,
                attn_mask=attention_mask,
            padding_side="left",
class TransformersGemma3VlmCausalLM(TransformersFlashVlmCausalLM):
