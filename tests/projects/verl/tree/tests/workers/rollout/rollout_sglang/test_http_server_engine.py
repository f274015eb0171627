# trimmed from volcengine/verl tests/workers/rollout/rollout_sglang/test_http_server_engine.py at b178a3cd56f5: only the lines the project scan reads
            result = adapter.generate(
