"""The ways a kept task's rubric must see an agent go wrong (DESIGN.md section 7): each mutation is the golden
trajectory changed once, and replayed it must score 0. Names only, importable without the environment machinery
(the CLI's ``--mutate`` lists them); :func:`envgen.taskgen.mutate` builds them.

- ``drop-write``: the last write left out;
- ``wrong-arg``: the last write with one argument changed;
- ``wrong-row``: the last write on another row of its table;
- ``extra-write``: one more successful write the task did not ask for.
"""

MUTATIONS = ("drop-write", "wrong-arg", "wrong-row", "extra-write")
