"""Inference on vLLM: a managed server pool, a token-in/token-out client, the
multi-turn agent loop and live weight updates.

vLLM runs as separate server processes in its own environment (found through
TANDEM_VLLM_PYTHON); nothing here imports vLLM. Everything talks to it over HTTP.

    config.py          InferenceConfig: servers, sampling defaults, episode limits, cluster options,
                       and the check of pass-through server arguments
    types.py           plain data: sampling params, completions, episodes, the EpisodeEnv protocol
    launch.py          the vLLM command line and environment for one server, cluster-layout flags
    server_process.py  one local server's life (start, health poll, stop); ServerSlot
    client.py          /v1/completions with token ids in and out; one function per other vLLM route
    batching.py        requests with the same sampling coalesced into one multi-prompt request
    server_pool.py     many servers behind one object: requests, routing, re-sends
    server_fleet.py    the servers' lives: start or attach, stop, crash restarts
    remote_hosts.py    what the pool asks of its other machines' servers (inference.hosts > 1)
    disaggregation.py  prefill/decode: each request through a prefill server, then a decode server
    weight_update.py   the served weights and their one writer: reload and restart updates, restart-and-verify
    weight_files.py    the folders servers load published weights from, and the digest checks
    agent.py           token-exact multi-turn episodes against an EpisodeEnv
    vllm_extension/    runs inside vLLM's servers: exact in-place reloads, digests of loaded tensors,
                       a CPU platform plugin that forks the engine core (ready in 10 s, not 17)
"""
