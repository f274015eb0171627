# trimmed from volcengine/verl tests/models/test_tiled_mlp_accuracy.py at b178a3cd56f5: only the lines the project scan reads
def create_model(model_name="Qwen/Qwen3-1.7B", num_layers=2):
        attn_implementation="flash_attention_2",
    loss.backward()
    apply_tiled_mlp_monkey_patch(num_shards=4, model_type="qwen3")
