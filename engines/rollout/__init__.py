"""The rollout lane (lane.py: RolloutLane): sample tasks, run agent episodes on the
server pool, grade their patches in the sandbox, and turn the result into rows of
the `rollouts` table; the step's episode metrics (metrics.py); every task's first
prompt checked against the episode's token budget before a server starts
(prompt_fit.py); published versions copied to a server host (weight_cache.py), and the
servers of other hosts reported through the lake (server_hosts.py). Plain Python; the
Prefect tasks in `tasks/rollout.py` wrap the lane's methods."""
