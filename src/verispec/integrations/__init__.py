"""verispec inside other engines. Nothing in verispec imports this package.

* :mod:`.vllm`: verispec's prompt lookup and its per-request cost cut as a vLLM proposer
  (``speculative_config={"method": "custom_class", "model": "verispec.integrations.vllm.VerispecLookupProposer"}``).
* ``vllm_bench.py``: the script ``verispec bench --compare vllm`` runs with the python of a vLLM
  environment (it imports vLLM; verispec's own processes never import it).
"""
