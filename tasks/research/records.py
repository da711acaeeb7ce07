"""The records of the research branch (LongCat-Flash-Thinking-2601 3.1.3, LongCat-DeepResearch): the search index,
search QA, research tasks, and the runs and role calls of the deep-research harness."""

from __future__ import annotations

import polars as pl

from data_contracts.schemas import JSON, STRINGS, Record, cols

SEARCH_INDEX = Record("search_index", "What a search index artifact holds: its corpus and its engine.", cols(
    corpus_source=(pl.String, "world, a local directory or file, or KIND:PATH of a QA dataset"),
    corpus_fingerprint=(pl.String, "sha256 over every document in order: the same corpus gives the same index"),
    documents=(pl.Int64, "documents indexed"),
    terms=(pl.Int64, "distinct terms of the vocabulary"),
    engine=(pl.String, "the search engine library"),
    engine_version=(pl.String, "its version"),
))

SEARCH_QA = Record("search_qa", "A question of agent-based QA synthesis: a long-tail entity's sampled attributes, the "
                   "ground truth verified with search, the answer unique, difficulty from the answer agent.", cols(
    id=(pl.String, "search_qa:<partition>:<index>"),
    question=(pl.String, "the question as asked"),
    answer=(pl.String, "the ground-truth entity's name"),
    aliases=(STRINGS, "other accepted forms of the answer"),
    entity_id=(pl.String, "the ground-truth entity"),
    doc_id=(pl.String, "its document in the search index"),
    entity_type=(pl.String, "person | organization | city | work | event | country"),
    constraints=(JSON, "[{attribute, phrase, value}]: the attributes the question states, all true of the answer"),
    n_constraints=(pl.Int64, "attributes in the final question"),
    fsm=(JSON, "[{state, event, detail}]: every state the item passed and the transition taken"),
    attempts=(pl.Int64, "question syntheses before acceptance (bounded)"),
    answer_k=(pl.Int64, "answer-agent samples"),
    answer_correct=(pl.Int64, "samples that found the ground truth"),
    answer_accuracy=(pl.Float64, "answer_correct / answer_k"),
    difficulty=(pl.String, "easy | medium | hard | unsolved, graded by the answer agent's accuracy"),
    answer_engine=(pl.String, "the answer agent's engine"),
    split=(pl.String, "train | eval"),
), key=("id",), required=("question", "answer", "fsm"), json={"constraints": "list", "fsm": "list"})

SEARCH_QA_REJECTED = Record("search_qa_rejected", "An entity agent-based QA synthesis gave up on.", cols(
    id=(pl.String, "the item's id"),
    entity_id=(pl.String, "the entity extracted, if any"),
    reason=(pl.String, "why (unverifiable attributes, a multi-answer conflict left after the retries, ...)"),
    fsm=(JSON, "[{state, event, detail}]: the states passed before giving up"),
), json={"fsm": "list"})

RESEARCH_TASK = Record("research_task", "A research question with its rubric (LongCat-DeepResearch 3.2), from a frozen "
                       "multi-source brief or from a construction article excluded from search.", cols(
    task_id=(pl.String, "research:<construction>:<partition>:<index>"),
    construction=(pl.String, "how it was constructed: brief | article"),
    query=(pl.String, "the question given to the answering agent (no rubric, no construction evidence)"),
    profile=(JSON, "the target profile: {language, topic, breadth, intended_report, as_of}"),
    topic_entity=(pl.String, "the entity the task is about"),
    brief=(JSON, "brief construction: {facts: [{fact, doc_id, excerpt}], doc_ids, limitations}; null for an article"),
    construction_doc_ids=(STRINGS, "the documents the task and rubric were built from"),
    excluded_doc_ids=(STRINGS, "documents hidden from search (the construction article)"),
    rubric=(JSON, "{criteria: [{id, title, weight, category, terms, answer_terms, together, evidence, years}]}"),
    n_criteria=(pl.Int64, "criteria retained"),
    gate=(JSON, "[{id, support, decision, doc_ids}]: the searchability gate's verdict per factual criterion"),
), key=("task_id",), required=("query", "rubric"), json={"profile": "object", "rubric": "object", "gate": "list"})

RESEARCH_TASK_REJECTED = Record("research_task_rejected", "A research task the gate or the checks refused.", cols(
    task_id=(pl.String, "the task's id"),
    construction=(pl.String, "how it was constructed: brief | article"),
    query=(pl.String, "its query"),
    reason=(pl.String, "why (a criterion left at Revise, too few searchable criteria, answer leakage, ...)"),
    gate=(JSON, "the gate's verdicts, when it ran"),
), json={"gate": "list"})

RESEARCH_RUN = Record("research_run", "One teacher execution of the research harness on a task.", cols(
    run_id=(pl.String, "hash of task, query, teacher, harness settings"),
    task_id=(pl.String, "the research task"),
    query=(pl.String, "the query researched"),
    teacher=(pl.String, "the teacher engine (reference, or openai:URL#MODEL, ...)"),
    harness=(pl.String, "the harness's name and version"),
    status=(pl.String, "complete | partial (some sections failed) | failed (the run stopped)"),
    stop_reason=(pl.String, "why a failed run stopped; null otherwise"),
    report=(pl.String, "the final report, Markdown with [cite:DOC_ID] citations"),
    spec=(JSON, "the final ResearchSpec"),
    candidate_specs=(JSON, "the Planning Writers' valid candidate specs"),
    sections=(JSON, "[{id, title, status, call_id, text, reason}] per dispatchable section"),
    directives=(JSON, "the Global Editor's directives kept"),
    decisions=(JSON, "what the harness did with each directive and Local Editor reply"),
    citations=(pl.Int64, "citations in the report"),
    citations_supported=(pl.Int64, "citations whose source supports the sentence"),
    citation_support=(pl.Float64, "citations_supported / citations; null without citations"),
    dangling_citations=(pl.Int64, "citations to a missing or excluded document"),
    rubric_score=(pl.Float64, "the task rubric's weighted score of the report (ResearchRubrics convention)"),
    rubric_verdicts=(JSON, "criterion id -> satisfied | partially | not"),
    n_calls=(pl.Int64, "role calls of the run"),
), key=("run_id",), required=("task_id", "teacher", "status"),
    json={"sections": "list", "directives": "list", "decisions": "list", "candidate_specs": "list"})

RESEARCH_CALL = Record("research_call", "One role call of a research run: who was asked what, on which inputs, and "
                       "whether its trajectory was kept.", cols(
    id=(pl.String, "<run_id>/<call_id>: the trajectory's id"),
    run_id=(pl.String, "the run"),
    call_id=(pl.String, "the call within the run (plan/writer/1, research/S1.2, edit/local/S1.2, ...)"),
    role=(pl.String, "the role: planning_writer, planning_judge, critic, reviser, researcher, global_editor..."),
    branch=(pl.String, "the section of a parallel branch (researchers, local editors); null otherwise"),
    depends_on=(STRINGS, "the calls whose outputs its inputs were made from"),
    status=(pl.String, "complete | failed"),
    error=(pl.String, "what failed, for a failed call"),
    attempts=(pl.Int64, "engine attempts"),
    tool_calls=(pl.Int64, "tool calls made"),
    teacher=(pl.String, "the teacher engine"),
    harness=(pl.String, "the harness's name and version"),
    kept=(pl.Boolean, "whether its trajectory passed the filters"),
    filter_reason=(pl.String, "why it was filtered out (role identity, tool closure, artifact validity)"),
), key=("id",), required=("run_id", "call_id", "role", "status"))
