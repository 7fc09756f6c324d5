"""Conditional flow matching sampler: integrate the estimator's velocity from fixed noise to a mel.

Upstream: ``cosyvoice/flow/flow_matching.py::CausalConditionalCFM`` (+ ``ConditionalCFM.solve_euler``).
Euler steps on a cosine time grid, classifier-free guidance as one batch of two (conditioned and
unconditioned), and a start noise that is the same fixed tensor on every call, which is what makes
the flow deterministic and lets streaming re-computations reproduce frames already emitted.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import nn

from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.models.flow.branches import run_branches, use_branch_threads
from cosyvoice_mac.models.flow.prefix import StepState

MEL_BINS = 80
MEL_FRAME_RATE = 50  # mel frames per second (24 kHz audio, hop 480)
NOISE_SEED = 0
NOISE_FRAMES = 15000  # upstream draws 300 s of noise once; longer sequences cannot be generated
MAX_SECONDS = NOISE_FRAMES // MEL_FRAME_RATE


class FlowInputError(ValueError):
    """Input the flow cannot turn into a mel (bad token ids, wrong shapes, too long): safe to show a user."""


@functools.lru_cache(maxsize=1)
def _noise_buffer() -> torch.Tensor:
    # Same values as upstream's torch.manual_seed(0); torch.randn(1, 80, 15000): a fresh CPU generator
    # seeded 0 is the default generator's Mersenne Twister state, without touching global RNG state.
    generator = torch.Generator().manual_seed(NOISE_SEED)
    return torch.randn(1, MEL_BINS, NOISE_FRAMES, generator=generator)


def check_frame_count(frames: int) -> None:
    """Raise :class:`FlowInputError` if ``frames`` (prompt + generated mel frames) exceed the fixed noise."""
    if frames > NOISE_FRAMES:
        raise FlowInputError(
            f"the flow can make at most {NOISE_FRAMES} mel frames ({MAX_SECONDS} s of prompt plus generated "
            f"speech) per call, but {frames} frames ({frames / MEL_FRAME_RATE:.1f} s) were asked for; "
            "use a shorter voice prompt or split the text into shorter sentences"
        )


def fixed_start_noise(
    frames: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32, start: int = 0
) -> torch.Tensor:
    """Frames ``start .. start + frames - 1`` of the fixed start noise, ``(1, 80, frames)``, on ``device``."""
    check_frame_count(start + frames)
    return _noise_buffer()[:, :, start : start + frames].to(device=device, dtype=dtype)


@dataclass
class CFMConfig:
    """Sampler settings (yaml ``flow.decoder.cfm_params``); the step count is fixed in upstream code."""

    n_timesteps: int = 10
    inference_cfg_rate: float = 0.7
    t_scheduler: str = "cosine"

    @classmethod
    def from_yaml(cls, decoder_node: dict) -> "CFMConfig":
        params = decoder_node.get("cfm_params", {})
        params = params.get("content", params)  # an omegaconf.DictConfig node wraps its values
        solver = params.get("solver", "euler")
        if solver != "euler":
            raise ConfigError(f"flow.decoder.cfm_params.solver is {solver!r}; only 'euler' is supported")
        scheduler = params.get("t_scheduler", "cosine")
        if scheduler not in ("cosine", "linear"):
            raise ConfigError(f"flow.decoder.cfm_params.t_scheduler is {scheduler!r}; expected 'cosine' or 'linear'")
        return cls(inference_cfg_rate=float(params.get("inference_cfg_rate", 0.7)), t_scheduler=scheduler)


class ConditionalFlowMatching(nn.Module):
    """Owns the velocity ``estimator`` (DiT for v3, U-Net for v2) and runs the guided Euler sampler around it.

    The Euler state and the time grid are fp32 whatever dtype the estimator runs in.
    """

    def __init__(self, estimator: nn.Module, config: CFMConfig):
        super().__init__()
        self.estimator = estimator
        self.config = config

    def time_grid(self, device: torch.device) -> torch.Tensor:
        """``(n_timesteps + 1,)`` fp32 times from 0 to 1; cosine: ``1 - cos(pi/2 * k/n)`` (denser near 0)."""
        grid = torch.linspace(0, 1, self.config.n_timesteps + 1, device=device, dtype=torch.float32)
        if self.config.t_scheduler == "cosine":
            grid = 1 - torch.cos(grid * 0.5 * math.pi)
        return grid

    def velocity(self, x, mask, mu, t, spks, cond, streaming: bool, state: StepState | None = None) -> torch.Tensor:
        """Guided velocity ``(1 + w) v(cond) - w v(uncond)``: both branches in one estimator call of batch 2B
        (on a CPU with batch 1: two calls side by side, see ``branches.py``).

        The unconditioned branch zeroes ``mu``, ``spks`` and ``cond``; ``x``, ``t`` and ``mask`` are shared.
        """
        dtype = next(self.estimator.parameters()).dtype
        batch = x.shape[0]
        rate = self.config.inference_cfg_rate
        if batch == 1 and use_branch_threads(x):
            conditioned, unconditioned = self._side_by_side(x, mask, mu, t, spks, cond, streaming, state, dtype)
            return (1.0 + rate) * conditioned - rate * unconditioned
        pair = lambda z: torch.cat([z, z]).to(dtype)  # noqa: E731
        conditioned_only = lambda z: torch.cat([z, torch.zeros_like(z)]).to(dtype)  # noqa: E731
        out = self.estimator(
            pair(x),
            pair(mask),
            conditioned_only(mu),
            t.reshape(1).expand(2 * batch).float(),
            conditioned_only(spks),
            conditioned_only(cond),
            streaming=streaming,
            state=state,
        ).float()
        return (1.0 + rate) * out[:batch] - rate * out[batch:]

    def _side_by_side(self, x, mask, mu, t, spks, cond, streaming, state, dtype):
        """(conditioned, unconditioned) velocities from two batch-1 estimator calls run at once."""
        if state is None:
            states = (None, None)
        elif state.recording:
            states = (StepState(keep=state.keep), StepState(keep=state.keep))
        else:
            states = (state.branch(0), state.branch(1))
        x, mask, time = x.to(dtype), mask.to(dtype), t.reshape(1).float()

        def branch(index: int):
            features = (mu, spks, cond) if index == 0 else tuple(torch.zeros_like(z) for z in (mu, spks, cond))
            return lambda: self.estimator(
                x,
                mask,
                features[0].to(dtype),
                time,
                features[1].to(dtype),
                features[2].to(dtype),
                streaming=streaming,
                state=states[index],
            ).float()

        conditioned, unconditioned = run_branches(branch(0), branch(1))
        if state is not None and state.recording:
            state.join(list(states))
        return conditioned, unconditioned

    @torch.inference_mode()
    def forward(
        self,
        mu: torch.Tensor,
        mask: torch.Tensor,
        spks: torch.Tensor,
        cond: torch.Tensor,
        streaming: bool = False,
        states: list[StepState] | None = None,
    ) -> torch.Tensor:
        """``mu, cond (B, 80, T)``, ``mask (B, 1, T)``, ``spks (B, 80)`` -> mel ``(B, 80, T)`` fp32.

        ``states`` (one per Euler step, streaming only): record these frames as a cached prefix, or,
        if already recorded, make the ``T`` frames that follow the prefix (noise taken from there on).
        """
        return self.solve(self.start_noise(mu, states), mu, mask, spks, cond, streaming, states)

    def start_noise(self, mu: torch.Tensor, states: list[StepState] | None = None) -> torch.Tensor:
        """The fixed start noise ``(B, 80, T)`` for ``mu``'s frames (after a recorded prefix: from where it ends)."""
        start = states[0].frames if states and not states[0].recording else 0
        return fixed_start_noise(mu.shape[2], mu.device, start=start).expand(mu.shape[0], -1, -1)

    def solve(self, x, mu, mask, spks, cond, streaming: bool, states: list[StepState] | None) -> torch.Tensor:
        """The Euler steps from start noise ``x (B, 80, T)``; the other arguments as :meth:`forward`.

        With recorded ``states`` it only reads device tensors and never waits for the device, so a
        CUDA graph can capture it (``models/cuda/flow_*graphs.py``).
        """
        if states is not None and (len(states) != self.config.n_timesteps or not streaming):
            raise ValueError(f"a cached prefix needs streaming=True and {self.config.n_timesteps} step states")
        grid = self.time_grid(mu.device)
        # Upstream advances t by accumulating dt (t += dt; dt = grid[k+1] - t); kept for parity.
        t, dt = grid[0], grid[1] - grid[0]
        for step in range(1, len(grid)):
            state = None if states is None else states[step - 1]
            x = x + dt * self.velocity(x, mask, mu, t, spks, cond, streaming, state)
            t = t + dt
            if step < len(grid) - 1:
                dt = grid[step + 1] - t
        if states is not None and states[0].recording:
            for state in states:
                state.frames = mu.shape[2] if state.keep is None else state.keep
                state.recording, state.keep = False, None
        return x
