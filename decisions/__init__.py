"""The state machine's pure decisions: what a job snapshot means for the run and which action
comes next (observe.py, the monitor's Choice state), and what the plan step does after a
finding (plan.py: the next run_spec, a probe, or the end). Functions of the state and what
was seen; they read and write nothing. The Prefect tasks call them."""
