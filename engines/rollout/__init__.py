"""One rollout step end to end: sample tasks, run agent episodes on the server
pool, grade their patches in the sandbox, compute group advantages, and turn the
result into rows of the `rollouts` table. Plain Python; the Prefect tasks in
`tasks/rollout.py` wrap it."""
