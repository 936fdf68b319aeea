"""Train PPO on CartPole-v1 with policy inference overlapped with stepping.

The sub-envs are split in two halves (even and odd indices). While one half steps in aiovec's
worker processes, the policy picks the other half's next actions: ``envs.send`` hands a half
its actions and returns at once, ``await envs.recv`` collects that half. The same PPO also runs
on Gymnasium's ``AsyncVectorEnv`` driven by a plain ``step`` (``--vector gymnasium``), which
cannot overlap: ``step`` returns only once every sub-env has stepped.

For a given seed both collect the same transitions: the policy draws its random numbers per
sub-env and step ahead of time, so splitting the batch into halves changes no decision. The two
learning curves then coincide in env steps and differ only in wall-clock time.

Overlap pays when stepping half the envs takes about as long as inference for the other half.
CartPole steps in microseconds and a small CPU policy costs about the same per call whatever
the batch, so here the second inference call per step costs about what the overlap saves:
``--no-overlap`` (a plain ``await envs.step`` loop) measures the difference.

    python examples/train_ppo.py                          # aiovec, until a mean return of 475
    python examples/train_ppo.py --vector gymnasium       # on Gymnasium's AsyncVectorEnv
    python examples/train_ppo.py --vector both --plot curves.png

Needs PyTorch (the CPU build is enough), tqdm and matplotlib (for ``--plot``).
"""

from __future__ import annotations

import argparse
import bisect
import math
import sys
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import anyio
import gymnasium as gym
import numpy as np
import torch
from torch import nn
from tqdm import tqdm  # type: ignore[import-untyped]

import aiovec

ENV_ID = "CartPole-v1"
RETURN_WINDOW = 20  # episodes in the "mean return" that --target and the results refer to


@dataclass(frozen=True)
class Hyperparameters:
    """PPO's settings; these suit CartPole with 8 sub-envs."""

    rollout_steps: int = 64  # steps of every sub-env per rollout (a batch of 8 x 64 = 512)
    gamma: float = 0.99
    gae_lambda: float = 0.95
    learning_rate: float = 2.5e-4
    epochs: int = 4
    minibatches: int = 4
    clip: float = 0.2
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5


def make_env() -> gym.Env[Any, Any]:
    return gym.make(ENV_ID)


def num_actions(space: gym.Space[Any]) -> int:
    assert isinstance(space, gym.spaces.Discrete), space
    return int(space.n)


# --- The model ---------------------------------------------------------------------------------

