"""Inference on vLLM: a managed server pool, a token-in/token-out client, the
multi-turn agent loop and live weight updates.

vLLM runs as separate server processes in its own environment (found through
TANDEM_VLLM_PYTHON); nothing here imports vLLM. Everything talks to it over HTTP.

    config.py        InferenceConfig: servers, sampling defaults, episode limits, cluster options
    types.py         plain data: sampling params, completions, episodes, the EpisodeEnv protocol
    launch.py        the vLLM command line and environment for one local server
    server_process.py  one local server's life: start, health poll, stop
    routes.py        one small function per vLLM HTTP route
    client.py        /v1/completions with token ids in and out, timeouts, bounded retries
    batching.py      requests with the same sampling coalesced into one multi-prompt request
    server_pool.py   many servers behind one object: requests, re-sends; built from
    server_slot.py   plain data: one server as the pool sees it, the weights servers should serve
    server_fleet.py  the servers' lives: start or attach, stop, crash restarts
    routing.py       session affinity, else the least-loaded routable server
    weight_reload.py / weight_restart.py  the two weight-update strategies
    weight_check.py  servers checked against the exported weights' digests, and each other
    agent.py         token-exact multi-turn episodes against an EpisodeEnv
"""
