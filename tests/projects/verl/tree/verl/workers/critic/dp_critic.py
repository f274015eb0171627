# trimmed from volcengine/verl verl/workers/critic/dp_critic.py at b178a3cd56f5: only the lines the project scan reads
                    loss.backward()
