"""Deep research data (LongCat-DeepResearch): the ``search_index`` over the world corpus, ``search_qa`` (obfuscated
multi-hop questions), ``research_tasks`` (briefs with rubrics) and ``research_trajectories`` (role trajectories of
the research harness). The procedure only this branch uses lives beside its stages: ``search`` (the local search
environment, its claims and support checks, and the search agent of QA synthesis) and ``harness`` (the
deep-research harness, its roles, checks and reference teacher)."""
