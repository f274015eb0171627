# trimmed from OpenRLHF/OpenRLHF openrlhf/trainer/ray/ppo_critic.py at 3c3be6234e0c: only the lines the project scan reads
class CriticPPOTrainer(ABC):
        self.strategy.backward(loss, self.critic, self.critic_optim)
