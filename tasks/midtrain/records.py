"""The records of the cold-start selection (LongCat-Flash-Thinking-2601 3.1.2): each candidate's score and fate, and the
selection's figures. Every route writes the ``trajectory`` record of the trajectory standard."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import Record, cols

SELECTION_SCORE = Record("selection_score", "One candidate of a cold-start selection: its sliding-window perplexity "
                         "score and what the selection did with it (LongCat-Flash-Thinking-2601 3.1.2).", cols(
    id=(pl.String, "the candidate trajectory"),
    source=(pl.String, "its synthesis route"),
    domain=(pl.String, "its domain or topic"),
    parent_id=(pl.String, "the trajectory it was augmented from, null for an original"),
    tokens=(pl.Int64, "its length with the project tokenizer"),
    score=(pl.Float64, ("max over sliding windows of the window's mean perplexity under the reference model; null "
                       "when not scored")),
    mean_perplexity=(pl.Float64, "perplexity of the whole sequence (what average filtering uses), for comparison"),
    weight=(pl.Float64, "the factor its K-Center-Greedy distance is weighted by (score ** alpha, normalized)"),
    status=(pl.String, ("selected | not_selected | duplicate | near_duplicate | too_long | not_verified | heldout | "
                       "mixture_cap")),
    pick=(pl.Int64, "its position in the greedy order, null when not selected"),
    distance=(pl.Float64, "embedding distance to the nearest selected candidate (0 for a selected one)"),
), key=("id",), required=("source", "status"))

SELECTION_SUMMARY = Record("selection_summary", "Figures of one selection: coverage, score distribution, mixture.",
                           cols(
    name=(pl.String, "the figure (coverage_mean_distance, score_p50, mixture:<route>, ...)"),
    value=(pl.Float64, "its value"),
    note=(pl.String, "what it means or how it was set"),
), key=("name",))
