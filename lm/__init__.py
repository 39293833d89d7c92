"""Language-model generation on kiln: a decoder-only LM compiled with its KV cache, and a generate loop.

``kiln.compile_lm(hf_model, max_batch=8, max_len=2048)`` returns a
:class:`CompiledLM` with ``generate`` and ``stream``; see :mod:`kiln.lm.generate`
(the loop and the cache) and :mod:`kiln.lm.export` (the graphs).
"""

from .generate import CompiledLM, KVCache, compile_lm

__all__ = ["CompiledLM", "KVCache", "compile_lm"]
