"""Evaluation over any Engine (LongCat-Flash-Thinking-2601 sections 4 and 5.1; LoongRL's length figures): suites of
held-out items read from artifacts (``suites``, ``items``), strategies computed from one set of samples per item
(``strategies``: single sample, self-consistency, best-of-k, Heavy Thinking, the context-management ablation), and the
figures built from the results (``summary``: Avg@k, Pass@k, bootstrap intervals, breakdowns, robustness gaps,
matched budgets; ``report``: tables, budget, length and robustness plots, the HTML report)."""
