"""Stage `midtrain_text`: text-driven mid-training trajectories (LongCat-Flash-Thinking-2601 section 2, "Text-driven
synthesis"; the procedure is ``envgen.midtrain.text``): procedural texts become tool schemas and call lists, then
multi-turn trajectories, kept only when every schema validates and every call's arguments conform to it.

``corpus: specs`` (the offline default) renders how-to texts from the shipped domain specs' tool docs and policies
(a chain sampled from each domain's graph per text); a local directory of .txt/.md files is parsed in the same
how-to format, and with a teacher engine any text the parser cannot read (a real tutorial) is extracted by the
teacher. A text without a usable procedure goes to ``rejected`` with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from pydantic import Field, field_validator

from data_contracts.schemas import ITEM_REJECTED, TRAJECTORY
from data_contracts.stage import REJECTED, Artifact, StageError, rng_for, stage
from envgen.compiler import compiled_domains
from envgen.construct import sample_chain
from envgen.midtrain.records import SCHEMA, verify_schema
from envgen.midtrain.synth import identifying_tool
from envgen.midtrain.text import (
    EXTRACTION_PROMPT,
    HowToError,
    howto_from_json,
    parse_howto,
    render_howto,
    steps_with_a_reason,
    trajectory,
)
from tasks.tokenizer import keyword_or_dir, text_files
from tasks.trajectories import (
    TrajectoryParams,
    make_row,
    open_teacher,
    token_counter,
    too_long,
    trajectory_contract,
)

STAGE = "midtrain_text"


class MidtrainTextParams(TrajectoryParams):
    corpus: str = Field("specs", description="'specs' (how-to texts rendered from the domain specs) or a local "
                        "directory of .txt/.md procedural texts")
    texts_per_domain: int = Field(4, ge=0, description="how-to texts rendered per domain (corpus: specs)")
    max_reads: int = Field(3, ge=1, le=8, description="most read steps before the write of a rendered procedure")

    @field_validator("corpus")
    @classmethod
    def _corpus(cls, value: str) -> str:
        return keyword_or_dir("corpus", value, "specs", "how-to texts rendered from the domain specs")

    def local_inputs(self) -> list[str]:
        return super().local_inputs() + ([] if self.corpus == "specs" else [self.corpus])


def spec_texts(inputs: Mapping[str, Artifact], params: MidtrainTextParams, partition: str) -> list[tuple[str, str, str]]:
    """(id, domain, text) of the rendered how-to corpus."""
    domains = compiled_domains(inputs["domain_graphs"].read("domains"))
    out = []
    for name in sorted(set(domains) - set(params.heldout)):
        domain = domains[name]
        for i in range(params.texts_per_domain):
            rng = rng_for(params.seed, STAGE, f"{partition}/{name}", i)
            chain = sample_chain(domain, rng, set(domain.tools), params.max_reads)
            identify = identifying_tool(domain, set(domain.tools))
            if chain and identify is not None and identify.name not in chain:
                chain = [identify.name, *chain]  # the customer is identified before anything changes
            if chain:
                chain = steps_with_a_reason(domain, chain, keep_first=identify is not None)
                goal = domain.tools[chain[-1]].description.split(". ")[0].rstrip(".").lower()
                out.append((f"{STAGE}:{name}:{i:05d}", name, render_howto(domain, chain, goal)))
    return out


# 2: the customer identified first; simulated results keep the values calls were given; the outcome stated
@stage(name=STAGE, version="2", params=MidtrainTextParams, inputs=("domain_graphs", "tokenizer"),
       outputs={"trajectories": trajectory_contract([STAGE]), REJECTED: ITEM_REJECTED.contract()})
def midtrain_text(inputs: Mapping[str, Artifact], params: MidtrainTextParams, partition: str) -> dict[str, pl.DataFrame]:
    """Procedural texts -> tool schemas and call lists -> schema-conformant multi-turn trajectories."""
    if params.corpus == "specs":
        texts = spec_texts(inputs, params, partition)
    else:
        files = text_files(params.corpus)
        if not files:
            raise StageError(f"midtrain_text: corpus directory {params.corpus} holds no .txt/.md files")
        texts = [(f"{STAGE}:{path.stem}", "text", path.read_text(encoding="utf-8", errors="replace")) for path in files]
    count, teacher = token_counter(params, inputs), open_teacher(params)
    rows, rejected = [], []
    try:
        for i, (item_id, domain, text) in enumerate(texts):
            try:
                try:
                    howto = parse_howto(text)
                except HowToError:
                    if teacher.engine is None:
                        raise
                    howto = howto_from_json(teacher.ask(EXTRACTION_PROMPT + text[:12000]))
                messages = trajectory(howto, rng_for(params.seed, STAGE, partition, i))
            except HowToError as exc:
                rejected.append({"id": item_id, "reason": f"no_procedure: {exc}"})
                continue
            except Exception as exc:  # noqa: BLE001 - a teacher failure rejects this text only
                rejected.append({"id": item_id, "reason": f"teacher: {type(exc).__name__}: {str(exc)[:200]}"})
                continue
            tokens = count(messages, howto.tools)
            failed = verify_schema(messages, howto.tools)
            reason = f"not_verified: {failed}" if failed else too_long(tokens, params)
            if reason:
                rejected.append({"id": item_id, "reason": reason})
                continue
            rows.append(make_row(id=item_id, source=STAGE, messages=messages, tools=howto.tools, verifier=SCHEMA,
                                 verify_input={"limits": params.limits(), "teacher": teacher.name,
                                               "goal": howto.goal}, tokens=tokens, domain=domain, seed_id=item_id))
    finally:
        teacher.close()
    return {"trajectories": TRAJECTORY.frame(rows), REJECTED: ITEM_REJECTED.frame(rejected)}
