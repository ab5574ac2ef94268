"""The MoE trainer: RL loss against inference logprobs, group advantages, sequence
packing, router replay, multi-process training, resumable state and vLLM-ready
weight export. Usable as a plain library; `engines.trainer.lane` is its entry point
in the asynchronous RL loop.

Owns: turning episodes (storage.schema.ROLLOUTS rows) into optimizer steps and
weight versions. Does not own: generating or grading episodes, scheduling (flows).
"""
