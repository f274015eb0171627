# trimmed from volcengine/verl verl/experimental/agent_loop/tool_agent_loop.py at b178a3cd56f5: only the lines the project scan reads
            output = await self.server_manager.generate(
