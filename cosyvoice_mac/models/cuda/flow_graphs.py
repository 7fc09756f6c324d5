"""Which CUDA graph serves a flow call: the one seam between :class:`~cosyvoice_mac.models.flow.Flow` and its graphs.

The flow reaches this module through ``Flow.cuda_graphs(device)`` only where the device is CUDA, so the CPU, MPS
and MLX never import it. It gives the flow its graph owners on first use (``flow.shared_graphs``:
:mod:`.flow_shared_graphs`; ``flow.length_graphs``: :mod:`.flow_length_graphs`; ``prefix.graphs``:
:mod:`.flow_prefix_graphs`) and picks, per call, the graph that serves it or None (run the sampler eagerly).
"""

from __future__ import annotations

import torch

from cosyvoice_mac.models.cuda.flow_length_graphs import LengthGraphs
from cosyvoice_mac.models.cuda.flow_prefix_graphs import PrefixGraphs
from cosyvoice_mac.models.cuda.flow_shared_graphs import SharedFlowGraphs
from cosyvoice_mac.models.flow.prefix import FlowPrefix, StepState


def attach(flow) -> None:
    """Give ``flow`` its graph owners where it has none yet."""
    if flow.shared_graphs is None:
        flow.shared_graphs = SharedFlowGraphs()  # a new voice's prefix build and first chunk, by prefix length
    if flow.length_graphs is None:
        flow.length_graphs = LengthGraphs()  # a whole non-streaming call, by padded length bucket


def prefix_graphs(prefix: FlowPrefix) -> PrefixGraphs:
    """The graphs of the chunks after ``prefix`` (they read its tensors, so they go with it), made on first use."""
    if prefix.graphs is None:
        prefix.graphs = PrefixGraphs()
    return prefix.graphs


def sample(flow, mu, mask, speaker, cond, streaming: bool, prefix: FlowPrefix | None) -> torch.Tensor | None:
    """The sampler's mel for this call (shapes as :meth:`ConditionalFlowMatching.forward`) from the graph that serves
    it: any voice's first chunk from the shared graphs, else this voice's own graph, else a whole sentence from its
    length bucket; None where none serves (run the sampler eagerly)."""
    decoder = flow.decoder
    if prefix is not None:
        own = prefix_graphs(prefix)
        if flow.shared_graphs.applies(decoder, mu, prefix):
            return flow.shared_graphs.sample(decoder, mu, mask, speaker, cond, prefix)
        if own.applies(decoder, mu):
            return own.sample(decoder, mu, mask, speaker, cond, prefix.steps)
        return None
    if not streaming and flow.length_graphs.wanted(mu.device, mu.dtype):
        return flow.length_graphs.sample(decoder, mu, mask, speaker, cond)
    return None


def build(flow, mu, mask, speaker, cond) -> list[StepState] | None:
    """A prefix's recorded step states replayed from the shared build graph of its length; None: build it eagerly."""
    if flow.shared_graphs.wanted(mu.device):
        return flow.shared_graphs.build(flow.decoder, mu, mask, speaker, cond)
    return None


def after_build(flow, prefix: FlowPrefix) -> None:
    """Note that the shared slots of ``prefix``'s length hold ``prefix`` (it was just built from them)."""
    flow.shared_graphs.after_build(prefix)
    prefix_graphs(prefix)


def first_chunk_missing(flow, prefix: FlowPrefix, device: torch.device) -> bool:
    """Whether no graph serves the first chunk after ``prefix`` yet (neither a shared one nor its own) and one may be
    captured now."""
    if flow.shared_graphs.has_first_chunk(prefix):  # shared: captured for an earlier voice
        return False
    own = prefix_graphs(prefix)
    return own.wanted(device) and not own.graphs
