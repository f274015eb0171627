# trimmed from OpenRLHF/OpenRLHF openrlhf/utils/agent.py at 3c3be6234e0c: only the lines the project scan reads
            request_output = await llm_engine.generate(
