# trimmed from huggingface/text-generation-inference server/text_generation_server/models/custom_modeling/idefics_modeling.py at db931fcf42da: only the lines the project scan reads
# this was adapted from LlamaAttention
        attn_output = nn.functional.scaled_dot_product_attention(
            query_states,
            key_states,
            value_states,
            attn_mask=attention_mask,
        >>> generate_ids = model.generate(inputs.input_ids, max_length=30)
