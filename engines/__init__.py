"""The heavy machinery, usable as a plain library without Prefect.

- `engines.protocol`  the agent's action language and chat roles (shared contract)
- `engines.model`     the tiny Qwen3-MoE and its locally trained tokenizer
- `engines.env`       tasks, the bubblewrap sandbox, agent tools, grading
- `engines.inference` the vLLM server pool, client and agent loop
- `engines.trainer`   loss, packing, router replay, distributed training, export
"""
