"""The local search environment: a BM25 index over a local corpus and question-answering episodes on it,
behind the same interface as the tool environments of ``envgen.environment``.

``corpus`` loads documents (the world's, a directory of text/Markdown/JSONL files, HotpotQA/2Wiki/MuSiQue
paragraphs); ``index`` builds a ``SearchIndex`` into a directory and opens it; ``environment`` holds the tools
(search, open, read) and ``SearchEnvironment``; ``claims`` reads what a sentence claims (entities, relations with
their direction, figures bound to attributes, negation) and ``support`` decides whether cited documents state it;
``agent`` is the reference search agent of agent-based QA synthesis.
"""

from tasks.research.search.corpus import Corpus, CorpusError, Document, Section, load_corpus
from tasks.research.search.environment import TOOL_SCHEMAS, SearchConfig, SearchEnvironment
from tasks.research.search.index import Hit, SearchIndex

__all__ = ["TOOL_SCHEMAS", "Corpus", "CorpusError", "Document", "Hit", "SearchConfig", "SearchEnvironment",
           "SearchIndex", "Section", "load_corpus"]
