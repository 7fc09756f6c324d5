"""CUDA-only tuning of the networks: graphs replayed per call, Triton kernels, eager-rounding kernels.

Nothing here changes what a network computes; it changes how fast CUDA runs it. The networks reach this folder
only through a few seams that import it inside a function, where the device is CUDA (``tests/test_layers.py``
lists them), so the CPU, MPS and MLX never load it:

* ``llm/decoding.py`` -> :mod:`.decode_graphs` (the decoding step as graphs, with :mod:`.device_sampling` and
  :mod:`.triton_kernels`), :mod:`.eager_kernels` (a compiled 16-bit step that keeps eager's rounding) and
  :mod:`.products` (fp32 attention as matrix products);
* ``flow/flow.py`` -> :mod:`.flow_graphs` (which of :mod:`.flow_shared_graphs`, :mod:`.flow_prefix_graphs` and
  :mod:`.flow_length_graphs` serves a call); ``flow/dit.py`` -> :mod:`.products` (the position convolutions);
* ``vocoder/hift.py`` -> :mod:`.vocoder_graphs` (the streamed calls).
"""
