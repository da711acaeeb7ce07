"""The deep-research harness of LongCat-DeepResearch (section 3.1), one file per role family.

- ``research_spec``: ResearchSpec, its validators, repair (renumbering, the planner asked again) and revert;
- ``prompts``: every role's system prompt and inputs; ``roles``: a role call as an agent over any Engine and the
  search environment (``tasks.research.search``), with its own context;
- ``planning``: Planning Writers, Planning Judge, Critic, Reviser; ``researchers``: one Researcher per section,
  concurrent on any executor (a Dask cluster's); ``editors``: assembly, Global Editor, Local Editors;
- ``citations``: every citation checked against the corpus; ``rubric``: rubrics and grading; ``evidence``: the
  bounded-search support check the research tasks' gate and QA synthesis share;
- ``session``: settings and the append-only, resumable journal; ``run``: ``run_research``;
  ``trajectories``: the filters and the rows of the ``trajectory`` record (``trajectory_rows``);
- ``knowledge`` and ``reference``: the world knowledge graph and the offline reference teacher (named so).
"""
