# trimmed from volcengine/verl tests/test_protocol_on_cpu.py at b178a3cd56f5: only the lines the project scan reads
    has_fp8 = hasattr(torch, "float8_e5m2") or hasattr(torch, "float8_e4m3fn")
