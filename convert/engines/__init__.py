"""Where ``convert batch`` runs its models: processes on this machine, or tasks on a Ray cluster.

An engine has a ``description`` for the summary and ``run(jobs, commands, done)``, which runs every job's command
and calls ``done(job, exit_code, seconds, where)`` as each one ends (``done(job, None, 0, where, failure)`` when one
could not run to its end); Ctrl-C reaches every running model.
"""
