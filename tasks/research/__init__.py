"""Deep research data (LongCat-DeepResearch): the ``search_index`` over the world corpus, ``search_qa`` (obfuscated
multi-hop questions), ``research_tasks`` (briefs with rubrics) and ``research_trajectories`` (role trajectories of
the research harness)."""
