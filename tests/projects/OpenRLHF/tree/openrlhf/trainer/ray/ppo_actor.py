# trimmed from OpenRLHF/OpenRLHF openrlhf/trainer/ray/ppo_actor.py at 3c3be6234e0c: only the lines the project scan reads
class ActorPPOTrainer(ABC):
        self.strategy.backward(loss, self.actor, self.actor_optim)
