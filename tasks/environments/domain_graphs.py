"""Stage `domain_graphs`: every shipped domain spec compiled to its tools and their dependency graph, and every tool
executed once on a seeded database (LongCat-Flash-Thinking-2601 section 3.1.1, Environment Scaling)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import polars as pl
from pydantic import Field

from data_contracts.schemas import between
from data_contracts.stage import Artifact, Params, seed_for, stage
from envgen.compiler import compile_domain
from envgen.construct import MIN_DOMAIN_TOOLS, executability
from envgen.domain_spec import domain_paths, load_domain, resolve_domains
from tasks.environments.records import DOMAIN_GRAPH


class DomainGraphsParams(Params):
    domains: str = Field("all", description="'all' or a comma-separated list of shipped domain names.")
    seed: int = Field(0, description="Seed of the database the executability check runs every tool against.")
    min_tools: int = Field(MIN_DOMAIN_TOOLS, description="Each domain must compile to at least this many tools "
                                                       "(report: 60+).")

    def local_inputs(self) -> list[str]:
        """The spec files of the selected domains: editing a spec rebuilds its graphs."""
        paths = domain_paths()
        return [str(paths[name]) for name in resolve_domains(self.domains)]



DOMAIN_CONTRACT = DOMAIN_GRAPH.contract(
    expectations=(between("executability", 1.0, 1.0), between("n_tools", min_value=MIN_DOMAIN_TOOLS)), min_rows=1)


# 3: specs name their customer entity (real_estate, university declare it); 4: actions declare actor and words,
# fields internal, relations crossing; name fields made searchable add find tools
@stage(name="domain_graphs", version="4", params=DomainGraphsParams, outputs={"domains": DOMAIN_CONTRACT})
def domain_graphs(inputs: Mapping[str, Artifact], params: DomainGraphsParams, partition: str) -> dict[str, pl.DataFrame]:
    """Compile every selected domain spec; execute every tool on a seeded database."""
    rows = []
    for name in resolve_domains(params.domains):
        domain = compile_domain(load_domain(name))
        if len(domain.tools) < params.min_tools:
            raise ValueError(f"domain {name!r} compiles to {len(domain.tools)} tools, below min_tools="
                             f"{params.min_tools}; add entities, relations or actions to its spec")
        rate, failed = executability(domain, seed_for(params.seed, "domain_graphs", partition, 0))
        writes = domain.writes()
        rows.append({
            "domain": name, "spec_json": domain.spec.model_dump_json(), "spec_hash": domain.spec.spec_hash,
            "n_entities": len(domain.spec.entities), "n_tools": len(domain.tools),
            "n_read_tools": len(domain.tools) - len(writes), "n_write_tools": len(writes),
            "tools": json.dumps(domain.schemas()), "read_write_map": json.dumps(domain.read_write_map()),
            "edges": json.dumps(sorted([u, v] for u, v in domain.graph.edges)),
            "n_edges": domain.graph.number_of_edges(), "density": round(domain.density, 6),
            "executability": rate, "failed_tools": failed,
        })
    return {"domains": DOMAIN_GRAPH.frame(rows)}
