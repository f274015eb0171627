# trimmed from volcengine/verl tests/checkpoint_engine/test_correctness_on_npu.py at b178a3cd56f5: only the lines the project scan reads
    model_path="~/models/Qwen/Qwen3-8B-Base",
        model_path=os.environ["HDFS_ROOT"] + "/model/Qwen3-30B-A3B-Base",
