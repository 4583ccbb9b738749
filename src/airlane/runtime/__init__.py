"""What running Airlane needs beyond the pure core, shared by every transport.

- `acceptor`: takes a listening socket's waiting connections in batches;
- `handoff`: sibling processes (``--workers``) pass accepted connections to each other;
- `loadboard`: they tell each other how many streams they produce, to place new ones;
- `admission`: new streams' set-up waits while the loop's timed work is due (`Overloaded`);
- `timers`: `DeadlineTimer`, one loop timer re-armed from a sans-I/O machine's ``get_timer()``;
- `eager`: `start_eagerly`, a coroutine's first steps run in the caller's loop turn;
- `drains`: end-of-turn drains of the streams that became ready;
- `callcontext`: `CALL`, the model and request identity of the call being served;
- `plain`: `plain_context`, one empty context for call-backs that read no context variable;
- `lazy`: `lazy_exports`, package re-exports imported on first use.

Nothing is imported here: each module is imported by its own path, so that importing one
(`airlane.runtime.lazy` by ``import airlane``) loads nothing else.
"""

__all__: list[str] = []