def linear(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
    """A layer with orthogonal weights and zero biases: PPO learns faster and more reliably
    from this start than from PyTorch's default."""
    layer = nn.Linear(fan_in, fan_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """Separate policy and value MLPs (two tanh layers of 64 each)."""

    def __init__(self, obs_size: int, num_actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.policy = nn.Sequential(
            linear(obs_size, hidden, math.sqrt(2)), nn.Tanh(),
            linear(hidden, hidden, math.sqrt(2)), nn.Tanh(),
            linear(hidden, num_actions, 0.01),  # near-uniform actions at first
        )
        self.value = nn.Sequential(
            linear(obs_size, hidden, math.sqrt(2)), nn.Tanh(),
            linear(hidden, hidden, math.sqrt(2)), nn.Tanh(),
            linear(hidden, 1, 1.0),
        )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Action log-probabilities and state values."""
        return torch.log_softmax(self.policy(obs), dim=-1), self.value(obs).squeeze(-1)


class Decisions(NamedTuple):
    actions: np.ndarray
    logprobs: np.ndarray
    values: np.ndarray


def act(model: ActorCritic, obs: np.ndarray, uniforms: np.ndarray) -> Decisions:
    """Sample actions by inverse CDF, one pre-drawn uniform per sub-env: the same actions
    whether the batch is inferred whole or in halves."""
    with torch.inference_mode():
        logprobs_tensor, values = model(torch.from_numpy(obs))
    # numpy from here: on arrays this small each op costs far less than a torch op.
    logprobs = logprobs_tensor.numpy()
    below = np.cumsum(np.exp(logprobs), axis=1) < uniforms[:, None]
    actions = np.minimum(below.sum(axis=1), logprobs.shape[1] - 1)  # rounding at cdf ~ 1
    chosen = logprobs[np.arange(len(actions)), actions]
    return Decisions(actions, chosen, values.numpy())


# --- Rollouts ----------------------------------------------------------------------------------

class Rollout:
    """``rollout_steps`` steps of every sub-env: row ``t``, column ``env``."""

    def __init__(self, rollout_steps: int, num_envs: int, obs_shape: tuple[int, ...]) -> None:
        shape = (rollout_steps, num_envs)
        self.obs = np.zeros((*shape, *obs_shape), np.float32)
        self.actions = np.zeros(shape, np.int64)
        self.logprobs = np.zeros(shape, np.float32)
        self.values = np.zeros(shape, np.float32)
        self.rewards = np.zeros(shape, np.float32)
        self.terminated = np.zeros(shape, bool)
        self.truncated = np.zeros(shape, bool)
        # False for an autoreset step: the step after an episode's end only resets the
        # sub-env (NEXT_STEP autoreset, as in Gymnasium 1.x): its action is ignored, so it is
        # not a transition to learn from.
        self.valid = np.zeros(shape, bool)
        self.uniforms = np.zeros(shape, np.float32)  # the action draws, one per cell
        self.last_values = np.zeros(num_envs, np.float32)  # V(the obs after the last row)

    def advantages(self, gamma: float, gae_lambda: float) -> np.ndarray:
        """Generalised advantage estimates, row by row from the end.

        A terminated step has no future. A truncated one (CartPole's 500-step limit) has one:
        the next row's observation is the episode's final observation (NEXT_STEP autoreset),
        and its value is the bootstrap. Either way the estimate does not run on into the next
        episode.
        """
        advantages = np.zeros_like(self.rewards)
        following = np.zeros_like(self.last_values)
        for t in reversed(range(len(self.rewards))):
            next_values = self.values[t + 1] if t + 1 < len(self.rewards) else self.last_values
            deltas = self.rewards[t] + gamma * next_values * ~self.terminated[t] - self.values[t]
            episode_goes_on = ~(self.terminated[t] | self.truncated[t])
            following = deltas + gamma * gae_lambda * following * episode_goes_on
            advantages[t] = following
        return advantages


class Episode(NamedTuple):
    vector_step: int  # the vector step it ended on (sorts episodes the same in every collector)
    env_index: int
    total_reward: float
    wall_seconds: float


@dataclass
class Run:
    """A training run's outcome."""

    label: str
    num_envs: int
    episodes: list[Episode] = field(default_factory=list)
    env_steps: int = 0
    wall_seconds: float = 0.0  # from making the vector env to the end of training
    startup_seconds: float = 0.0  # making it and the first reset
    target_reached: bool = False

    def mean_return(self, first: bool = False) -> float:
        """The mean return of the last (or the first) ``RETURN_WINDOW`` episodes."""
        window = self.episodes[:RETURN_WINDOW] if first else self.episodes[-RETURN_WINDOW:]
        return float(np.mean([episode.total_reward for episode in window])) if window else 0.0

    def digest(self) -> str:
        """A fingerprint of every episode's return, in order: equal runs, equal digests."""
        returns = np.array([episode.total_reward for episode in self.episodes])
        return f"{zlib.crc32(returns.tobytes()):08x}"


class Trainer:
    """PPO's state and bookkeeping; a collector (below) drives the sub-envs through it."""

    def __init__(self, first_obs: np.ndarray, num_actions: int, args: argparse.Namespace,
                 label: str, started: float) -> None:
        self.hp = Hyperparameters()
        self.num_envs = len(first_obs)
        self.total_steps: int = args.total_steps
        self.target: float = args.target
        self.progress: bool = args.progress
        self.started = started
        torch.manual_seed(args.seed)
        self.model = ActorCritic(first_obs.shape[1], num_actions)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.hp.learning_rate,
                                          eps=1e-5)
        self.shuffler = torch.Generator().manual_seed(args.seed)
        self.rng = np.random.default_rng(args.seed)
        self.rollout = Rollout(self.hp.rollout_steps, self.num_envs, first_obs.shape[1:])
        self.obs = first_obs.copy()  # each sub-env's latest observation
        self.episode_over = np.zeros(self.num_envs, bool)  # its next step is an autoreset
        self.episode_reward = np.zeros(self.num_envs)
        self.vector_steps = 0  # completed rollouts x rollout_steps
        self.run = Run(label, self.num_envs, startup_seconds=time.perf_counter() - started)

    def decide(self, t: int, env_ids: np.ndarray) -> np.ndarray:
        """Actions for row ``t`` of sub-envs ``env_ids`` (their latest observations)."""
        rollout, obs = self.rollout, self.obs[env_ids]
        decisions = act(self.model, obs, rollout.uniforms[t, env_ids])
        rollout.obs[t, env_ids] = obs
        rollout.actions[t, env_ids] = decisions.actions
        rollout.logprobs[t, env_ids] = decisions.logprobs
        rollout.values[t, env_ids] = decisions.values
        rollout.valid[t, env_ids] = ~self.episode_over[env_ids]
        return decisions.actions

    def observe(self, t: int, env_ids: np.ndarray, obs: np.ndarray, rewards: np.ndarray,
                terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Record what sub-envs ``env_ids`` returned for row ``t``."""
        rollout = self.rollout
        rollout.rewards[t, env_ids] = rewards
        rollout.terminated[t, env_ids] = terminated
        rollout.truncated[t, env_ids] = truncated
        self.obs[env_ids] = obs
        self.run.env_steps += len(env_ids)
        self.episode_reward[env_ids] += rewards  # an autoreset step's reward is 0
        ended = terminated | truncated
        self.episode_over[env_ids] = ended
        for env_index in env_ids[ended].tolist():
            episode = Episode(self.vector_steps + t, env_index,
                              float(self.episode_reward[env_index]),
                              time.perf_counter() - self.started)
            bisect.insort(self.run.episodes, episode)  # in (vector step, sub-env) order
            self.episode_reward[env_index] = 0.0

    async def train(self, collect: Callable[[Trainer], Awaitable[None]]) -> Run:
        """Collect and learn until ``total_steps`` env steps, or the target mean return."""
        run = self.run
        per_rollout = self.hp.rollout_steps * self.num_envs
        rollouts = -(-self.total_steps // per_rollout)  # the last one may go past total_steps
        with tqdm(total=rollouts * per_rollout, unit="step", file=sys.stderr, smoothing=0.1,
                  disable=not self.progress) as bar:
            while run.env_steps < self.total_steps:
                steps_before = run.env_steps
                self.rollout.uniforms[:] = self.rng.random(self.rollout.uniforms.shape,
                                                           dtype=np.float32)
                await collect(self)
                with torch.inference_mode():  # the values that bootstrap the last row
                    self.rollout.last_values[:] = self.model(torch.from_numpy(self.obs))[1]
                self.vector_steps += self.hp.rollout_steps
                bar.update(run.env_steps - steps_before)
                if run.episodes:
                    bar.set_postfix(mean_return=f"{run.mean_return():.1f}",
                                    episodes=len(run.episodes))
                if len(run.episodes) >= RETURN_WINDOW and run.mean_return() >= self.target:
                    run.target_reached = True
                    break
                self.learn()
        run.wall_seconds = time.perf_counter() - self.started
        return run

    def learn(self) -> None:
        """PPO's clipped update on the valid rows of the rollout."""
        hp, rollout = self.hp, self.rollout
        advantages = rollout.advantages(hp.gamma, hp.gae_lambda)
        valid = rollout.valid.reshape(-1)

        def rows(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(array.reshape(len(valid), *array.shape[2:])[valid])

        obs, actions, old_logprobs = (rows(rollout.obs), rows(rollout.actions),
                                      rows(rollout.logprobs))
        all_advantages = rows(advantages)
        targets = all_advantages + rows(rollout.values)  # what the value function learns
        for _ in range(hp.epochs):
            order = torch.randperm(len(obs), generator=self.shuffler)
            for batch in order.chunk(hp.minibatches):
                logprobs, values = self.model(obs[batch])
                chosen = logprobs.gather(1, actions[batch, None]).squeeze(1)
                ratio = (chosen - old_logprobs[batch]).exp()
                adv = all_advantages[batch]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                clipped = ratio.clamp(1 - hp.clip, 1 + hp.clip)
                policy_loss = -torch.min(ratio * adv, clipped * adv).mean()
                value_loss = 0.5 * (values - targets[batch]).pow(2).mean()
                entropy = -(logprobs.exp() * logprobs).sum(-1).mean()
                loss = policy_loss + hp.value_coef * value_loss - hp.entropy_coef * entropy
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.model.parameters(), hp.max_grad_norm)
                self.optimizer.step()


# --- Collectors: one rollout each ---------------------------------------------------------------

async def collect_overlapped(envs: aiovec.AsyncVectorEnv, trainer: Trainer) -> None:
    """Double buffering: each half's inference runs while the other half steps.

    ``send`` has written a half's actions to the workers when it returns, so the inference
    that follows it (plain synchronous code) runs while the workers step. The halves
    interleave (even and odd sub-envs), so every worker process steps a share of each.
    """
    half_a = np.arange(0, envs.num_envs, 2)
    half_b = np.arange(1, envs.num_envs, 2)

    async def receive(t: int, half: np.ndarray) -> None:
        obs, rewards, terminated, truncated, _, env_ids = await envs.recv(batch_size=len(half))
        trainer.observe(t, np.asarray(env_ids), obs, rewards, terminated, truncated)

    last = trainer.hp.rollout_steps - 1
    envs.send(trainer.decide(0, half_a), half_a)
    for t in range(last + 1):
        actions_b = trainer.decide(t, half_b)          # while A steps
        await receive(t, half_a)
        envs.send(actions_b, half_b)
        if t == last:
            await receive(t, half_b)
            break
        actions_a = trainer.decide(t + 1, half_a)      # while B steps
        await receive(t, half_b)
        envs.send(actions_a, half_a)


StepFn = Callable[[np.ndarray], Awaitable[tuple[Any, Any, Any, Any, Any]]]


async def collect_plain(step: StepFn, trainer: Trainer) -> None:
    """Infer for every sub-env, then step them all: inference and stepping take turns."""
    everyone = np.arange(trainer.num_envs)
    for t in range(trainer.hp.rollout_steps):
        obs, rewards, terminated, truncated, _ = await step(trainer.decide(t, everyone))
        trainer.observe(t, everyone, obs, rewards, terminated, truncated)


# --- Runs ---------------------------------------------------------------------------------------

async def train_on_aiovec(args: argparse.Namespace) -> Run:
    overlap = "overlapped" if args.overlap else "plain step"
    workers = "" if args.num_workers is None else f", {args.num_workers} workers"
    label = f"aiovec AsyncVectorEnv ({args.backend}{workers}, {overlap})"
    started = time.perf_counter()
    options = {} if args.num_workers is None else {"num_workers": args.num_workers}
    async with aiovec.AsyncVectorEnv([make_env] * args.num_envs, backend=args.backend,
                                     **options) as envs:
        obs, _ = await envs.reset(seed=args.seed)
        trainer = Trainer(obs, num_actions(envs.single_action_space), args, label, started)

        async def collect(trainer: Trainer) -> None:
            if args.overlap:
                await collect_overlapped(envs, trainer)
            else:
                await collect_plain(envs.step, trainer)

        return await trainer.train(collect)


async def train_on_gymnasium(args: argparse.Namespace) -> Run:
    started = time.perf_counter()
    envs = gym.vector.AsyncVectorEnv([make_env] * args.num_envs)
    try:
        obs, _ = envs.reset(seed=args.seed)
        trainer = Trainer(obs, num_actions(envs.single_action_space), args,
                          "Gymnasium AsyncVectorEnv (plain step)", started)

        async def step(actions: np.ndarray) -> tuple[Any, Any, Any, Any, Any]:
            return envs.step(actions)  # blocks the event loop: nothing else runs on it

        async def collect(trainer: Trainer) -> None:
            await collect_plain(step, trainer)

        return await trainer.train(collect)
    finally:
        envs.close()


def report(run: Run, vector: str, args: argparse.Namespace) -> None:
    outcome = "reached" if run.target_reached else "did not reach"
    print(f"{run.label}: {outcome} a mean return of {args.target:g} (last {RETURN_WINDOW} "
          f"episodes) after {run.env_steps:,} env steps and {len(run.episodes)} episodes, in "
          f"{run.wall_seconds:.1f} s ({run.startup_seconds:.1f} s of it starting the sub-envs)")
    backend = f" backend={args.backend} overlap={args.overlap}" if vector == "aiovec" else ""
    print(f"RESULT vector={vector}{backend} seed={args.seed} steps={run.env_steps} "
          f"wall={run.wall_seconds:.2f}s final_return={run.mean_return():.1f} "
          f"first_return={run.mean_return(first=True):.1f} episodes={len(run.episodes)} "
          f"target_reached={run.target_reached} curve={run.digest()}")


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of each value and the ``window - 1`` before it (fewer at the start)."""
    sums = np.cumsum(np.concatenate([[0.0], values]))
    starts = np.maximum(np.arange(len(values)) + 1 - window, 0)
    means: np.ndarray = (sums[1:] - sums[starts]) / (np.arange(len(values)) + 1 - starts)
    return means


def plot(runs: list[Run], path: str, target: float) -> None:
    """Episode return against env steps and against wall-clock time, one curve per run."""
    import matplotlib  # here, not at the top: only --plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for number, run in enumerate(runs):
        x_steps = np.array([(episode.vector_step + 1) * run.num_envs
                            for episode in run.episodes])
        x_seconds = np.array([episode.wall_seconds for episode in run.episodes])
        returns = np.array([episode.total_reward for episode in run.episodes])
        smooth = trailing_mean(returns, RETURN_WINDOW)
        style = "-" if number == 0 else "--"  # the runs may coincide: keep both visible
        line, = by_steps.plot(x_steps, smooth, style, label=run.label)
        by_steps.scatter(x_steps, returns, s=2, alpha=0.15, color=line.get_color())
        by_time.plot(x_seconds, smooth, style, color=line.get_color(),
                     label=f"{run.label}: {run.wall_seconds:.0f} s")
    for axes in (by_steps, by_time):
        axes.axhline(target, color="gray", linestyle="--", linewidth=0.8)
        axes.grid(alpha=0.3)
    by_steps.set(xlabel="env steps", ylabel=f"episode return (mean of last {RETURN_WINDOW})")
    same = len(runs) > 1 and len({run.digest() for run in runs}) == 1
    by_steps.set_title(f"PPO on {ENV_ID}" + (": identical runs" if same else ""))
    by_time.set(xlabel="wall-clock seconds (from making the vector env)",
                title="the same runs against time")
    by_time.set_xlim(left=0)
    by_steps.legend(loc="lower right", fontsize=8)
    by_time.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


async def main(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # tiny networks: threads would only fight the env workers
    vectors = ["gymnasium", "aiovec"] if args.vector == "both" else [args.vector]
    runs = []
    for vector in vectors:
        train = train_on_aiovec if vector == "aiovec" else train_on_gymnasium
        run = await train(args)
        report(run, vector, args)
        runs.append(run)
    if args.plot:
        plot(runs, args.plot, args.target)
        print(f"learning curve written to {args.plot}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vector", choices=["aiovec", "gymnasium", "both"], default="aiovec",
                        help="both: Gymnasium's first (it forks), then aiovec's; one plot")
    parser.add_argument("--backend", choices=["process", "thread", "inline"],
                        default="process", help="aiovec's backend")
    parser.add_argument("--num-workers", type=int,
                        help="worker processes (default: aiovec's, one per usable CPU)")
    parser.add_argument("--loop", choices=["asyncio", "uvloop", "trio"], default="asyncio")
    parser.add_argument("--no-overlap", dest="overlap", action="store_false",
                        help="aiovec with a plain `await envs.step` loop, to measure the overlap")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--total-steps", type=int, default=500_000,
                        help="the most env steps to train for")
    parser.add_argument("--target", type=float, default=475.0,
                        help=f"stop once the last {RETURN_WINDOW} episodes' mean return "
                             "reaches it")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", metavar="PNG", help="write the learning curve(s) here")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar")
    args = parser.parse_args()
    if args.num_envs < 2:
        parser.error("--num-envs must be at least 2 (two halves)")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.loop == "uvloop":
        anyio.run(main, arguments, backend="asyncio", backend_options={"use_uvloop": True})
    else:
        anyio.run(main, arguments, backend=arguments.loop)
